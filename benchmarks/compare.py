"""Side-by-side benchmark: tracemerge against the parsing floor and its peers, on the same inputs.

    python benchmarks/compare.py [--ranks 8] [--mb 60 [--mb 20 ...]] [--dir DIR] [--skip-peers] [--scale 16]
                                 [--only NAME ...] [--skip NAME ...] [--repeat N] [--previous DIR] [--settle]

Generates ``ranks`` Kineto-like rank files of ``mb`` MB each with gen_kineto.py (Kineto
traces plus the "tracemerge" block with RPC and collective records, so tracemerge aligns
by RPCs and draws RPC flows; kept in DIR between runs), then runs every contender as its
own process, one after the other, twice: once alone for its wall time, once under a
sampler for the peak memory of its whole process tree (the sum of the processes' PSS,
every 20 ms with psutil: reading a process's PSS costs the kernel a page-table walk, and
the sampler would slow multi-process contenders more than single-process ones). It prints
wall time, input MB/s, peak memory, the ratios to the floor and to ``viztracer --combine``,
and whether the targets of the issue are met; ``--scale N`` also merges N ranks to compare
time and memory with ``ranks``. ``--repeat N`` runs every contender N times, alternated
(each round runs each once, so a change in the machine's load falls on all of them; the
rounds after the first in a seeded shuffled order, so no contender always follows another): the
rows are the medians, and the export target also gives the spread of its per-round ratios.

- floor, 1 process: read + typed parse (msgspec structs, ``args`` kept raw) + shift ts and
  pids in integer ns + dump, one rank at a time: the least any merge must do;
- floor, N processes: the same with ranks spread over the cores, each writing a part file;
- cat: ``cat`` of the inputs into one file, the I/O limit of a merge on this machine;
- ``tracemerge combine`` to .json (default jobs, and --jobs 1), .json.gz, .json.zst (when
  zstandard is installed) and .pftrace, with the compiled core when it is built, and the
  main row again with ``TRACEMERGE_CORE=python`` (the reference path);
- ``tracemerge export`` of the ranks to Parquet (when pyarrow is installed): its time and
  memory as ratios to the main ``combine`` row;
- ``tracemerge report`` of the first 4 ranks (~1 M events at the default size), with the
  compiled core and with ``TRACEMERGE_CORE=python``: seconds per million events and the ratio;
- ``tracemerge report`` of all the ranks, against the main ``combine`` row (≤ 1.2× its time);
- with ``--previous DIR`` (a checkout of the previous release, its core built, e.g.
  ``git worktree add DIR <commit>``), its ``combine``, ``export`` and ``report`` (all ranks)
  of the same ranks, so the gain is a ratio measured on one machine in one run (alternated
  with the others by ``--repeat``);
- ``viztracer --combine`` and HTA's ``TraceAnalysis`` load, when installed (``bench`` extra).

Several ``--mb`` make one table per size, in one run.

Other engineers share the machine: the load average is printed with the table.
"""

import argparse
import importlib.util
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root: tests/support

from tests.support import gen_kineto  # noqa: E402


def run_timed(cmd):
    """(wall s, returncode, stderr tail, CPU s of its process tree) of ``cmd`` run alone.
    The CPU time (user + sys of every process it waited for, workers included) is the
    steadier figure on a machine shared with other work."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    err = proc.stderr.decode(errors="replace").strip().splitlines()
    return wall, proc.returncode, (err[-1] if err else ""), cpu


def run_sampled(cmd):
    """Peak memory bytes of ``cmd``'s process tree.

    Memory is the sum of each process's PSS (proportional set size): forked workers share
    the parent's pages, and summing RSS would count those pages once per worker."""
    import psutil
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    return peak


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


MAIN = "tracemerge combine .json (--jobs {jobs})"  # the row the targets are about
PYTHON_CORE = "tracemerge combine .json (--jobs {jobs}), TRACEMERGE_CORE=python"
PFTRACE = "tracemerge combine .pftrace (--jobs {jobs})"
CAT = "cat of the inputs into one file"
CAT_PIPE = "cat of the inputs through a pipe"
PREVIOUS = "previous release combine .json (--jobs {jobs})"
PREVIOUS_OF = "previous release: "  # before the name of a row the previous release runs too
REPORT_ALL = "tracemerge report (all ranks)"
EXPORT = "tracemerge export Parquet (--jobs {jobs})"  # issue 28: <= 1.5x MAIN's time, memory within MAIN's
TARGET_MB = 600
# the report's target is about ~1 M events: 4 ranks of the default 60 MB hold 956 k
REPORT_RANKS = 4
REPORT = "tracemerge report ({n} ranks)"
REPORT_PYTHON = "tracemerge report ({n} ranks), TRACEMERGE_CORE=python"
REPORT_TARGET_S_PER_M = 1.5


