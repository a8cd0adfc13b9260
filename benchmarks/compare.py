"""Side-by-side benchmark: tracemerge against the parsing floor and its peers, on the same inputs.

    python benchmarks/compare.py [--ranks 8] [--mb 60] [--dir DIR] [--skip-peers]

Generates ``ranks`` Kineto-like rank files of ``mb`` MB each with gen_kineto.py (Kineto
traces plus the "tracemerge" block with RPC and collective records, so tracemerge aligns
by RPCs and draws RPC flows; kept in DIR between runs), then runs every contender as its own process, one after the other, and
prints wall time, input MB/s, the peak memory of the contender's whole process tree (the
sum of the processes' PSS, sampled every 20 ms with psutil) and the ratios to the floor and to ``viztracer --combine``:

- floor, 1 process: read + typed parse (msgspec structs, ``args`` kept raw) + shift ts and
  pids in integer ns + dump, one rank at a time: the least any merge must do;
- floor, N processes: the same with ranks spread over the cores, each writing a part file;
- ``tracemerge combine`` to .json (default jobs, and --jobs 1), .json.gz, and .pftrace
  when ``tracemerge/perfetto.py`` exists;
- ``viztracer --combine`` and HTA's ``TraceAnalysis`` load, when installed (``bench`` extra).

Other engineers share the machine: the load average is printed with the table.
"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gen_kineto  # noqa: E402


def run_measured(cmd, cwd=None):
    """(wall s, peak memory bytes of the process tree, returncode, stderr tail) of ``cmd``.

    Memory is the sum of each process's PSS (proportional set size): forked workers share
    the parent's pages, and summing RSS would count those pages once per worker."""
    import psutil
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
            rss = 0
            for p in tree:
                try:
                    rss += p.memory_full_info().pss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
    return wall, peak, proc.returncode, (err[-1] if err else "")


# ---- the floor -------------------------------------------------------------------------

FLOOR = r'''
import gc, os, sys
from typing import Any
import msgspec
from concurrent.futures import ProcessPoolExecutor

class Ev(msgspec.Struct, omit_defaults=True):
    ph: str
    name: Any = None
    cat: Any = None
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw(b"{}")
    id: Any = None
    bp: Any = None
    s: Any = None

class Doc(msgspec.Struct):
    traceEvents: list[Ev]
    baseTimeNanoseconds: int = 0

def one(rank, path, out):
    gc.disable()
    doc = msgspec.json.decode(open(path, "rb").read(), type=Doc)
    shift = doc.baseTimeNanoseconds - 1_790_857_026_000_000_000 + rank * 1000
    for e in doc.traceEvents:
        if e.ts is not None:
            e.ts = (round(e.ts * 1000) + shift) / 1000
        if isinstance(e.pid, int):
            e.pid += (rank + 1) * 1000
    body = msgspec.json.encode(doc.traceEvents)[1:-1]
    with open(out, "wb") as f:
        f.write(body)
    return out

def main(jobs, out, paths):
    parts = [f"{out}.part{r}" for r in range(len(paths))]
    if jobs == 1:
        for r, p in enumerate(paths):
            one(r, p, parts[r])
    else:
        with ProcessPoolExecutor(jobs) as pool:
            list(pool.map(one, range(len(paths)), paths, parts))
    with open(out, "wb") as f:
        f.write(b'{"traceEvents":[')
        for r, part in enumerate(parts):
            if r:
                f.write(b",")
            with open(part, "rb") as src:
                f.write(src.read())
            os.unlink(part)
        f.write(b"]}")

main(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
'''


