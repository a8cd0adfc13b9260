"""Cluster scale: every command's wall time and peak memory from 8 ranks to 1,024 (4,096 for
``offsets``), beside ``combine --align wall`` at the same ranks, with each command's growth
exponent in ranks.

    python benchmarks/scale.py [--series MB:R1,R2,...]... [--offsets-only RANKS] [--dask]
                               [--repeat N] [--dir DIR]

Rank files come from ``tests/support/gen_kineto.py --rank-files --gzip`` (RPCs to the two
neighbours, an all_reduce of every rank per step, each rank's clock off by a known offset)
and are kept in DIR between runs. Per series (MB per rank, rank counts) and rank count, the
commands run one after another, ``--repeat`` rounds each with their order alternated, and
each figure is the median of its runs: wall seconds, and the peak memory of the largest
single process of the command's tree (its parent or a worker; ``getrusage`` of a wrapper
over the finished tree). ``x wall`` is a command's time over ``combine --align wall`` at
the same ranks in the same round; the last lines fit ``time ∝ ranks^k`` (least squares on
logs, ranks ≥ 32) per command: k ≈ 1 is linear. ``--offsets-only`` adds rank counts where
only ``offsets`` runs (it reads the heads alone). ``offsets`` also checks every rank's
estimate against the planted offset and its bound. The figures of docs/performance.md,
"Scale"; the machine is shared, so its noise is said there.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from tests.support import gen_kineto  # noqa: E402

# run one command, then say its wall seconds and the largest peak RSS of any process of its tree
WRAPPER = ("import resource, subprocess, sys, time\n"
           "t = time.monotonic()\n"
           "rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
           "print(rc, time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def commands(files: List[str], out: str, dask: bool) -> Dict[str, List[str]]:
    """The commands measured at one rank count, by label (``combine wall`` is the baseline)."""
    tm = [sys.executable, "-m", "tracemerge"]
    found = {
        "combine wall": tm + ["combine", *files, "-o", out + ".json", "--force", "-q", "--align", "wall"],
        "offsets": tm + ["offsets", *files, "--format", "json", "-q"],
        "info": tm + ["info", *files, "-q"],
        "combine auto .json": tm + ["combine", *files, "-o", out + ".json", "--force", "-q"],
        "combine auto .pftrace": tm + ["combine", *files, "-o", out + ".pftrace", "--force", "-q"],
        "report": tm + ["report", *files, "-q", "-o", out + ".txt", "--force"],
        "report --analysis": tm + ["report", *files, "--analysis", "-q", "-o", out + ".txt", "--force"],
        # two runs of every rank each: the rank files' directory against itself
        "diff": tm + ["diff", os.path.dirname(files[0]), os.path.dirname(files[0]), "-q", "-o", out + ".diff.txt", "--force"],
    }
    if dask:
        found["combine auto --engine dask"] = tm + ["combine", *files, "-o", out + ".dask.json", "--force", "-q",
                                                    "--engine", "dask"]
    return found


def run(cmd: Sequence[str], root: str = ROOT) -> Tuple[float, float]:
    """(wall s, peak MB) of ``cmd`` run from checkout ``root`` (its directory and import
    path: ``-m tracemerge`` is that checkout's); exits when it fails."""
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True, env=env, check=True,
                         cwd=root)
    rc, wall, kb = out.stdout.split()
    if rc != "0":
        sys.exit(f"failed (exit {rc}): {' '.join(cmd)[:300]}")
    return float(wall), int(kb) / 1024


def rank_files(base: str, ranks: int, mb: float) -> List[str]:
    """The rank files of ``ranks`` × ``mb`` MB (generated once, kept in ``base``)."""
    d = os.path.join(base, f"{ranks}x{mb:g}")
    if not os.path.exists(os.path.join(d, "done")):
        gen_kineto.generate(d, ranks, mb, seed=0, rank_files=True, gz=True)
        open(os.path.join(d, "done"), "w").close()
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".json.gz"))


def check_offsets(files: List[str], planted: Callable[[int], int] = gen_kineto.clock_offset_ns) -> str:
    """Every rank's offset against the ``planted`` one: worst error, worst bound, ranks over it."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "tracemerge", "offsets", *files, "--format", "json", "-q"],
                         capture_output=True, text=True, env=env, check=True)
    ranks = json.loads(out.stdout)["ranks"]
    err = [abs(r["offset_ns"] - planted(r["rank"])) for r in ranks]
    bound = [r["error_bound_ns"] for r in ranks]
    over = sum(b is None or e > b for e, b in zip(err, bound))
    return f"worst error {max(err) / 1e3:.1f} µs, worst bound {max(b or 0 for b in bound) / 1e3:.1f} µs, {over} over"


def exponent(points: List[Tuple[int, float]]) -> float:
    """k of ``time ∝ ranks^k`` by least squares on logs, over ranks ≥ 32."""
    pts = [(math.log(r), math.log(t)) for r, t in points if r >= 32 and t > 0]
    if len(pts) < 2:
        return float("nan")
    mx, my = statistics.fmean(p[0] for p in pts), statistics.fmean(p[1] for p in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def main(argv: Sequence[str] = ()) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--series", action="append", help="MB:RANKS,... (default 0.05:8,32,128,512,1024 and 2:8,32,128,256)")
    p.add_argument("--offsets-only", default="4096", help="rank counts (at the first series' MB) where only offsets runs")
    p.add_argument("--dask", action="store_true", help="also combine --engine dask (a LocalCluster per run)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tracemerge-scale"))
    args = p.parse_args(argv or None)
    args.dir = os.path.abspath(args.dir)  # the commands run from the checkout
    series = [(float(mb), [int(r) for r in ranks.split(",")]) for mb, ranks in
              (s.split(":") for s in (args.series or ["0.05:8,32,128,512,1024", "2:8,32,128,256"]))]
    only = [int(r) for r in args.offsets_only.split(",") if r]
    out = os.path.join(args.dir, "out")
    os.makedirs(args.dir, exist_ok=True)
    for k, (mb, counts) in enumerate(series):
        growth: Dict[str, List[Tuple[int, float]]] = {}
        print(f"\n## {mb:g} MB per rank\n\n| ranks | command | wall s | peak MB | x wall (time) | x wall (memory) |\n"
              "|---|---|---|---|---|---|")
        for ranks in counts + (only if k == 0 else []):
            files = rank_files(args.dir, ranks, mb)
            cmds = commands(files, out, args.dask) if ranks in counts else {"offsets": commands(files, out, False)["offsets"]}
            runs: Dict[str, List[Tuple[float, float]]] = {c: [] for c in cmds}
            for i in range(args.repeat):
                for c in (list(cmds) if i % 2 == 0 else list(cmds)[::-1]):
                    runs[c].append(run(cmds[c]))
            med = {c: (statistics.median(w for w, _ in v), statistics.median(m for _, m in v)) for c, v in runs.items()}
            base = med.get("combine wall")
            for c, (wall, mem) in med.items():
                growth.setdefault(c, []).append((ranks, wall))
                ratio = f"{wall / base[0]:.2f} | {mem / base[1]:.2f}" if base else "- | -"
                print(f"| {ranks} | {c} | {wall:.2f} | {mem:.0f} | {ratio} |", flush=True)
            if "offsets" in cmds:
                print(f"|  | offsets vs planted clocks: {check_offsets(files)} | | | | |", flush=True)
        print("\ngrowth exponent k (time ∝ ranks^k, ranks ≥ 32): " + ", ".join(
            f"{c} {exponent(v):.2f}" for c, v in growth.items()))


if __name__ == "__main__":
    main()