def contenders(paths, out, jobs, previous=None):
    tm = [sys.executable, "-m", "tracemerge", "combine", *paths, "--force"]
    yield "floor, 1 process", [sys.executable, "-c", FLOOR, "1", out + "floor1.json", *paths]
    yield f"floor, {jobs} processes", [sys.executable, "-c", FLOOR, str(jobs), out + "floorN.json", *paths]
    yield CAT, ["sh", "-c", 'out="$1"; shift; cat "$@" > "$out"', "cat", out + "cat.json", *paths]
    # coreutils' cat may use copy_file_range, which some filesystems do without copying the
    # bytes through memory; a pipe makes every byte pass through a process, as a merge's do
    yield CAT_PIPE, ["sh", "-c", 'out="$1"; shift; cat "$@" | cat > "$out"', "cat",
                                               out + "catp.json", *paths]
    yield MAIN.format(jobs=jobs), tm + ["-o", out + "tm.json"]
    # run from its own directory: `python -m` puts the working directory before PYTHONPATH;
    # each writes where its row of this release writes (deleted after every run): a file made
    # again under a name just unlinked is written faster here, by up to 0.3 s at 8 x 20 MB
    at_previous = ["sh", "-c", 'cd "$0" && exec env PYTHONPATH="$0" "$@"', previous]
    if previous:
        yield PREVIOUS.format(jobs=jobs), [*at_previous, *tm, "-o", out + "tm.json"]
    yield PYTHON_CORE.format(jobs=jobs), ["env", "TRACEMERGE_CORE=python", *tm, "-o", out + "tmp.json"]
    yield "tracemerge combine .json (--jobs 1)", tm + ["-o", out + "tm1.json", "--jobs", "1"]
    yield f"tracemerge combine .json.gz (--jobs {jobs})", tm + ["-o", out + "tm.json.gz"]
    if importlib.util.find_spec("zstandard"):
        yield f"tracemerge combine .json.zst (--jobs {jobs})", tm + ["-o", out + "tm.json.zst"]
    if importlib.util.find_spec("tracemerge.formats.perfetto.encoder"):
        yield PFTRACE.format(jobs=jobs), tm + ["-o", out + "tm.pftrace"]
    if importlib.util.find_spec("pyarrow"):
        export = [sys.executable, "-m", "tracemerge", "export", *paths, "--force"]
        yield EXPORT.format(jobs=jobs), [*export, "-o", out + "tables"]
        if previous:
            yield PREVIOUS_OF + EXPORT.format(jobs=jobs), [*at_previous, *export, "-o", out + "tables"]
    # report reads every event of its ranks but writes a few lines: its own rows, with the
    # Python core beside it for the ratio (the golden tests pin that both give the same bytes)
    some = paths[:REPORT_RANKS]
    report = [sys.executable, "-m", "tracemerge", "report", *some, "-q"]
    yield REPORT.format(n=len(some)), report + ["-o", out + "report.txt"]
    yield REPORT_PYTHON.format(n=len(some)), ["env", "TRACEMERGE_CORE=python", *report, "-o", out + "reportp.txt"]
    report_all = [sys.executable, "-m", "tracemerge", "report", *paths, "-q"]
    yield REPORT_ALL, [*report_all, "-o", out + "report-all.txt"]
    if previous:
        yield PREVIOUS_OF + REPORT_ALL, [*at_previous, *report_all, "-o", out + "report-all.txt"]
    if shutil.which("viztracer"):
        yield "viztracer --combine", ["viztracer", "--combine", *paths, "-o", out + "viz.json"]
    if importlib.util.find_spec("hta"):
        code = ("import sys; from hta.trace_analysis import TraceAnalysis; "
                "TraceAnalysis(trace_dir=sys.argv[1])")
        yield "HTA TraceAnalysis load", [sys.executable, "-c", code, os.path.dirname(paths[0])]


def inputs(directory, ranks, mb):
    """The paths of ``ranks`` generated rank files of ``mb`` MB in ``directory`` (made once)."""
    indir = os.path.join(directory, f"{ranks}x{mb:g}MB-rank-files")
    paths = sorted(os.path.join(indir, f) for f in os.listdir(indir)) if os.path.isdir(indir) else []
    if len(paths) != ranks:
        shutil.rmtree(indir, ignore_errors=True)
        paths = gen_kineto.generate(indir, ranks, mb, rank_files=True)
    return paths


