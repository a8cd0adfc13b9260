"""The packages import in one order only (docs/architecture.md, "Layers").

Every ``import`` of a tracemerge module, at module level or inside a function (a deferred
import is still a dependency), and including ``TYPE_CHECKING`` imports, must go to a layer
at or below the importer's. A new module or package must be given a layer here and in
docs/architecture.md; an import against the order fails this test, and so the build.
"""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tracemerge")

# lowest first; a name is a top-level module or package of tracemerge ("" is tracemerge/__init__.py)
LAYERS = [
    ("base", {"", "errors", "model", "registry", "files", "runtime", "algorithms"}),
    ("capture", {"capture"}),      # runs inside the job's workers: base only
    ("read", {"inputs"}),
    ("native", {"native"}),        # the compiled reader/writer, with the Python reader as its fallback
    ("correlate", {"correlate"}),
    ("align", {"clocks"}),
    ("job", {"job"}),
    ("place", {"place"}),
    ("write", {"formats"}),
    ("analyse", {"analysis"}),
    ("merge", {"merge"}),
    ("report", {"report"}),
    ("tables", {"tables"}),        # the job as Arrow/pandas tables and Parquet: reads every layer below
    ("commands", {"commands", "cli", "__main__"}),  # commands/compose.py: combine with the analyses drawn in
]
LAYER_OF = {name: n for n, (_, names) in enumerate(LAYERS) for name in names}


def _top(module):
    """The top-level tracemerge name of a dotted module ("" for the package itself), else None."""
    parts = module.split(".")
    if parts[0] != "tracemerge":
        return None
    return parts[1] if len(parts) > 1 else ""


def _imports(path, package):
    """(line, imported tracemerge module) of every import in the file."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            # `from tracemerge import native` imports the module tracemerge.native
            if _top(module) == "":
                for alias in node.names:
                    yield node.lineno, f"tracemerge.{alias.name}"


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                    package = ".".join(rel)
                else:
                    package = ".".join(rel[:-1])
                yield path, ".".join(rel), package


def violations():
    found = []
    for path, module, package in _modules():
        own = _top(module)
        if own not in LAYER_OF:
            found.append(f"{os.path.relpath(path, ROOT)}: tracemerge.{own} has no layer in tests/test_layers.py")
            continue
        for line, target in _imports(path, package):
            top = _top(target)
            if top is None or top == own or top not in LAYER_OF and not _is_module(top):
                continue
            if top not in LAYER_OF:
                found.append(f"{os.path.relpath(path, ROOT)}:{line}: imports tracemerge.{top}, which has no layer")
            elif LAYER_OF[top] > LAYER_OF[own]:
                found.append(f"{os.path.relpath(path, ROOT)}:{line}: {LAYERS[LAYER_OF[own]][0]} layer "
                             f"(tracemerge.{own}) imports {target} of the {LAYERS[LAYER_OF[top]][0]} layer above it")
    return found


def _is_module(top):
    return os.path.exists(os.path.join(PACKAGE, top + ".py")) or os.path.isdir(os.path.join(PACKAGE, top))


def test_every_import_goes_down_the_layers():
    found = violations()
    assert not found, "imports against the layer order (docs/architecture.md):\n" + "\n".join(found)


def test_the_base_modules_do_not_import_each_other_in_a_loop():
    """Within the base layer, modules may import each other, but never in a loop."""
    base = LAYERS[0][1]

    def unit(module):
        """A base module as the loop check sees it: files.output, not the files package as a whole
        (its modules import modules of runtime/ and algorithms/ and back, one module at a time)."""
        top = _top(module)
        if top not in base or not top:
            return None
        return ".".join(module.split(".")[1:3])

    graph = {}
    for path, module, package in _modules():
        own = unit(module)
        if own and not own.endswith("__init__"):
            graph.setdefault(own, set()).update(
                t for _, target in _imports(path, package) if (t := unit(target)) and t != own and "." in t)

    def reaches(a, b, seen=()):
        return any(n == b or (n not in seen and reaches(n, b, (*seen, n))) for n in graph.get(a, ()))

    loops = sorted(a for a in graph if reaches(a, a))
    assert not loops, f"base modules in an import loop: {loops}"


def test_the_documented_order_is_the_tested_one():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    documented = re.search(r"<!-- layers -->\n```\n(.*?)```", text, re.S)
    assert documented, "docs/architecture.md lost its layer listing (<!-- layers --> block)"
    rows = [line.split(":", 1) for line in documented.group(1).strip().splitlines()]
    assert [r[0].strip() for r in rows] == [name for name, _ in reversed(LAYERS)]


def test_a_wrong_import_is_caught(tmp_path, monkeypatch):
    """The check itself: an inputs module importing the merge package is reported."""
    bad = os.path.join(PACKAGE, "inputs", "_layer_probe.py")
    with open(bad, "w") as f:
        f.write("def f():\n    from tracemerge.merge import combine  # noqa: F401\n")
    try:
        found = violations()
    finally:
        os.unlink(bad)
    assert any("_layer_probe.py:2" in v and "tracemerge.merge" in v for v in found), found
