"""Start-up: what ``tracemerge --version``, ``tracemerge combine --help`` and a merge of the
samples pay before they work, next to ``python -c pass`` (the floor: the interpreter and
``site``, which every process pays).

Per command, medians of ``--runs`` runs, the commands interleaved (a neighbour's load falls
on all of them alike):

- wall: the whole process, ``python -m tracemerge ...`` as the console script runs it;
- CPU: user + system time of the whole process (steadier than wall on a loaded machine);
- imports: the sum of the top-level imports ``python -X importtime`` reports (each
  module's cumulative time, once), and the same above the floor's (what the command adds);
- import CPU: the CPU time (``time.process_time``) spent in the imports the command makes
  after the interpreter is up (its outermost ``_find_and_load`` calls: ``import`` statements
  and ``importlib.import_module`` alike), the command run by ``runpy`` as ``python -m``
  does. ``-X importtime`` clocks wall time, which a loaded machine inflates 2-4x; this
  figure is what the targets are judged on, the importtime figure beside it.

The main job is ``combine`` of ``samples/rpc_profiling`` to JSON with ``-j 1``: every rank
read, aligned and written in this one process, so each import it needs is counted once
(with several workers a module first needed by the per-rank work is imported by each
forked worker instead). Modules are read from bytecode, as from an installed package:
``PYTHONDONTWRITEBYTECODE`` is dropped and the bytecode is kept in a temporary
``PYTHONPYCACHEPREFIX``, made by one unmeasured run of each command.

``--against DIR`` runs the same commands with another checkout of tracemerge (e.g. a
``git worktree`` of the previous release) first on ``PYTHONPATH``, interleaved with this
one, so the change is a ratio on one machine.

    python benchmarks/startup.py [--runs 15] [--against /tmp/before]
"""

import argparse
import glob
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_MS = 100.0   # issue 37: the main job's imports; --version and combine --help well under
TOP_LEVEL = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)")   # one space: imported by no other module
# runs ``python -m MODULE ARGS`` (or ``-c CODE``) with the CPU time of its imports added up per
# package (each module's own time, its imports' apart), printed last on stderr as JSON
IMPORT_CPU = """
import atexit, importlib._bootstrap as bootstrap, json, os, runpy, sys, time
find, open_, spent = bootstrap._find_and_load, [], {}
def package(name):
    top = name.partition(".")[0]
    return top if top not in sys.stdlib_module_names and not top.startswith("_") else "standard library"
def timed(name, import_):
    open_.append(0.0)
    start = time.process_time()
    try:
        return find(name, import_)
    finally:
        took = time.process_time() - start
        inner = open_.pop()
        spent[package(name)] = spent.get(package(name), 0.0) + (took - inner) * 1e3
        if open_:
            open_[-1] += took
bootstrap._find_and_load = timed
atexit.register(lambda: os.write(2, b"\\nimport-cpu-ms " + json.dumps(spent).encode() + b"\\n"))
flag, target, *sys.argv[1:] = sys.argv[1:]
if flag == "-m":
    sys.argv[0] = target
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


def commands(out: str) -> "dict[str, list[str]]":
    ranks = sorted(glob.glob(os.path.join(ROOT, "samples", "rpc_profiling", "rank*.json.gz")))
    tm = [sys.executable, "-m", "tracemerge"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "tracemerge --version": tm + ["--version"],
        "tracemerge combine --help": tm + ["combine", "--help"],
        "combine samples (-j 1)": tm + ["combine", *ranks, "-o", out, "--force", "-j", "1", "--quiet"],
    }


def environment(checkout: str, pycache: str) -> "dict[str, str]":
    """Run in ``checkout`` (``python -m`` puts the working directory first on the path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def _cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def wall_cpu_ms(argv: "list[str]", env: "dict[str, str]") -> "tuple[float, float]":
    """The wall and CPU (user + system) ms of one run."""
    t0, c0 = time.perf_counter(), _cpu_s()
    subprocess.run(argv, env=env, cwd=env["PYTHONPATH"].split(os.pathsep)[0], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=120)
    return (time.perf_counter() - t0) * 1e3, (_cpu_s() - c0) * 1e3


def import_cpu_ms(argv: "list[str]", env: "dict[str, str]") -> "dict[str, float]":
    """CPU ms of the imports the command makes after the interpreter is up, per package."""
    r = subprocess.run([argv[0], "-c", IMPORT_CPU, *argv[1:]], env=env, cwd=env["PYTHONPATH"].split(os.pathsep)[0],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True, timeout=120)
    by_package: "dict[str, float]" = json.loads(r.stderr.split("import-cpu-ms ")[-1])
    return by_package


def imports_ms(argv: "list[str]", env: "dict[str, str]") -> float:
    """The sum of the top-level imports' cumulative times, ms."""
    r = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=env["PYTHONPATH"].split(os.pathsep)[0],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True, timeout=120)
    return sum(int(m.group(1)) for m in map(TOP_LEVEL.match, r.stderr.splitlines()) if m) / 1e3