def settle(paths):
    """The same page cache before every run (``--settle``): the dirty pages written back, the
    cache dropped, the inputs read into it again. Without it a contender that writes its
    output just after another's was deleted finds the deleted file's pages free and writes
    faster than one that must first reclaim cached pages: measured here, combine of 8 x 20
    MB in 0.57 s or 0.74 s by its place in the round alone. Needs root (else a no-op, said)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError as e:
        print(f"  (--settle: the page cache was not dropped: {e})", flush=True)
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def measure(name, cmd, outdir, memory=True, paths=None):
    """(name, wall s, peak bytes, returncode, stderr tail) of one contender (``memory``: also
    run under the sampler for its peak memory; ``paths``: the inputs, to settle the page
    cache with before each run)."""
    if paths:
        settle(paths)
    wall, rc, err, cpu = run_timed(cmd)
    if paths and memory and not rc:
        settle(paths)
    peak = run_sampled(cmd) if not rc and memory else 0
    for f in os.listdir(outdir):
        path = os.path.join(outdir, f)
        shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)  # export writes a directory
    print(f"  {name}: {wall:.2f} s, {cpu:.2f} s CPU, {peak / 1e6:.0f} MB" + (f"  (exit {rc}: {err})" if rc else ""),
          flush=True)
    return name, wall, peak, rc, err, cpu


def median_row(measured):
    """One contender's row from its rounds: the median wall and peak of the rounds that ran,
    else the first failure."""
    ok = [m for m in measured if not m[3]]
    if not ok:
        return measured[0]
    return (measured[0][0], statistics.median(m[1] for m in ok), statistics.median(m[2] for m in ok), 0, "",
            statistics.median(m[5] for m in ok))


def count_events(paths):
    """The number of trace events in ``paths`` (every event has one "ph" key; the generated
    files spell it only there)."""
    n = 0
    for path in paths:
        with open(path, "rb") as f:
            n += f.read().count(b'"ph"')
    return n


def report_verdict(rows, paths):
    """The report's target line (seconds per million events, and the ratio to the Python
    core), or None when its row did not run."""
    by = {r[0]: r for r in rows if not r[3]}
    some = paths[:REPORT_RANKS]
    fast, slow = by.get(REPORT.format(n=len(some))), by.get(REPORT_PYTHON.format(n=len(some)))
    if fast is None:
        return None
    events = count_events(some)
    per_m = fast[1] / (events / 1e6)
    line = f"report, {len(some)} ranks ({events / 1e3:.0f} k events): {fast[1]:.2f} s = {per_m:.2f} s per M events"
    if slow:
        line += f" ({slow[1] / fast[1]:.2f}x faster than the Python core's {slow[1]:.2f} s)"
    return line + f": <= {REPORT_TARGET_S_PER_M} s per M events: {'met' if per_m <= REPORT_TARGET_S_PER_M else 'NOT met'}"


def paired(runs, name, other, at):
    """The per-round ratios of ``name``'s to ``other``'s measure ``at`` (1: wall, 2: peak)."""
    return [x[at] / y[at] for x, y in zip(runs.get(name, []), runs.get(other, [])) if not x[3] and not y[3]]


def _spread(runs, name, other):
    """ ' (rounds' ratios LO-HI)' of ``name``'s wall to ``other``'s, when there were several rounds."""
    times = paired(runs or {}, name, other, 1)
    return f" (rounds' ratios {min(times):.2f}-{max(times):.2f}x)" if len(times) > 1 else ""


