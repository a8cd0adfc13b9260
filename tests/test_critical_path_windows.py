"""Critical-path windows of ranks that do not step together (issue 26, item 4).

A real 2-worker RPC job on loopback, both workers profiling with one
``torch.profiler.schedule`` of two cycles. In the first cycle the workers step together
(worker0 signals worker1 into each step with an RPC); in the second, worker0 runs its
steps alone and only then lets worker1 run its own, so the ``ProfilerStep#N`` spans of the
two ranks in that cycle never meet. The windows of the critical path are checked: those
of the first cycle join both ranks under their plain step names, those of the second are
per rank, none overlap, and no window or rank is given more time than it has.

Constructed jobs pin the rule down first: steps of one name are one window when they
overlap or an RPC or collective joins them, else one window per rank; windows that would
overlap are cut where the one that ended first ended.
"""

import textwrap

import pytest
from support import cli
from support.jobs import run_script
from support.ranks import BASE, US, Ranks, load_output

from tests.test_analysis import assert_tiles
from tracemerge.analysis.critical_path import COMPUTE, critical_path, totals
from tracemerge.analysis.whatif import whatif

pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def spans(windows):
    """[(window, start µs, end µs)]."""
    return [(w.window, (w.start_ns - BASE) / US, (w.end_ns - BASE) / US) for w in windows]


def assert_disjoint(windows):
    """Windows in time order that never overlap, each tiled by its path, no rank counted twice."""
    for a, b in zip(windows, windows[1:]):
        assert a.end_ns <= b.start_ns
    for w in windows:
        assert_tiles(w)
        assert sum(w.by_kind.values()) == w.end_ns - w.start_ns
    by_rank, _ = totals(windows)
    span = windows[-1].end_ns - windows[0].start_ns
    assert all(ns <= span for ns in by_rank.values())


# --- constructed ---------------------------------------------------------------------------

def two_ranks_apart(tmp_path, join=None):
    """Rank 0 runs ProfilerStep#1 over [0, 100] µs, rank 1 over [110, 200]: they do not
    overlap. ``join``: "request" (an RPC rank 0 sends in its step, rank 1 starts in its
    step), "response" (an RPC of rank 1 sent before its step, served by rank 0 in its step,
    completed in rank 1's step) or "collective" (both enter it in their steps)."""
    j = Ranks(2)
    j.op(0, "ProfilerStep#1", 0, 100, cat="user_annotation")
    j.op(0, "work0", 0, 80)
    j.op(1, "ProfilerStep#1", 110, 200, cat="user_annotation")
    j.op(1, "work1", 110, 190)
    if join == "request":
        j.rpc(0, 1, "f", 90, 120, 150, 160, caller_tid=2, callee_tid=7, kind="rpc_async")
    elif join == "response":
        j.rpc(1, 0, "g", 60, 70, 95, 130, caller_tid=2, callee_tid=7, kind="rpc_async")
    elif join == "collective":
        j.collective(0, (85, 120), (125, 125))
    return j.job(tmp_path)


def test_steps_that_do_not_meet_are_windows_per_rank(tmp_path):
    windows = critical_path(two_ranks_apart(tmp_path))
    assert spans(windows) == [("ProfilerStep#1 (rank 0)", 0, 100), ("ProfilerStep#1 (rank 1)", 110, 200)]
    assert [set(w.by_rank) for w in windows] == [{0}, {1}]
    assert_disjoint(windows)


@pytest.mark.parametrize("join", ["request", "response", "collective"])
def test_steps_an_exchange_joins_are_one_window(tmp_path, join):
    windows = critical_path(two_ranks_apart(tmp_path, join))
    assert spans(windows) == [("ProfilerStep#1", 0, 200)]
    assert_disjoint(windows)


def test_ranks_that_meet_share_a_window_and_the_rank_apart_has_its_own(tmp_path):
    j = Ranks(3)
    for r, (a, b) in enumerate([(0, 100), (10, 105), (300, 400)]):
        j.op(r, "ProfilerStep#4", a, b, cat="user_annotation")
        j.op(r, f"work{r}", a, b - 5)
    windows = critical_path(j.job(tmp_path))
    assert spans(windows) == [("ProfilerStep#4 (ranks 0, 1)", 0, 105), ("ProfilerStep#4 (rank 2)", 300, 400)]
    assert windows[0].segments[-1].rank == 1 and set(windows[1].by_rank) == {2}
    assert_disjoint(windows)


