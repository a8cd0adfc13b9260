"""The pathological shapes of issue 35 item 11, timed at n and 2n spans on one thread.

Shapes: ``open`` (n spans all open at once, none nesting: each starts inside all the others
and ends after them), ``same`` (n identical spans), ``nested`` (n perfectly nested spans).
Each is run through a command in a fresh process (``combine`` to .json and .pftrace,
``report``); the printed ratio is time(2n) / time(n): about 2 is n log n, about 4 is
quadratic. The target (docs/performance.md, "Hostile shapes"): every ratio near 2 and
100k spans under 5 s.

    python benchmarks/hostile_shapes.py [--n 50000] [--core native|python] [--shapes open,same,nested]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)  # the repository root: tests/support

from tests.support.gen_shapes import write_shape  # noqa: E402

RUNS = {"combine .json": ["combine", "-o", "{out}.json", "--force"],
        "combine .pftrace": ["combine", "-o", "{out}.pftrace", "--force"],
        "report": ["report"]}


def timed(args, env):
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tracemerge"] + args, check=True, capture_output=True, env=env)
    return time.perf_counter() - began


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--core", choices=["native", "python"], default="native")
    ap.add_argument("--shapes", default="open,same,nested", help="comma-separated: open, same, nested")
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT, TRACEMERGE_CORE="python" if a.core == "python" else "")
    print(f"{'shape':8} {'command':18} {a.n:>8} {2 * a.n:>8}  ratio")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in a.shapes.split(","):
            for label, command in RUNS.items():
                times = []
                for n in (a.n, 2 * a.n):
                    src = os.path.join(tmp, f"{kind}{n}.json")
                    if not os.path.exists(src):
                        write_shape(src, kind, n)
                    args = [c.replace("{out}", os.path.join(tmp, "out")) for c in command]
                    times.append(timed([args[0], src] + args[1:], env))
                print(f"{kind:8} {label:18} {times[0]:7.2f}s {times[1]:7.2f}s  {times[1] / times[0]:.2f}")


if __name__ == "__main__":
    main()