def verdicts(rows, jobs, scaled, runs=None):
    """Lines saying whether each target of the issue is met by the main tracemerge row
    (``runs``: every round's measures by name, for the spread of the export's ratios)."""
    by = {r[0]: r for r in rows if not r[3]}
    main = by.get(MAIN.format(jobs=jobs))
    if main is None:
        return []
    out = []
    floor, viz, cat = by.get("floor, 1 process"), by.get("viztracer --combine"), by.get(CAT)
    pftrace = by.get(PFTRACE.format(jobs=jobs))
    if cat:
        out.append(f"json <= 2x cat: {main[1]:.2f} s = {main[1] / cat[1]:.2f}x cat ({cat[1]:.2f} s): "
                   f"{'met' if main[1] <= 2 * cat[1] else 'NOT met'}")
    pipe, previous, report = by.get(CAT_PIPE), by.get(PREVIOUS.format(jobs=jobs)), by.get(REPORT_ALL)
    if pipe:
        out.append(f"json <= 5x cat | cat: {main[1] / pipe[1]:.2f}x ({pipe[1]:.2f} s): "
                   f"{'met' if main[1] <= 5 * pipe[1] else 'NOT met'}" + _spread(runs, main[0], pipe[0]))
    if previous:
        out.append(f"previous release / now: {previous[1] / main[1]:.2f}x faster"
                   + _spread(runs, previous[0], main[0]))
    for name in (REPORT_ALL, EXPORT.format(jobs=jobs)):
        now, before = by.get(name), by.get(PREVIOUS_OF + name)
        if now and before:  # issue 49: no slower than the release before (<= 1.02x median)
            ratio = now[1] / before[1]
            out.append(f"{name} / previous release's: {ratio:.2f}x wall, {now[5] / before[5]:.2f}x CPU "
                       f"(<= 1.02x: {'met' if ratio <= 1.02 else 'NOT met'})" + _spread(runs, now[0], before[0]))
    if report:
        out.append(f"report (all ranks) <= 1.2x json: {report[1] / main[1]:.2f}x: "
                   f"{'met' if report[1] <= 1.2 * main[1] else 'NOT met'}" + _spread(runs, report[0], main[0]))
    if floor:
        out.append(f"wall <= single-process floor: {main[1]:.2f} <= {floor[1]:.2f} s: "
                   f"{'met' if main[1] <= floor[1] else 'NOT met'}")
    if pftrace:
        out.append(f".pftrace <= 1.5x json: {pftrace[1] / main[1]:.2f}x: "
                   f"{'met' if pftrace[1] <= 1.5 * main[1] else 'NOT met'}")
    export = by.get(EXPORT.format(jobs=jobs))
    if export:
        line = f"export <= 1.5x json: {export[1] / main[1]:.2f}x: {'met' if export[1] <= 1.5 * main[1] else 'NOT met'}"
        if main[2]:  # not measured with --time-only
            line += f"; its peak memory {export[2] / main[2]:.2f}x json's: {'met' if export[2] <= main[2] else 'NOT met'}"
        times = paired(runs or {}, export[0], main[0], 1)
        peaks = paired(runs or {}, export[0], main[0], 2) if main[2] else []
        if len(times) > 1:
            line += (f" (medians; {len(times)} rounds' ratios: time {min(times):.2f}-{max(times):.2f}x"
                     + (f", memory {min(peaks):.2f}-{max(peaks):.2f}x)" if peaks else ")"))
        out.append(line)
    if viz:
        out.append(f">= 5x faster than viztracer --combine (6x before): {viz[1] / main[1]:.1f}x: "
                   f"{'met' if viz[1] / main[1] >= 5 else 'NOT met'}" + _spread(runs, viz[0], main[0]))
    if main[2]:  # not measured with --time-only
        out.append(f"peak memory <= {TARGET_MB} MB: {main[2] / 1e6:.0f} MB: "
                   f"{'met' if main[2] <= TARGET_MB * 1e6 else 'NOT met'}")
    for name in (pipe, previous, report, viz):
        if name and main[5]:
            out.append(f"CPU of {name[0]} / json's: {name[5] / main[5]:.2f}x ({name[5]:.2f} / {main[5]:.2f} s)")
    if scaled:
        n, wall, peak = scaled
        out.append(f"{n} ranks: {wall / main[1]:.2f}x the time, {peak / main[2]:.2f}x the memory of the main row "
                   f"(targets ~2x, <= 1.15x)")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--mb", type=float, action="append", default=None,
                   help="MB per rank (default 60); several make one table each, in one run")
    p.add_argument("--previous", default=None, metavar="DIR",
                   help="a checkout of the previous release (its core built): its combine as a row")
    p.add_argument("--dir", default=None, help="where the inputs are generated (default: a temp dir)")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="run only contenders whose name contains this (repeat it for several)")
    p.add_argument("--skip", action="append", default=[], metavar="NAME",
                   help="leave out contenders whose name contains this (repeat it for several)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run every contender N times, alternated; the rows are the medians")
    p.add_argument("--skip-peers", action="store_true", help="skip viztracer and HTA")
    p.add_argument("--settle", action="store_true",
                   help="before every run: sync, drop the page cache (root) and read the inputs again")
    p.add_argument("--time-only", action="store_true", help="no second run of each contender for its memory")
    p.add_argument("--scale", type=int, default=None, metavar="N",
                   help="also merge N ranks (main tracemerge row only) and compare with --ranks")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tracemerge-bench-pyc-") as pycache:
        from_bytecode(pycache, [os.path.dirname(HERE)] + ([a.previous] if a.previous else []))
        for mb in a.mb or [60.0]:
            run_size(a, mb)