def skewed_steps(tmp_path):
    """Ranks stepping together, rank 1 30 µs behind: its step N still runs when rank 0's
    step N+1 has begun."""
    j = Ranks(2)
    for step in range(3):
        for r in range(2):
            a = step * 100 + 30 * r
            j.op(r, f"ProfilerStep#{step}", a, a + 100, cat="user_annotation")
            j.op(r, f"work{r}", a, a + 90)
    return j.job(tmp_path)


def test_overlapping_windows_are_cut_where_the_one_before_ended(tmp_path):
    job = skewed_steps(tmp_path)
    windows = critical_path(job)
    assert spans(windows) == [("ProfilerStep#0", 0, 130), ("ProfilerStep#1", 130, 230), ("ProfilerStep#2", 230, 330)]
    assert_disjoint(windows)
    assert all(w.segments[-1].rank == 1 for w in windows)
    # whatif replays a cut window from where it now begins: unchanged, it predicts what was measured
    assert [(p.window, p.measured_ns, p.predicted_ns) for p in whatif(job, [])] == [
        (w.window, w.end_ns - w.start_ns, w.end_ns - w.start_ns) for w in windows]


def test_a_window_inside_another_keeps_its_time(tmp_path):
    """Rank 1's ProfilerStep#5 ends inside rank 0's ProfilerStep#1: the time they share is
    the one that ended first's, and the other begins where it ended."""
    j = Ranks(2)
    j.op(0, "ProfilerStep#1", 0, 300, cat="user_annotation")
    j.op(1, "ProfilerStep#5", 100, 150, cat="user_annotation")
    windows = critical_path(j.job(tmp_path))
    assert spans(windows) == [("ProfilerStep#5", 100, 150), ("ProfilerStep#1", 150, 300)]
    assert [(s.rank, s.kind) for s in windows[1].segments] == [(0, COMPUTE)]
    assert_disjoint(windows)


def test_repeated_names_are_numbered(tmp_path):
    j = Ranks(2)
    for a in (0, 500):
        j.op(0, "ProfilerStep#1", a, a + 100, cat="user_annotation")
    j.op(1, "ProfilerStep#1", 200, 300, cat="user_annotation")
    windows = critical_path(j.job(tmp_path))
    assert spans(windows) == [("ProfilerStep#1 (rank 0)", 0, 100), ("ProfilerStep#1 (rank 1)", 200, 300),
                              ("ProfilerStep#1 (rank 0) [2]", 500, 600)]


# --- the real job ----------------------------------------------------------------------------

JOB_TIMEOUT_S = 180
TOGETHER = ("ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4")   # cycle 0 records steps 2-4
APART = ("ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9")      # cycle 1 records steps 7-9

JOB = textwrap.dedent("""
    import os, queue, sys, time
    import torch
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    from torch.autograd.profiler import record_function
    from tracemerge.capture import profile

    TIMEOUT_S = 60
    arrived, signals = queue.Queue(), queue.Queue()

    def signal(what):   # served on worker1: returns once worker1 is in step `what`, and lets it go on
        if what != "go":
            assert arrived.get(timeout=TIMEOUT_S) == what
        signals.put(what)
        return 0

    def work(ms):
        with record_function("work"):
            x = torch.ones(16, 16)
            for _ in range(3):
                x = torch.tanh(x @ x / 16)
            time.sleep(ms / 1000)

    def worker(rank, port, out):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2,
                     rpc_backend_options=rpc.TensorPipeRpcBackendOptions(rpc_timeout=TIMEOUT_S))
        # steps 0-4: cycle 0 (2-4 recorded), steps 5-9: cycle 1 (7-9 recorded)
        schedule = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2)
        with profile(out, schedule=schedule) as p:
            for step in range(10):
                if step < 5:      # together: the two meet in each step (an RPC), then work
                    if rank == 0:
                        rpc.rpc_sync("worker1", signal, args=(step,))
                        work(20)
                    else:
                        arrived.put(step)
                        assert signals.get(timeout=TIMEOUT_S) == step
                        work(10)
                elif rank == 0:   # apart: worker0 steps alone ...
                    work(15)
                else:             # ... and worker1 waits for it in step 5, which is not recorded
                    if step == 5:
                        assert signals.get(timeout=TIMEOUT_S) == "go"
                    work(15)
                p.step()
            if rank == 0:
                rpc.rpc_sync("worker1", signal, args=("go",))
        rpc.shutdown()

    if __name__ == "__main__":
        port, out = int(sys.argv[1]), sys.argv[2]
        mp.spawn(worker, args=(port, out), nprocs=2)
""")


