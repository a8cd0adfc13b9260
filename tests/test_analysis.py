"""The cross-rank analyses on constructed jobs whose answers are known by construction:
real rank files, read and aligned by the real Session, walked by the real code."""

import glob

import pytest
from support.ranks import BASE, US, Ranks, ns

from tracemerge.analysis.critical_path import (
    COLLECTIVE,
    COMPUTE,
    EDGES,
    EXECUTION,
    IDLE,
    KINDS,
    QUEUEING,
    TRANSFER,
    UNTRACED,
    critical_path,
)
from tracemerge.analysis.job_timeline import job_timeline
from tracemerge.analysis.stragglers import stragglers
from tracemerge.analysis.waits import wait_states
from tracemerge.job import Session
from tracemerge.runtime.engine import LocalEngine


def path_of(window):
    """[(rank, name, kind, start µs, end µs)] of a window's segments."""
    return [(s.rank, s.name, s.kind, (s.start_ns - BASE) / US, (s.end_ns - BASE) / US) for s in window.segments]


def assert_tiles(window):
    segs = window.segments
    assert segs[0].start_ns == window.start_ns and segs[-1].end_ns == window.end_ns
    for a, b in zip(segs, segs[1:]):
        assert a.end_ns == b.start_ns and a.start_ns < a.end_ns


# --- a chain: rank0 -> RPC -> rank1 (slow) -> nested RPC -> rank2 -------------------------

def chain(tmp_path):
    j = Ranks(3)
    j.op(0, "prep", 0, 100)
    f = j.rpc(0, 1, "f", 100, 150, 950, 1000)
    j.op(0, "post", 1000, 1100)
    j.op(1, "slow_op", 160, 400, tid=7)
    g = j.rpc(1, 2, "g", 400, 450, 750, 800, caller_tid=7, callee_tid=9)
    j.op(1, "after", 800, 940, tid=7)
    j.op(2, "leaf", 460, 740, tid=9)
    return j.job(tmp_path), f, g


def test_chain_path_is_known(tmp_path):
    job, f, g = chain(tmp_path)
    [w] = critical_path(job)
    assert (w.window, (w.start_ns - BASE) / US, (w.end_ns - BASE) / US) == ("trace", 0, 1100)
    assert path_of(w) == [
        (0, "prep", COMPUTE, 0, 100),
        (0, f, TRANSFER, 100, 150),
        (1, f + "#remote", EXECUTION, 150, 160),
        (1, "slow_op", EXECUTION, 160, 400),
        (1, g, TRANSFER, 400, 450),
        (2, g + "#remote", EXECUTION, 450, 460),
        (2, "leaf", EXECUTION, 460, 740),
        (2, g + "#remote", EXECUTION, 740, 750),
        (2, g, TRANSFER, 750, 800),
        (1, "after", EXECUTION, 800, 940),
        (1, f + "#remote", EXECUTION, 940, 950),
        (1, f, TRANSFER, 950, 1000),
        (0, "post", COMPUTE, 1000, 1100),
    ]
    assert_tiles(w)
    assert w.by_kind == {COMPUTE: 200 * US, TRANSFER: 200 * US, EXECUTION: 700 * US}
    assert w.by_rank == {0: 250 * US, 1: 500 * US, 2: 350 * US}
    assert [s.tid for s in w.segments if s.rank == 2] == [9, 9, 9, 9]


def test_chain_without_rpc_edges_stays_on_rank0(tmp_path):
    job, f, _ = chain(tmp_path)
    [w] = critical_path(job, EDGES - {"rpc"})
    assert path_of(w) == [(0, "prep", COMPUTE, 0, 100), (0, f, TRANSFER, 100, 1000), (0, "post", COMPUTE, 1000, 1100)]


def test_chain_with_skewed_clocks_aligned_by_rpc(tmp_path):
    """Rank 1's clock reads 5 ms ahead: aligned by the RPCs (symmetric delays), the path is the same."""
    from tests.support.synth import skew_file
    job, _, _ = chain(tmp_path)
    src = tmp_path / "rank1.json"
    skew_file(str(src), str(tmp_path / "rank1.json"), 5_000_000)
    session = Session.open([str(tmp_path / f"rank{r}.json") for r in range(3)])
    alignment = session.align("rpc")
    [w] = critical_path(job_timeline(session, alignment, LocalEngine(1)))
    assert [(r, n, k) for r, n, k, _, _ in path_of(w)] == [(r, n, k) for r, n, k, _, _ in path_of(critical_path(job)[0])]
    assert_tiles(w)


# --- a callee with one thread: the second call waited for the first ------------------------

