"""Throughput of the compiled core's scan (``_core.scan``) on generated Kineto ranks, beside its floors.

    python benchmarks/scan.py [--ranks 8] [--mb 20] [--big 60] [--repeat 7] [--dir DIR] [--baseline SO]

Generates ``ranks`` rank files of ``mb`` MB and one of ``big`` MB with
tests/support/gen_kineto.py (Kineto's pretty-printed events plus the "tracemerge" block, as
benchmarks/compare.py merges them; kept in DIR between runs), then times, per rank, ``repeat``
times alternated, and prints the medians:

- scan (memory): ``_core.scan`` of the file's bytes already in memory and its ``columns()``
  (the core's whole part of ``native.read``: the columns are made in one pass over the
  scan's events): CPU seconds of the thread that ran it (the scan runs on one core) and wall seconds;
- scan (file): the same from the file: map it (``native._mapped``, page cache) and scan it;
- baseline (``--baseline SO``): the scan (memory) of another build of the core, e.g. the
  previous release's ``_core*.so`` copied aside, so a gain is a ratio measured in one run;
- memchr: ``bytes.find`` of a byte the file lacks (one ``memchr`` over every byte): the least
  any pass over the bytes in memory costs;
- cat: ``cat FILE > /dev/null`` (its own process: read(2) of the page cache, wall time).

Throughput is bytes per CPU second of the one core that ran it (GB/s = 1e9 bytes/s); the
target of issue 37 is a scan of ≥ 1 GB/s per core. The first scan in a process also pays the
page faults of its fresh records (``first`` column, in the summary); the medians are of
scans that reuse the memory the previous one freed, as a worker reading rank after rank
does. Other engineers share the machine: the load average is printed with the table, and
the medians are what to compare.
"""

import argparse
import gc
import importlib.util
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root: tests/support

from tests.support import gen_kineto  # noqa: E402
from tracemerge import native  # noqa: E402

TARGET_GBS = 1.0
ROWS = ("scan (memory)", "scan (file)", "baseline", "memchr", "cat")


def ranks(root, count, mb):
    """The generated rank files of ``count`` × ``mb`` MB under ``root`` (made once)."""
    d = os.path.join(root, f"{count}x{mb:g}MB")
    paths = [os.path.join(d, f"rank{r}.json") for r in range(count)]
    if not all(os.path.exists(p) for p in paths):
        paths = gen_kineto.generate(d, count, mb, rank_files=True)
    return paths


def load_core(path):
    """Another build of the compiled core, loaded from its file under the core's own name."""
    spec = importlib.util.spec_from_file_location("tracemerge.native._core", path)
    if spec is None or spec.loader is None:
        sys.exit(f"scan.py: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn):
    """(CPU s, wall s) of one call of ``fn``; the collector off, as it would count the Python heap.
    The CPU is this thread's, the one core the scan runs on: the process's would count numpy's
    BLAS pool too, whose threads spin on the other core (9 % of this benchmark's samples)."""
    gc.collect()
    gc.disable()
    try:
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        return time.thread_time() - c0, time.perf_counter() - w0
    finally:
        gc.enable()


def scan(core, data):
    """``core``'s scan of ``data`` and its columns: what native.read asks of the core."""
    s = core.scan(data)
    assert not isinstance(s, str), f"the core declined ({s})"
    s.columns()


def scan_file(path):
    data = native._mapped(path)
    scan(native._core, data)
    data.close()


def measure(path, repeat, baseline):
    """Per-rank medians {row: (CPU s, wall s)}, the first scan's CPU s and the event count."""
    with open(path, "rb") as f:
        data = f.read()
    first_cpu, _ = timed(lambda: scan(native._core, data))  # this process's first scan of this size
    n = native.scan(data).n
    rows = {k: [] for k in ROWS if k != "baseline" or baseline}
    for _ in range(repeat):  # alternated, so a change in the machine's load falls on every row
        rows["scan (memory)"].append(timed(lambda: scan(native._core, data)))
        rows["scan (file)"].append(timed(lambda: scan_file(path)))
        if baseline:
            rows["baseline"].append(timed(lambda: scan(baseline, data)))
        rows["memchr"].append(timed(lambda: data.find(b"\x01")))
        w0 = time.perf_counter()
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
        wall = time.perf_counter() - w0
        rows["cat"].append((wall, wall))  # another process: its wall time stands for its CPU
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in rows.items()}
    return med, first_cpu, n


def gbs(size, seconds):
    return size / seconds / 1e9 if seconds > 0 else float("inf")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--big", type=float, default=60, help="MB of the one large rank (0: none)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tracemerge-bench-scan"))
    ap.add_argument("--baseline", metavar="SO", help="another build of _core to time alongside (e.g. the previous release's)")
    a = ap.parse_args(argv)
    if native.active() != "native":
        sys.exit("scan.py: the compiled core is not active (python setup.py build_ext --inplace; not TRACEMERGE_CORE=python)")
    baseline = load_core(a.baseline) if a.baseline else None
    paths = ranks(a.dir, a.ranks, a.mb) + (ranks(a.dir, 1, a.big) if a.big else [])
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; medians of {a.repeat}; GB/s = 1e9 bytes "
          f"per CPU second (cat: per wall second)")
    cols = [k for k in ROWS if k != "baseline" or baseline]
    head = f"{'rank':<20}{'MB':>6}{'events':>9}{'first':>7}" + "".join(f"{k.replace('scan ', ''):>10}" for k in cols)
    print(head)
    print("-" * len(head))
    totals = {}
    for i, path in enumerate(paths):
        size = os.path.getsize(path)
        med, first, n = measure(path, a.repeat, baseline)
        group = "small" if i < a.ranks else "big"
        for k, (c, _) in list(med.items()) + [("first", (first, 0.0))]:
            t = totals.setdefault((group, k), [0, 0.0])
            t[0] += size
            t[1] += c
        name = os.path.join(*path.split(os.sep)[-2:])
        print(f"{name:<20}{size / 1e6:>6.1f}{n:>9,}{gbs(size, first):>7.2f}"
              + "".join(f"{gbs(size, med[k][0]):>10.2f}" for k in cols), flush=True)
    print("-" * len(head))
    for group, label in (("small", f"{a.ranks} x {a.mb:g} MB"), ("big", f"1 x {a.big:g} MB")):
        if (group, "scan (memory)") not in totals:
            continue
        r = {k: gbs(*totals[(group, k)]) for k in cols + ["first"]}
        met = "met" if r["scan (memory)"] >= TARGET_GBS else "NOT met"
        base = f", baseline {r['baseline']:.2f} (now {r['scan (memory)'] / r['baseline']:.2f}x)" if baseline else ""
        print(f"{label:<12} scan {r['scan (memory)']:.2f} GB/s per core (first in a process {r['first']:.2f}, "
              f"from the file {r['scan (file)']:.2f}){base}; memchr {r['memchr']:.1f}, cat {r['cat']:.2f}; "
              f"scan >= {TARGET_GBS:g} GB/s: {met}")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