def contenders(paths, out, jobs):
    tm = [sys.executable, "-m", "tracemerge", "combine", *paths, "--force"]
    yield "floor, 1 process", [sys.executable, "-c", FLOOR, "1", out + "floor1.json", *paths]
    yield f"floor, {jobs} processes", [sys.executable, "-c", FLOOR, str(jobs), out + "floorN.json", *paths]
    yield f"tracemerge combine .json (--jobs {jobs})", tm + ["-o", out + "tm.json"]
    yield "tracemerge combine .json (--jobs 1)", tm + ["-o", out + "tm1.json", "--jobs", "1"]
    yield f"tracemerge combine .json.gz (--jobs {jobs})", tm + ["-o", out + "tm.json.gz"]
    if importlib.util.find_spec("tracemerge.perfetto"):
        yield f"tracemerge combine .pftrace (--jobs {jobs})", tm + ["-o", out + "tm.pftrace"]
    if shutil.which("viztracer"):
        yield "viztracer --combine", ["viztracer", "--combine", *paths, "-o", out + "viz.json"]
    if importlib.util.find_spec("hta"):
        code = ("import sys; from hta.trace_analysis import TraceAnalysis; "
                "TraceAnalysis(trace_dir=sys.argv[1])")
        yield "HTA TraceAnalysis load", [sys.executable, "-c", code, os.path.dirname(paths[0])]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--mb", type=float, default=60.0)
    p.add_argument("--dir", default=None, help="where the inputs are generated (default: a temp dir)")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--only", default=None, help="run only contenders whose name contains this")
    p.add_argument("--skip-peers", action="store_true", help="skip viztracer and HTA")
    a = p.parse_args(argv)

    indir = a.dir or tempfile.mkdtemp(prefix=f"tracemerge-bench-{a.ranks}x{a.mb:g}-")
    indir = os.path.join(indir, f"{a.ranks}x{a.mb:g}MB-rank-files")
    paths = sorted(os.path.join(indir, f) for f in os.listdir(indir)) if os.path.isdir(indir) else []
    if len(paths) != a.ranks:
        shutil.rmtree(indir, ignore_errors=True)
        paths = gen_kineto.generate(indir, a.ranks, a.mb, rank_files=True)
    total_mb = sum(os.path.getsize(x) for x in paths) / 1e6
    outdir = tempfile.mkdtemp(prefix="tracemerge-bench-out-")
    out = os.path.join(outdir, "")
    print(f"inputs: {a.ranks} ranks × {a.mb:g} MB = {total_mb:.0f} MB in {indir}; {os.cpu_count()} cores; "
          f"load before {os.getloadavg()[0]:.2f}", flush=True)

    rows = []
    for name, cmd in contenders(paths, out, a.jobs):
        if a.only and a.only not in name:
            continue
        if a.skip_peers and ("viztracer" in name or "HTA" in name):
            continue
        wall, peak, rc, err = run_measured(cmd)
        rows.append((name, wall, peak, rc, err))
        print(f"  {name}: {wall:.2f} s, {peak / 1e6:.0f} MB" + (f"  (exit {rc}: {err})" if rc else ""), flush=True)
        for f in os.listdir(outdir):
            os.unlink(os.path.join(outdir, f))
    shutil.rmtree(outdir, ignore_errors=True)

    floor = next((r[1] for r in rows if r[0] == "floor, 1 process"), None)
    viz = next((r[1] for r in rows if r[0] == "viztracer --combine" and not r[3]), None)
    print(f"\nload after {os.getloadavg()[0]:.2f}\n")
    print("| what | wall s | MB/s | peak PSS MB (tree) | × floor (1 proc) | viztracer ÷ this |")
    print("|---|---|---|---|---|---|")
    for name, wall, peak, rc, err in rows:
        ratio_floor = f"{wall / floor:.2f}" if floor else "-"
        ratio_viz = f"{viz / wall:.1f}" if viz else "-"
        status = "" if not rc else f" (failed: {err})"
        print(f"| {name}{status} | {wall:.2f} | {total_mb / wall:.0f} | {peak / 1e6:.0f} | {ratio_floor} | {ratio_viz} |")


if __name__ == "__main__":
    main()