def one_thread(tmp_path):
    j = Ranks(2)
    a = j.rpc(0, 1, "a", 0, 50, 450, 500, caller_tid=1)
    b = j.rpc(0, 1, "b", 10, 460, 860, 910, caller_tid=2)
    j.op(1, "work_a", 60, 440, tid=7)
    j.op(1, "work_b", 470, 850, tid=7)
    return j.job(tmp_path), a, b


def test_queued_call_waits_for_the_busy_thread(tmp_path):
    job, a, b = one_thread(tmp_path)
    [w] = critical_path(job)
    assert path_of(w) == [
        (0, a, TRANSFER, 0, 50),
        (1, a + "#remote", EXECUTION, 50, 60), (1, "work_a", EXECUTION, 60, 440), (1, a + "#remote", EXECUTION, 440, 450),
        (1, b + "#remote", QUEUEING, 450, 460),
        (1, b + "#remote", EXECUTION, 460, 470), (1, "work_b", EXECUTION, 470, 850),
        (1, b + "#remote", EXECUTION, 850, 860),
        (1, b, TRANSFER, 860, 910),
    ]
    assert_tiles(w)
    waits = wait_states(job)
    by_name = {r.name: r for r in waits.rpc}
    # b's request took 450 µs to start against a delivery floor of 50 µs: 400 µs of queueing
    assert by_name[b].queueing_ns == 400 * US and by_name[a].queueing_ns == 0
    assert waits.rpc[0].name == b
    # the thread was busy with a until b could start: it never waited for b's work
    assert by_name[b].callee_idle_ns == 0


def test_queued_call_without_queue_edge_goes_back_to_its_caller(tmp_path):
    job, a, b = one_thread(tmp_path)
    [w] = critical_path(job, EDGES - {"queue"})
    assert path_of(w)[:3] == [(0, UNTRACED, COMPUTE, 0, 10), (0, b, TRANSFER, 10, 60),
                              (1, b + "#remote", QUEUEING, 60, 460)]


# --- an async_execution continuation -------------------------------------------------------

def continuation(tmp_path):
    j = Ranks(3)
    j.op(1, "r1_work", 0, 50)
    a = j.rpc(1, 0, "update", 50, 100, 900, 1000, callee_tid=5)
    j.op(0, "a_op", 110, 150, tid=5)
    j.op(2, "r2_work", 0, 650)
    b = j.rpc(2, 0, "update", 650, 700, 950, 990, callee_tid=6)
    j.op(0, "apply", 710, 880, tid=6)
    return j.job(tmp_path), a, b


def test_async_continuation_follows_the_completing_thread(tmp_path):
    job, a, b = continuation(tmp_path)
    [w] = critical_path(job)
    assert path_of(w) == [
        (2, "r2_work", COMPUTE, 0, 650),
        (2, b, TRANSFER, 650, 700),
        (0, b + "#remote", EXECUTION, 700, 710),
        (0, "apply", EXECUTION, 710, 880),
        (0, a + "#remote", EXECUTION, 880, 900),
        (0, a, TRANSFER, 900, 1000),
    ]
    assert_tiles(w)


def test_without_continuations_the_async_span_is_its_own_cause(tmp_path):
    job, a, _ = continuation(tmp_path)
    [w] = critical_path(job, EDGES - {"continuation"})
    assert path_of(w) == [
        (1, "r1_work", COMPUTE, 0, 50), (1, a, TRANSFER, 50, 100),
        (0, a + "#remote", EXECUTION, 100, 110), (0, "a_op", EXECUTION, 110, 150),
        (0, a + "#remote", EXECUTION, 150, 900), (0, a, TRANSFER, 900, 1000)]


# --- a collective where rank 2 arrives last -----------------------------------------------

def late_collective(tmp_path):
    j = Ranks(3)
    work = (100, 200, 500)
    for r in range(3):
        j.op(r, "ProfilerStep#0", 0, (660, 650, 655)[r], cat="user_annotation")
        j.op(r, f"work{r}", 0, work[r])
        j.op(r, "post", 600, 650)
    j.collective(0, work, (600, 600, 600))
    return j.job(tmp_path)


def test_collective_path_goes_through_the_last_arriver(tmp_path):
    job = late_collective(tmp_path)
    [w] = critical_path(job)
    assert w.window == "ProfilerStep#0"
    assert path_of(w) == [
        (2, "work2", COMPUTE, 0, 500),
        (0, "all_reduce", COLLECTIVE, 500, 600),
        (0, "post", COMPUTE, 600, 650),
        (0, "ProfilerStep#0", COMPUTE, 650, 660),
    ]
    assert_tiles(w)
    waits = wait_states(job)
    rows = {c.rank: c for c in waits.collectives}
    assert {r: rows[r].wait_ns for r in rows} == {0: 400 * US, 1: 300 * US, 2: 0}
    assert {r: rows[r].last_arrivals for r in rows} == {0: 0, 1: 0, 2: 1}
    assert waits.by_rank[0]["collective_ns"] == 400 * US