def measure(runs: int, checkouts: "dict[str, str]") -> "dict[tuple[str, str], dict[str, Any]]":
    with tempfile.TemporaryDirectory(prefix="tracemerge-startup-") as work:
        todo = {}
        for version, checkout in checkouts.items():
            env = environment(checkout, os.path.join(work, f"pycache-{version}"))
            for name, argv in commands(os.path.join(work, f"{version}.json")).items():
                wall_cpu_ms(argv, env)   # writes the bytecode; the same output every run
                todo[(version, name)] = (argv, env)
        seen: "dict[tuple[str, str], dict[str, list[float]]]" = {
            key: {"wall": [], "cpu": [], "imports": [], "import_cpu": []} for key in todo}
        packages: "dict[tuple[str, str], list[dict[str, float]]]" = {key: [] for key in todo}
        for _ in range(runs):
            for key, (argv, env) in todo.items():
                wall, cpu = wall_cpu_ms(argv, env)
                seen[key]["wall"].append(wall)
                seen[key]["cpu"].append(cpu)
                seen[key]["imports"].append(imports_ms(argv, env))
                packages[key].append(import_cpu_ms(argv, env))
                seen[key]["import_cpu"].append(sum(packages[key][-1].values()))
    figures: "dict[tuple[str, str], dict[str, Any]]" = {}
    for key, values in seen.items():
        names = {name for run in packages[key] for name in run}
        figures[key] = {**{what: statistics.median(v) for what, v in values.items()},
                        "import_cpu_min": min(values["import_cpu"]), "import_cpu_max": max(values["import_cpu"]),
                        "packages": {name: statistics.median(run.get(name, 0.0) for run in packages[key])
                                     for name in names}}
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="runs of each command (medians)")
    ap.add_argument("--against", metavar="DIR", help="another tracemerge checkout, measured alongside")
    a = ap.parse_args()
    checkouts = {"this": ROOT}
    if a.against:
        checkouts = {"against": os.path.abspath(a.against), **checkouts}
    figures = measure(a.runs, checkouts)
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    print(f"medians of {a.runs} runs, interleaved; load average {load}; {sys.executable}")
    print("| command | checkout | wall ms | CPU ms | -X importtime ms | above the floor's | import CPU ms (min-max) |")
    print("|---|---|---|---|---|---|---|")
    for (version, name), f in figures.items():
        floor = figures[(version, "python -c pass")]["imports"]
        print(f"| `{name}` | {version} | {f['wall']:.0f} | {f['cpu']:.0f} | {f['imports']:.0f} | "
              f"{f['imports'] - floor:.0f} | {f['import_cpu']:.1f} ({f['import_cpu_min']:.1f}-{f['import_cpu_max']:.1f}) |")
    for version in checkouts:
        by_package = sorted(figures[(version, "combine samples (-j 1)")]["packages"].items(), key=lambda p: -p[1])
        print(f"the main job's import CPU by package, {version} (median ms): "
              + ", ".join(f"{name} {ms:.1f}" for name, ms in by_package if ms >= 0.5))
    for name in ("tracemerge --version", "tracemerge combine --help", "combine samples (-j 1)"):
        spent = figures[("this", name)]["import_cpu"]
        print(f"target: {name}: imports {spent:.0f} ms CPU <= {TARGET_MS:.0f} ms: "
              f"{'met' if spent <= TARGET_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
