"""Memory of one big rank: the peak of each process of a command's tree, against the rank's size.

    python benchmarks/memory.py [--mb 1000] [--dir DIR] [--what json,pftrace,report,info]

Generates one rank file of ``mb`` MB of Kineto JSON with tests/support/gen_kineto.py (kept in
DIR), adds a small second rank so that the merge runs in a forked worker as it does for
every real job (``--jobs 2``), and runs each command once while sampling, every 50 ms, each
process's proportional set size (PSS, from /proc/PID/smaps_rollup: forked workers share the
parent's pages, and summing RSS would count those once per worker). Prints per command the
peak of the biggest process (the worker that holds the big rank, or the parent), the peak of
the whole tree, and both as multiples of the rank's size: the figures of docs/performance.md,
"Memory per worker". The machine is shared: measure once, on a quiet moment if possible.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.support import gen_kineto  # noqa: E402


def tree(pid):
    """``pid`` and its descendants (from /proc)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def pss(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def sampled(cmd):
    """(wall s, exit code, peak PSS of the biggest process, peak PSS of the tree)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    one = whole = 0
    while proc.poll() is None:
        sizes = [pss(p) for p in tree(proc.pid)]
        one, whole = max(one, max(sizes, default=0)), max(whole, sum(sizes))
        time.sleep(0.05)
    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
    if proc.returncode:
        print("  exit", proc.returncode, err[-1:] if err else "")
    return time.perf_counter() - start, proc.returncode, one, whole


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=1000.0)
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tracemerge-memory"))
    p.add_argument("--what", default="json,pftrace,report,info")
    a = p.parse_args(argv)
    indir = os.path.join(a.dir, f"{a.mb:g}MB")
    big = os.path.join(indir, "rank0.json")
    if not os.path.exists(big):
        os.makedirs(indir, exist_ok=True)
        gen_kineto.write_rank(indir, 0, 2, a.mb, 0, True, False)
        gen_kineto.write_rank(indir, 1, 2, 1.0, 1, True, False)
    paths = [os.path.join(indir, f) for f in sorted(os.listdir(indir)) if f.startswith("rank")]
    size = os.path.getsize(big)
    tm = [sys.executable, "-m", "tracemerge"]
    cmds = {"json": tm + ["combine", *paths, "-o", os.path.join(a.dir, "out.json"), "--force", "-j", "2", "-q"],
            "pftrace": tm + ["combine", *paths, "-o", os.path.join(a.dir, "out.pftrace"), "--force", "-j", "2", "-q"],
            "report": tm + ["report", *paths, "-o", os.path.join(a.dir, "report.txt"), "-q"],
            "info": tm + ["info", *paths, "-q"]}
    print(f"rank of {size / 1e6:.0f} MB (+ a 1 MB rank); load {os.getloadavg()[0]:.1f}")
    print("| command | wall s | biggest process MB | x rank | tree MB | x rank |")
    print("|---|---|---|---|---|---|")
    for what in a.what.split(","):
        wall, rc, one, whole = sampled(cmds[what])
        print(f"| {what} | {wall:.1f} | {one / 1e6:.0f} | {one / size:.2f} | {whole / 1e6:.0f} | {whole / size:.2f} |",
              flush=True)
    for f in ("out.json", "out.pftrace", "report.txt"):
        try:
            os.unlink(os.path.join(a.dir, f))
        except OSError:
            pass


if __name__ == "__main__":
    main()