@pytest.fixture(scope="module")
def stepped(tmp_path_factory):
    """(rank files, the report's JSON, the merged trace) of the job."""
    pytest.importorskip("torch")
    where = tmp_path_factory.mktemp("stepping")
    out = run_script(JOB, where, JOB_TIMEOUT_S)
    files = sorted(str(p) for p in out.iterdir())
    assert len(files) == 4, files   # rank{0,1}.cycle{0,1}.json.gz
    merged = where / "merged.json"
    report = where / "report.json"
    res = cli.run("combine", *files, "-o", merged, "--critical-path", timeout=300)
    assert res.exit_code == 0, res.stderr
    res = cli.run("report", *files, "--analysis", "--format", "json", "-o", report, timeout=300)
    assert res.exit_code == 0, res.stderr
    return files, load_output(report), load_output(merged)


def _span_ns(doc):
    """(first, last) ns of the merged trace's events on the ranks' processes."""
    base = doc["baseTimeNanoseconds"]
    pid = doc["tracemerge"]["critical_path"]["pid"]
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("pid") != pid]
    return (base + round(min(e["ts"] for e in ev) * 1000),
            base + round(max(e["ts"] + e["dur"] for e in ev) * 1000))


def test_windows_of_ranks_that_step_apart_are_per_rank(stepped):
    _, report, _ = stepped
    names = [w["window"] for w in report["critical_path"]]
    assert names == list(TOGETHER) + [f"{s} (rank 0)" for s in APART] + [f"{s} (rank 1)" for s in APART], names
    for w in report["critical_path"]:
        if "(rank " in w["window"]:
            rank = int(w["window"].rsplit(" ", 1)[1].rstrip(")"))
            # a window of one rank's step ends where that step ended, on that rank
            assert w["segments"][-1]["rank"] == rank


def test_windows_never_overlap_nor_count_time_twice(stepped):
    _, report, doc = stepped
    windows = report["critical_path"]
    for a, b in zip(windows, windows[1:]):
        assert a["end_ns"] <= b["start_ns"], (a["window"], b["window"])
    for w in windows:
        segs = w["segments"]
        assert sum(s["end_ns"] - s["start_ns"] for s in segs) <= w["end_ns"] - w["start_ns"]
        assert all(w["start_ns"] <= s["start_ns"] <= s["end_ns"] <= w["end_ns"] for s in segs)
    first, last = _span_ns(doc)
    assert first <= windows[0]["start_ns"] and windows[-1]["end_ns"] <= last
    totals = report["critical_path_totals"]
    assert sum(totals["by_kind"].values()) <= last - first
    for rank, ns in totals["by_rank"].items():
        assert ns <= last - first, (rank, ns, last - first)
    # a window of steps that do not meet is not mostly time that nothing traced fills
    for w in windows:
        untraced = sum(s["end_ns"] - s["start_ns"] for s in w["segments"] if s["name"] == "(untraced)")
        assert untraced <= 0.5 * (w["end_ns"] - w["start_ns"]), w["window"]


def test_combine_draws_the_windows_on_one_track(stepped):
    _, report, doc = stepped
    pid = doc["tracemerge"]["critical_path"]["pid"]
    names = {w["window"] for w in report["critical_path"]}
    drawn = [e for e in doc["traceEvents"] if e.get("pid") == pid and e.get("ph") == "X" and e["name"] in names]
    assert sorted(e["name"] for e in drawn) == sorted(names)
    assert {e["tid"] for e in drawn} == {1}
    drawn.sort(key=lambda e: e["ts"])
    for a, b in zip(drawn, drawn[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