def from_bytecode(pycache, checkouts):
    """Every contender reads its modules from bytecode, as from an installed package (pip
    compiles what it installs; viztracer's and numpy's bytecode is in site-packages): an
    editable checkout run with ``PYTHONDONTWRITEBYTECODE`` set would compile tracemerge's
    ~200 modules from source in every process, ~0.17 s here, which no installed copy pays.
    The bytecode goes to a temporary ``PYTHONPYCACHEPREFIX``, made before any timing."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = pycache
    for checkout in checkouts:
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(checkout, "tracemerge")],
                       check=True, stdout=subprocess.DEVNULL)


def run_size(a, mb):
    """The table and the verdicts of ``a.ranks`` ranks of ``mb`` MB."""
    directory = a.dir or tempfile.mkdtemp(prefix="tracemerge-bench-")
    paths = inputs(directory, a.ranks, mb)
    total_mb = sum(os.path.getsize(x) for x in paths) / 1e6
    report_mb = sum(os.path.getsize(x) for x in paths[:REPORT_RANKS]) / 1e6
    outdir = tempfile.mkdtemp(prefix="tracemerge-bench-out-")
    out = os.path.join(outdir, "")
    print(f"\ninputs: {a.ranks} ranks × {mb:g} MB = {total_mb:.0f} MB in {os.path.dirname(paths[0])}; "
          f"{os.cpu_count()} cores; load before {os.getloadavg()[0]:.2f}", flush=True)

    chosen = [(name, cmd) for name, cmd in contenders(paths, out, a.jobs, a.previous)
              if (not a.only or any(o in name for o in a.only)) and not any(o in name for o in a.skip)
              and not (a.skip_peers and ("viztracer" in name or "HTA" in name))]
    runs = {name: [] for name, _ in chosen}
    for r in range(a.repeat):
        if a.repeat > 1:
            print(f"round {r + 1} of {a.repeat}, load {os.getloadavg()[0]:.2f}", flush=True)
        # each round in its own order (seeded, so a run can be repeated): a contender that always
        # followed the same one would carry that one's after-effects (caches, writeback) in its times
        for name, cmd in (chosen if r == 0 else random.Random(r).sample(chosen, len(chosen))):
            runs[name].append(measure(name, cmd, outdir, not a.time_only, paths if a.settle else None))
    rows = [median_row(runs[name]) for name, _ in chosen]
    scaled = None
    if a.scale:
        more = inputs(directory, a.scale, mb)
        name, cmd = next((n, c) for n, c in contenders(more, out, a.jobs) if n == MAIN.format(jobs=a.jobs))
        _, wall, peak, rc, _, _ = measure(f"{name}, {a.scale} ranks", cmd, outdir)
        scaled = (a.scale, wall, peak) if not rc else None
    shutil.rmtree(outdir, ignore_errors=True)

    floor = next((r[1] for r in rows if r[0] == "floor, 1 process"), None)
    cat = next((r[1] for r in rows if r[0] == CAT and not r[3]), None)
    viz = next((r[1] for r in rows if r[0] == "viztracer --combine" and not r[3]), None)
    print(f"\nload after {os.getloadavg()[0]:.2f}\n")
    print("| what | wall s | CPU s | MB/s | peak PSS MB (tree) | × cat | × floor (1 proc) | viztracer ÷ this |")
    print("|---|---|---|---|---|---|---|---|")
    for name, wall, peak, rc, err, cpu in rows:
        ratio_cat = f"{wall / cat:.2f}" if cat else "-"
        ratio_floor = f"{wall / floor:.2f}" if floor else "-"
        ratio_viz = f"{viz / wall:.1f}" if viz else "-"
        status = "" if not rc else f" (failed: {err})"
        # the report rows read only the first REPORT_RANKS ranks
        mb = report_mb if name.startswith(("tracemerge report", PREVIOUS_OF + "tracemerge report")) else total_mb
        print(f"| {name}{status} | {wall:.2f} | {cpu:.2f} | {mb / wall:.0f} | {peak / 1e6:.0f} | {ratio_cat} | {ratio_floor} "
              f"| {ratio_viz} |")
    for line in verdicts(rows, a.jobs, scaled, runs):
        print(f"target: {line}")
    report = report_verdict(rows, paths)
    if report:
        print(f"target: {report}")


if __name__ == "__main__":
    main()