def test_collective_without_collective_edges_stays_on_the_waiting_rank(tmp_path):
    [w] = critical_path(late_collective(tmp_path), EDGES - {"collective"})
    assert path_of(w)[:2] == [(0, "work0", COMPUTE, 0, 100), (0, "all_reduce", COLLECTIVE, 100, 600)]


# --- a step loop with one slow rank -------------------------------------------------------

def step_loop(tmp_path, slow_by_rpc=False):
    j = Ranks(4)
    for step in range(6):
        t0 = step * 2000
        for r in range(4):
            work = 1000 + 10 * ((r * 7 + step * 3) % 5)       # a little jitter
            if r == 3 and not slow_by_rpc:
                work += 500
            j.op(r, f"ProfilerStep#{step}", t0, t0 + work + 100 + (600 if r == 3 and slow_by_rpc else 0),
                 cat="user_annotation")
            j.op(r, "compute", t0, t0 + work)
            if r == 3 and slow_by_rpc:
                j.rpc(3, 0, "fetch", t0 + work, t0 + work + 50, t0 + work + 550, t0 + work + 600, callee_tid=9)
                j.op(0, "serve", t0 + work + 60, t0 + work + 540, tid=9)
    return j.job(tmp_path)


def test_step_windows_tile_and_end_on_the_slow_rank(tmp_path):
    windows = critical_path(step_loop(tmp_path))
    assert [w.window for w in windows] == [f"ProfilerStep#{i}" for i in range(6)]
    for w in windows:
        assert_tiles(w)
        assert w.segments[-1].rank == 3 and set(w.by_rank) == {3}


def test_straggler_named_with_compute(tmp_path):
    found = stragglers(step_loop(tmp_path))
    assert [s.rank for s in found.stragglers] == [3]
    s = found.stragglers[0]
    assert s.steps == 6 and s.slow_steps == 6
    assert list(s.kinds)[0] == COMPUTE and s.kinds[COMPUTE] == pytest.approx(500 * US, abs=30 * US)
    assert found.duration_ns[0][3] == 1500 * US + 10 * US * (21 % 5) + 100 * US


def test_straggler_named_with_the_rpc_it_waits_on(tmp_path):
    found = stragglers(step_loop(tmp_path, slow_by_rpc=True))
    [s] = found.stragglers
    assert s.rank == 3
    assert list(s.kinds)[:2] == [EXECUTION, TRANSFER]
    assert s.kinds[EXECUTION] == pytest.approx(500 * US) and s.kinds[TRANSFER] == pytest.approx(100 * US)
    assert COMPUTE not in s.kinds or s.kinds[COMPUTE] < 30 * US


# --- a real captured job ---------------------------------------------------------------------

