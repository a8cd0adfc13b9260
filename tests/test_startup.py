"""Start-up pays only for what the command uses: ``tracemerge --version`` and ``--help``
import click and a few small modules of tracemerge, not numpy, msgspec, orjson, the
readers, writers, analyses or the HTTP server (docs/performance.md), and ``--version``
still names the core that would run."""

import json
import os
import subprocess
import sys

import pytest
from support import cli
from support.cli import invoke
from support.paths import ROOT

HEAVY = ("numpy", "msgspec", "orjson", "http.server", "perfetto", "torch", "tracemerge.inputs", "tracemerge.native",
         "tracemerge.correlate", "tracemerge.clocks", "tracemerge.job", "tracemerge.place.selection", "tracemerge.formats",
         "tracemerge.analysis", "tracemerge.merge", "tracemerge.report", "tracemerge.commands.serve", "tracemerge.runtime.engine")

# runs the command as the console script does, then prints what it imported and what it printed
PROBE = """
import contextlib, io, json, sys
from tracemerge.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
print(json.dumps({"modules": sorted(sys.modules), "out": out.getvalue(), "code": code}))
"""


def probe(*args, env=None):
    r = cli.run(*args, code=PROBE, timeout=60, env={**os.environ, **(env or {})})
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


# the registries behind combine's and export's choices and option help (--align, --format,
# --group-by, --sort-by): their names and summaries, none of what they name (tracemerge.registry)
REGISTRIES = ("tracemerge.clocks", "tracemerge.formats", "tracemerge.report", "tracemerge.report.render")


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["combine", "--help"], ["export", "--help"],
                                  ["report", "--help"], ["diff", "--help"], ["align", "--help"]])
def test_version_and_help_import_nothing_heavy(args):
    result = probe(*args)
    assert result["code"] in (0, None)
    assert "Usage:" in result["out"] or "version" in result["out"]
    loaded = [m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)
              and m not in REGISTRIES]
    assert loaded == []


def test_a_merge_imports_only_what_it_writes(tmp_path):
    """A JSON merge of the samples (-j 1: every import in this one process) imports the
    reader, aligner and JSON writer, not the analyses, the report, the Perfetto encoder,
    pandas/pyarrow, Dask or the HTTP server."""
    ranks = [os.path.join(ROOT, "samples", "rpc_profiling", f"rank{r}.json.gz") for r in (0, 1)]
    result = probe("combine", *ranks, "-o", str(tmp_path / "t.json"), "-j", "1", "-q")
    assert result["code"] in (0, None) and (tmp_path / "t.json").stat().st_size > 0
    unused = ("tracemerge.analysis", "tracemerge.report", "tracemerge.tables", "tracemerge.commands.serve",
              "tracemerge.formats.perfetto.encoder", "perfetto", "pandas", "pyarrow", "dask", "http.server", "torch")
    assert [m for m in result["modules"] if any(m == u or m.startswith(u + ".") for u in unused)] == []
    assert "tracemerge.formats.chrome" in result["modules"] and "numpy" in result["modules"]


@pytest.mark.parametrize("out", ["t.json", "t.pftrace"])
def test_the_main_job_leaves_numpy_ma_unimported(tmp_path, out):
    """The README's main job (combine with --report, -j 1: every import in this process)
    never takes numpy's masked-array module, which numpy 2's np.unique imports on first use
    (~12 ms of each process's start: tracemerge.algorithms.arrays)."""
    ranks = [os.path.join(ROOT, "samples", "rpc_profiling", f"rank{r}.json.gz") for r in (0, 1)]
    result = probe("combine", *ranks, "-o", str(tmp_path / out), "--report", "-j", "1", "-q")
    assert result["code"] in (0, None) and (tmp_path / out).stat().st_size > 0
    assert "tracemerge.report.keyavg" in result["modules"]   # the report ran here
    assert [m for m in result["modules"] if m == "numpy.ma" or m.startswith("numpy.ma.")] == []


def test_the_registries_name_what_they_import():
    """Each lazily imported registry entry is what its name says: a format's ``FORMAT.name``
    is its key, a method's function runs, and every entry shows in the help."""

    from tracemerge.clocks import METHODS
    from tracemerge.formats import DEFAULT, FORMATS
    assert [f.name for f in FORMATS.values()] == list(FORMATS) and DEFAULT in FORMATS
    assert all(callable(m.align.resolve()) and m.align.resolve().__name__.startswith("align_") for m in METHODS.values())
    shown = " ".join(invoke("combine", "--help", terminal_width=1000).output.split())
    assert "--format [" + "|".join(FORMATS) + "]" in shown
    assert all(f"{m.name} = {m.summary}" in shown for m in METHODS.values())
    # the report formats: each module's FORMAT is its name's, and the ones --format offers are
    # those with no option of their own (named without importing them: render.OWN_OPTION)
    from tracemerge.report import render
    assert [f.name for f in render.RENDERERS.values()] == list(render.RENDERERS)
    assert render.FORMATS == tuple(n for n, f in render.RENDERERS.items() if f.option is None)
    assert render.DEFAULT in render.FORMATS
    shown = " ".join(invoke("report", "--help", terminal_width=1000).output.split())
    assert "--format [" + "|".join(render.FORMATS) + "]" in shown
    assert all(name in shown for name in render.csv_sections())   # --section's help names every CSV table


@pytest.mark.parametrize("env", [{}, {"TRACEMERGE_CORE": "python"}, {"TRACEMERGE_KERNEL": "python"}])
def test_version_names_the_core_the_import_would_run(env):
    """--version tells the core without importing it; the import itself says the same."""
    # both runs see only the case's choice of core, not the one the suite itself runs under
    # (CI runs the suite a second time with TRACEMERGE_CORE=python)
    environment = {k: v for k, v in {**os.environ, **env}.items()
                   if k not in ("TRACEMERGE_CORE", "TRACEMERGE_KERNEL") or k in env}
    r = cli.run("--version", code=PROBE, timeout=60, env=environment)
    assert r.exit_code == 0, r.stderr
    said = json.loads(r.stdout.splitlines()[-1])["out"].splitlines()[1]
    code = "from tracemerge import native; print(native.describe())"
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                              env=environment)
    assert said == imported.stdout.strip()


def test_a_command_still_finds_what_it_defers(tmp_path):
    """The deferred names resolve: a merge, its registry-backed choices and a refused choice."""

    files = [os.path.join(ROOT, "samples", "kineto_rpc", f) for f in ("worker0.json.gz", "worker1.json.gz")]
    r = invoke("combine", *files, "-o", str(tmp_path / "t.pftrace"), "--align", "wall", "-j", "1")
    assert r.exit_code == 0, r.output
    r = invoke("report", *files, "--section", "nope")
    assert r.exit_code == 2 and "'key_averages', 'critical_path'" in r.output
    assert "[default: 9001" in invoke("open", "--help").output


def test_deferred_names_are_the_type_checked_imports():
    """cli.py's deferred names and its TYPE_CHECKING imports name the same objects (mypy and
    the layer test read the latter), and each deferred one resolves."""
    import ast
    import importlib

    from tracemerge import cli
    tree = ast.parse(open(cli.__file__).read())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    imported = {}
    for node in block.body:
        for alias in node.names:
            module = importlib.import_module(node.module)
            imported[alias.asname or alias.name] = getattr(module, alias.name, None) or importlib.import_module(
                f"{node.module}.{alias.name}")
    deferred = {node.targets[0].id for node in block.orelse}
    assert deferred == set(imported)
    for name in deferred:
        assert getattr(cli, name).resolve() is imported[name], name