def test_real_job_path_runs_through_the_serialised_callee_spans():
    """samples/threads_1: four heavy_udf calls served one after another by rank 1's single RPC
    thread. The path covers each of their callee spans almost whole, and callee execution
    is the largest kind on it."""
    import gzip
    import json
    paths = sorted(glob.glob("samples/threads_1/rank*.json.gz"))
    session = Session.open(paths)
    alignment = session.align()
    [w] = critical_path(job_timeline(session, alignment, LocalEngine(1)))
    assert_tiles(w)
    doc = json.load(gzip.open("samples/threads_1/rank1.json.gz"))
    base = doc["baseTimeNanoseconds"]
    spans = [(e["tid"], base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
             for e in doc["traceEvents"] if e.get("name", "").startswith("rpc_async#heavy_udf")]
    assert len(spans) == 4
    clock = alignment.clocks[1]
    for tid, start, end in spans:
        start, end = clock.to_reference(start), clock.to_reference(end)
        covered = sum(max(0, min(s.end_ns, end) - max(s.start_ns, start)) for s in w.segments
                      if s.rank == 1 and s.tid == tid and s.kind == EXECUTION)
        assert covered >= 0.95 * (end - start)
    assert max(w.by_kind, key=w.by_kind.get) == EXECUTION


# --- combine --critical-path ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["merged.json", "merged.pftrace"])
def test_combine_draws_the_path_in_its_own_process(tmp_path, name):
    from support.ranks import load_output

    from tests.support.pftrace import read_pftrace, thread_of
    from tracemerge.commands.compose import combine

    job, f, g = chain(tmp_path)
    session = Session.open([str(tmp_path / f"rank{r}.json") for r in range(3)])
    out = str(tmp_path / name)
    summary = combine(session, session.align("wall"), out, critical_path=True)
    assert summary["critical_path"]["windows"] == 1 and summary["critical_path"]["segments"] == 13
    ev = summary["events"]
    assert ev["in"] + ev["added"] == ev["out"] + ev["filtered"] + ev["dropped"]
    assert ev["in"] == sum(i.events for i in session.infos)
    pid = summary["critical_path"]["pid"]
    if name.endswith(".json"):
        doc = load_output(out)
        base = doc["baseTimeNanoseconds"]
        mine = [e for e in doc["traceEvents"] if e.get("pid") == pid]
        names = {e["args"]["name"] for e in mine if e["ph"] == "M" and e["name"] == "process_name"}
        slices = [(e["name"], base + round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in mine if e["ph"] == "X"]
    else:
        got = read_pftrace(out)
        names = {t.process.process_name for t in got["tracks"].values() if t.HasField("process") and t.process.pid == pid}
        slices = [(s["name"], s["ts"], s["end"] - s["ts"]) for s in got["slices"]   # reference-clock ns
                  if thread_of(got["tracks"], s["track"])[0] == pid]
    assert names == {"critical path"}
    expected = [("trace", BASE, 1100 * US)] + [(f"{kind}: {n} (rank {r})", ns(a), (b - a) * US)
                                               for r, n, kind, a, b in path_of(critical_path(job)[0])]
    assert sorted(slices) == sorted(expected)
    assert ("callee execution: leaf (rank 2)", ns(460), 280 * US) in slices


def _last_step(path):
    """The parameter server's last optimizer step, read from its own events (rank file
    ``path``): (the trainer whose update ran it, the step's and that update's (start ns, end ns)), the other trainer's last
    update on another server thread. The stepping update is the
    update_and_fetch_model callee span around the step on its thread, the innermost (an
    earlier trainer's async_execution span, still open for its future, may enclose it too)."""
    import gzip
    import json
    doc = json.load(gzip.open(path))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    step = max((e for e in events if e["name"].startswith("Optimizer.step")), key=lambda e: e["ts"])
    update = max((e for e in events if "update_and_fetch_model" in e["name"] and e["name"].endswith("#remote")
                  and e["tid"] == step["tid"] and e["ts"] <= step["ts"] and step["ts"] + step["dur"] <= e["ts"] + e["dur"]),
                 key=lambda e: e["ts"])
    last = update["name"].split("(", 1)[1].split(" ->")[0]
    waiter = max((e for e in events if "update_and_fetch_model" in e["name"] and e["name"].endswith("#remote")
                  and f"({last} ->" not in e["name"]), key=lambda e: e["ts"])
    # else the two updates nest on one thread, and no continuation is needed to reach the step
    assert waiter["tid"] != step["tid"], "the capture's last updates ran on one server thread"
    base = doc["baseTimeNanoseconds"]
    return last, *((base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000)) for e in (step, update))


def test_real_async_update_continues_from_the_call_that_ran_the_optimizer():
    """samples/parameter_server: update_and_fetch_model is async_execution; a trainer's update
    returns when the batch is complete, which the last trainer's update does by running the
    optimizer. The path to the end of the other trainer's run_trainer goes, through the
    continuation, into that update's last step (who came last is read from the capture)."""
    from tracemerge.analysis.critical_path import walk
    paths = sorted(glob.glob("samples/parameter_server/rank*.json.gz"))
    last, step, update = _last_step(paths[0])   # rank 0 is the reference: its times are the path's
    [waiter] = {"trainer1", "trainer2"} - {last}
    session = Session.open(paths)
    job = job_timeline(session, session.align(), LocalEngine(1))
    [(rank, span)] = [job.callee_span[c] for c in job.callee_span
                      if job.call_name[c] == f"rpc_async#run_trainer(ps -> {waiter})"]
    th = job.thread(rank, int(job.ranks[rank].span_thread[span]))
    start, end = job.span_start[rank][span], job.span_end[rank][span]
    with_cont = walk(job, th, start, end)
    without = walk(job, th, start, end, EDGES - {"continuation"})
    for segs in (with_cont, without):
        assert segs[0].start_ns == start and segs[-1].end_ns == end
        assert all(a.end_ns == b.start_ns for a, b in zip(segs, segs[1:]))

    def on_ps(segs, text, during):
        return [s for s in segs if s.rank == 0 and text in s.name and s.start_ns < during[1] and s.end_ns > during[0]]
    assert on_ps(with_cont, "Optimizer.step", step) and on_ps(with_cont, f"update_and_fetch_model({last} -> ps)", update)
    assert not on_ps(without, "Optimizer.step", step) and not on_ps(without, f"({last} -> ps)", update)


# --- any job: the walk ends and tiles ------------------------------------------------------

@pytest.mark.parametrize("seed", range(200))
def test_random_jobs_tile_every_window(tmp_path, seed):
    """Random spans (overlapping, nested, zero-length), RPCs whose times break causality and
    collectives with missing ends: the walk always ends, and every window is tiled."""
    import random
    rng = random.Random(seed)
    world = rng.randint(2, 4)
    j = Ranks(world)
    steps = rng.random() < 0.5
    for r in range(world):
        for _ in range(rng.randint(0, 25)):
            a = rng.randint(0, 5000)
            j.op(r, rng.choice(["a", "b", "c", "ProfilerStep#0" if steps else "d"]), a, a + rng.randint(0, 800),
                 tid=rng.choice([1, 2, 7]))
        if steps:
            j.op(r, f"ProfilerStep#{r % 2 + 1}", 0, rng.randint(100, 6000), cat="user_annotation")
    for _ in range(rng.randint(0, 12)):
        caller, callee = rng.sample(range(world), 2)
        t = sorted(rng.randint(0, 6000) for _ in range(4))
        if rng.random() < 0.3:  # the callee's clock off: its side moves against the caller's
            shift = rng.randint(-3000, 3000)
            t[1], t[2] = max(t[1] + shift, 0), max(t[2] + shift, 0)
        j.rpc(caller, callee, rng.choice(["f", "g"]), *t, caller_tid=rng.choice([1, 2]), callee_tid=rng.choice([7, 8]),
              kind=rng.choice(["rpc_sync", "rpc_async"]))
    for seq in range(rng.randint(0, 3)):
        arrive = [rng.randint(0, 5000) for _ in range(world)]
        j.collective(seq, arrive, [max(arrive) + rng.randint(0, 300) for _ in range(world)])
    job = j.job(tmp_path)
    found = critical_path(job)
    assert found or not any(j.events.values())
    for w in found:
        assert_tiles(w)
        assert {s.kind for s in w.segments} <= set(KINDS) | {IDLE}
        assert all(s.kind != IDLE for s in w.segments[1:])   # idle only where a window starts
        assert sum(w.by_kind.values()) == w.end_ns - w.start_ns
    wait_states(job)
    stragglers(job)


def test_callee_idle_is_the_wait_for_a_late_request(tmp_path):
    """Rank 1's thread finished call a at 450 µs; call c was sent at 600 and delivered in the
    pair's fastest 50 µs: the callee waited 200 µs for it (a late sender)."""
    j = Ranks(2)
    a = j.rpc(0, 1, "a", 0, 50, 450, 500)
    c = j.rpc(0, 1, "c", 600, 650, 900, 950)
    waits = wait_states(j.job(tmp_path))
    rows = {w.name: w for w in waits.rpc}
    assert rows[c].callee_idle_ns == 200 * US and rows[a].callee_idle_ns == 0
    assert rows[c].queueing_ns == 0 and waits.by_rank[1]["callee_idle_ns"] == 200 * US


@pytest.mark.parametrize("builtin", [False, True])
def test_waits_of_a_builtin_are_those_of_the_same_call_wrapped(tmp_path, builtin):
    """The same two calls as above, builtins sent as themselves (issue 45): the callee
    recorded only the ops that served them, which the job pairs; those ops are the calls'
    callee spans, so queueing (call a delivered in 90 µs, the pair's fastest 50) and the
    callee's wait for the late call c (200 µs) are the wrapped calls' own."""
    j = Ranks(2)
    call = j.builtin if builtin else j.rpc
    a = call(0, 1, "aten::add", 0, 90, 450, 500, kind="rpc_sync")
    c = call(0, 1, "aten::mul", 600, 650, 900, 950, kind="rpc_sync")
    waits = wait_states(j.job(tmp_path))
    rows = {w.name: w for w in waits.rpc}
    assert (rows[a].calls, rows[c].calls) == (1, 1)
    assert rows[a].queueing_ns == 40 * US and rows[c].queueing_ns == 0
    assert rows[c].callee_idle_ns == 200 * US and rows[a].callee_idle_ns == 0
    assert waits.by_rank[1]["callee_idle_ns"] == 200 * US and waits.by_rank[0]["queueing_ns"] == 40 * US
