"""The critical path and ``whatif`` against planted ground truth.

A constructed job pins down the two new edges (an idle pool thread is woken by an RPC's
completion; an async_execution span ends when the RPC it issued completes), then one real
3-worker torch RPC job with delays planted at known places (``tests/planted_job.py``:
plain UDF, nested RPC from an ``async_execution`` function with ``.then()``, concurrent
``rpc_async``, an RRef method, a gloo all_reduce behind a served call, local work) is run
once and checked: each planted delay lies on the path in a segment of its rank and name,
no idle time of a pool thread is counted as work, and ``whatif`` predicts the steps in
which one delay was halved.
"""

import json
import os
import statistics

import pytest
from support.jobs import run_job
from support.ranks import BASE, US, Ranks

from tests.test_analysis import assert_tiles, path_of
from tracemerge.analysis.critical_path import (
    COMPUTE,
    EDGES,
    EXECUTION,
    IDLE,
    KINDS,
    TRANSFER,
    UNTRACED,
    critical_path,
    pool_threads,
    walk,
)
from tracemerge.analysis.whatif import Speedup, whatif

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "planted_job.py")
JOB_TIMEOUT_S = 240
CALM = 3   # of the job's REPEATS (4) pairs per place, those compared


# --- constructed: an async_execution span whose nested call's callback ran on a pool thread --

pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def async_with_callback(tmp_path):
    j = Ranks(3)
    outer = j.rpc(0, 1, "outer", 0, 50, 1000, 1050, callee_tid=7)
    j.events[1][-1]["args"]["async"] = True           # the span ended on another thread
    inner = j.rpc(1, 2, "inner", 60, 100, 700, 750, caller_tid=7, callee_tid=9, kind="rpc_async")
    j.op(2, "leaf", 110, 690, tid=9)
    j.op(1, "early", 0, 20, tid=8)                    # the pool thread's earlier work, then 780 µs idle
    j.op(1, "then_cb", 800, 990, tid=8)               # the .then() callback, on the thread that got the reply
    return j.job(tmp_path), outer, inner


def test_async_span_ends_with_its_nested_call_and_the_callback(tmp_path):
    job, outer, inner = async_with_callback(tmp_path)
    [w] = critical_path(job)
    assert path_of(w) == [
        (0, outer, TRANSFER, 0, 50),
        (1, outer + "#remote", EXECUTION, 50, 60),
        (1, inner, TRANSFER, 60, 100),
        (2, inner + "#remote", EXECUTION, 100, 110),
        (2, "leaf", EXECUTION, 110, 690),
        (2, inner + "#remote", EXECUTION, 690, 700),
        (2, inner, TRANSFER, 700, 750),
        (1, inner, TRANSFER, 750, 800),               # the reply's dispatch to the callback
        (1, "then_cb", COMPUTE, 800, 990),
        (1, outer + "#remote", EXECUTION, 990, 1000),
        (1, outer, TRANSFER, 1000, 1050),
    ]
    assert_tiles(w)


def test_a_nested_builtin_in_an_async_function_is_on_the_path(tmp_path):
    """The same, the nested call a builtin sent as itself (issue 45): its op on rank 2 is
    its callee execution, and the path neither stalls at it nor books a wait as work."""
    j = Ranks(3)
    outer = j.rpc(0, 1, "outer", 0, 50, 1000, 1050, callee_tid=7)
    j.events[1][-1]["args"]["async"] = True
    inner = j.builtin(1, 2, "aten::add", 60, 100, 700, 750, caller_tid=7, callee_tid=9)
    j.op(1, "early", 0, 20, tid=8)
    j.op(1, "then_cb", 800, 990, tid=8)
    [w] = critical_path(j.job(tmp_path))
    assert path_of(w) == [
        (0, outer, TRANSFER, 0, 50),
        (1, outer + "#remote", EXECUTION, 50, 60),
        (1, inner, TRANSFER, 60, 100),
        (2, "aten::add", EXECUTION, 100, 700),
        (2, inner, TRANSFER, 700, 750),
        (1, inner, TRANSFER, 750, 800),
        (1, "then_cb", COMPUTE, 800, 990),
        (1, outer + "#remote", EXECUTION, 990, 1000),
        (1, outer, TRANSFER, 1000, 1050),
    ]
    assert_tiles(w)


def test_idle_pool_thread_is_never_untraced_work(tmp_path):
    """Without the RPC edges the woken thread's cause is unknown: the walk still does not
    count its 780 µs of idleness as work of its own."""
    job, _, _ = async_with_callback(tmp_path)
    assert (1, 1) in pool_threads(job) or any(k[0] == 1 for k in pool_threads(job))
    [w] = critical_path(job, EDGES - {"rpc"})
    idle_gap = [s for s in w.segments if s.rank == 1 and s.tid == 8 and s.start_ns < BASE + 800 * US
                and s.end_ns > BASE + 20 * US and s.kind in (COMPUTE, EXECUTION)]
    assert idle_gap == []


def test_without_continuations_the_async_span_is_its_own_cause(tmp_path):
    job, outer, _ = async_with_callback(tmp_path)
    [w] = critical_path(job, EDGES - {"continuation"})
    assert not [s for s in w.segments if s.name == "then_cb"]


# --- constructed: whatif on a chain whose answer is known ------------------------------------

@pytest.mark.parametrize("speedup, predicted_us, top", [
    ("slow_op@1=2", 980, (2, "leaf")),         # 240 µs of slow_op become 120
    ("leaf@2=inf", 820, (1, "slow_op")),        # the nested call's work gone
    ("leaf@1=inf", 1100, (2, "leaf")),          # no span of that name on rank 1: nothing changes
    ("prep=0", 1000, (2, "leaf")),              # the first 100 µs gone, on every rank
    ("slow_op=1", 1100, (2, "leaf")),
])
def test_whatif_on_a_known_chain(tmp_path, speedup, predicted_us, top):
    from tests.test_analysis import chain
    job, _, _ = chain(tmp_path)
    [p] = whatif(job, [Speedup.parse(speedup)])
    assert (p.window, p.measured_ns, p.predicted_ns) == ("trace", 1100 * US, predicted_us * US)
    largest = max(p.top, key=lambda s: s["ns"])
    assert (largest["rank"], largest["name"]) == top


# --- the real job ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    pytest.importorskip("torch")
    from tracemerge.analysis.job_timeline import job_timeline
    from tracemerge.job import Session
    from tracemerge.runtime.engine import LocalEngine

    out = tmp_path_factory.mktemp("planted")
    run_job([JOB, out], JOB_TIMEOUT_S)
    meta = json.loads((out / "planted.json").read_text())
    session = Session.open([str(out / f"rank{r}.json.gz") for r in range(3)])
    job = job_timeline(session, session.align(), LocalEngine(1))
    return meta, job, critical_path(job), [str(out / f"rank{r}.json.gz") for r in range(3)]


@pytest.fixture(scope="module")
def predictions(planted):
    """{None: whatif without change, place: whatif with that place's delay halved}."""
    meta, job, _, _ = planted
    out = {None: whatif(job, [])}
    for place, (rank, _) in meta["places"].items():
        out[place] = whatif(job, [Speedup(f"planted:{place}", rank, 2.0)])
    return out


def spans_named(job, rank, wanted, lo, hi):
    """[(name, start, end)] of rank's spans whose name ``wanted`` takes, starting within [lo, hi)."""
    tl = job.ranks[rank]
    named = ((tl.names[tl.span_name[i]], job.span_start[rank][i], job.span_end[rank][i])
             for i in range(len(tl.span_name)))
    return [(name, start, end) for name, start, end in named if wanted(name) and lo <= start < hi]


def planted_spans(job, rank, place, lo, hi):
    """[(start, end)] of rank's spans named planted:<place> starting within [lo, hi)."""
    return [(start, end) for _, start, end in spans_named(job, rank, f"planted:{place}".__eq__, lo, hi)]


def on_path(window, rank, name, start, end):
    return sum(max(0, min(s.end_ns, end) - max(s.start_ns, start)) for s in window.segments
               if s.rank == rank and s.name == name)


CONCURRENT_CALLS = 5   # planted_job.py: the planted call and CONCURRENT_MS's four shorter ones
# two of the concurrent calls that ended closer than this on their callee: either may be the
# reply the caller waited for last (the replies' transit differs by more than the gap)
RACE_MARGIN_NS = 2_000_000


def last_concurrent(job, rank, lo, hi):
    """(name, start, end) of the concurrent call (a span named planted:conc...) of rank
    within [lo, hi) that ended last, or None where another ended within RACE_MARGIN_NS of it."""
    spans = sorted((end, start, name) for name, start, end
                   in spans_named(job, rank, lambda name: name.startswith("planted:conc"), lo, hi))
    assert len(spans) == CONCURRENT_CALLS
    (end, start, name), (runner_up, _, _) = spans[-1], spans[-2]
    return None if end - runner_up < RACE_MARGIN_NS else (name, start, end)


def test_every_planted_delay_is_on_the_path(planted):
    """Each planted delay lies on the path of every step. The five concurrent calls race:
    the caller waits for the one that ends last, the planted 50 ms one (not when halved),
    unless the machine woke a shorter call's sleep later still (seen on 2 loaded cores: the
    40 ms call overslept by 35 ms and ended 0.5 ms after it). So of those, the call that
    ended last is the one on the path, in every step where it ended clearly last."""
    meta, job, windows, _ = planted
    assert len(windows) == len(meta["steps"])
    shares = {}
    decided = planted_last = 0
    for w in windows:
        assert_tiles(w)
        assert {s.kind for s in w.segments} <= set(KINDS)
        for place, (rank, _) in meta["places"].items():
            if place == "conc":
                last = last_concurrent(job, rank, w.start_ns, w.end_ns)
                if last is None:
                    continue
                name, start, end = last
                decided += 1
                planted_last += name == "planted:conc"
                shares.setdefault("the concurrent call that ended last", []).append(
                    on_path(w, rank, name, start, end) / (end - start))
                continue
            [(start, end)] = planted_spans(job, rank, place, w.start_ns, w.end_ns)
            share = on_path(w, rank, f"planted:{place}", start, end) / (end - start)
            shares.setdefault(place, []).append(share)
    for place, got in shares.items():
        assert min(got) >= 0.9, (place, got)
    # not a vacuous check: most steps had a clear last call, and mostly the planted one
    assert decided >= len(windows) // 2 and planted_last >= 1, (decided, planted_last)


def test_no_idle_time_of_a_pool_thread_is_work_on_the_path(planted):
    _, job, windows, _ = planted
    pool = pool_threads(job)
    assert pool
    for w in windows:
        for s in w.segments:
            th = next(t for t in job.rank_threads(s.rank) if t.tid == s.tid)
            if (th.rank, th.index) not in pool or s.kind not in (COMPUTE, EXECUTION):
                continue
            assert s.name != UNTRACED, (w.window, s)


def test_the_whole_trace_has_no_untraced_pool_time(planted):
    """The trace as one window (the case the issue found: a walk starting at the last span
    of all, back through rank 2's idle server thread)."""
    _, job, _, _ = planted
    pool = pool_threads(job)
    threads = [th for th in job.threads.values() if th.bounds or th.wait_end]
    last = max(threads, key=lambda th: th.last_ns)
    start = min(th.first_ns for th in threads)
    segs = walk(job, last, start, last.last_ns)
    assert segs[0].start_ns == start and segs[-1].end_ns == last.last_ns
    assert all(a.end_ns == b.start_ns for a, b in zip(segs, segs[1:]))
    by_index = {(th.rank, th.tid): th.index for th in job.threads.values()}
    untraced_pool = sum(s.end_ns - s.start_ns for s in segs
                        if (s.rank, by_index[(s.rank, s.tid)]) in pool and s.name == UNTRACED)
    assert untraced_pool == 0
    assert all(s.kind != IDLE for s in segs[1:])   # idle only where the window starts


def test_whatif_without_change_is_the_measurement(planted, predictions):
    _, _, windows, _ = planted
    got = predictions[None]
    assert [(p.window, p.measured_ns, p.predicted_ns) for p in got] == \
        [(w.window, w.end_ns - w.start_ns, w.end_ns - w.start_ns) for w in windows]


def overheads(meta, windows):
    """Per step, its time less the delays planted on its path as asked for (the other
    concurrent calls are at most 40 ms): what the machine added — hand-offs between threads
    and processes, and sleeps that woke late."""
    out = []
    for w, v in zip(windows, meta["steps"]):
        d = meta["variants"][v]
        planted = sum(ms for place, ms in d.items() if place != "conc") + max(d["conc"], 40)
        out.append((w.end_ns - w.start_ns) / 1e6 - planted)
    return out


def whatif_table(meta, predictions, windows):
    """{place: (baseline ms, predicted ms, measured ms, relative error, pairs)}. Every step in
    which one delay was halved comes right after a baseline step: the prediction halves that
    delay in the baseline step before it, so the machine's load, which drifts over seconds,
    is alike for both. Of the pairs, the CALM ones whose steps had the least overhead
    (:func:`overheads`: on 2 cores shared with other work the machine stalls the job's
    hand-offs and wakes its sleeps late, from ~30 ms a step to over 300) are kept; medians
    over those."""
    steps = meta["steps"]
    measured = [p.measured_ns for p in predictions[None]]
    over = overheads(meta, windows)
    rows = {}
    for v, place in enumerate(meta["places"], 1):
        predicted = [p.predicted_ns for p in predictions[place]]
        pairs = [(k - 1, k) for k, s in enumerate(steps) if s == v]
        assert pairs and all(steps[b] == 0 for b, _ in pairs)
        kept = sorted(pairs, key=lambda bk: max(over[bk[0]], over[bk[1]]))[:CALM]
        pred = [predicted[b] for b, _ in kept]
        real = [measured[k] for _, k in kept]
        base = [measured[b] for b, _ in kept]
        error = statistics.median((p - m) / m for p, m in zip(pred, real))
        rows[place] = tuple(statistics.median(x) / 1e6 for x in (base, pred, real)) + (error, len(kept))
    return rows


def step_noise(meta, predictions):
    """ms by which two baseline steps — the same work, a few steps apart — differ (median):
    how well this machine reproduces a step at all."""
    measured = [p.measured_ns / 1e6 for p in predictions[None]]
    base = [measured[k] for k, v in enumerate(meta["steps"]) if v == 0]
    return statistics.median(abs(a - b) for a, b in zip(base, base[1:]))


def test_whatif_predicts_each_halved_delay(planted, predictions):
    """Within 10 % (or 5 ms) of the measured step — or, where this machine could not repeat
    a step that closely, within twice what two baseline steps differ by (:func:`step_noise`;
    a prediction's error compares two steps, each as noisy)."""
    meta, _, windows, _ = planted
    rows = whatif_table(meta, predictions, windows)
    noise = step_noise(meta, predictions)
    print(f"\nbaseline steps differ by {noise:.1f} ms (median)")
    print("| place | baseline ms | predicted ms | measured ms | error | pairs |")
    for place, (base, pred, real, error, n) in rows.items():
        print(f"| {place} | {base:.1f} | {pred:.1f} | {real:.1f} | {error:+.1%} | {n} |")
    for place, (base, pred, real, error, _) in rows.items():
        assert pred < base
        assert abs(error) * real <= max(0.1 * real, 5.0, 2 * noise), (place, base, pred, real, error, noise)


def test_whatif_command(planted, tmp_path):
    from support import cli
    _, _, windows, paths = planted
    out = tmp_path / "w.json"
    r = cli.run("whatif", *paths, "--speedup", "planted:udf@1=2", "--speedup", "planted:local=inf",
            "--format", "json", "-o", out)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["speedups"] == ["planted:udf@1=2", "planted:local=inf"]
    assert [w["window"] for w in doc["windows"]] == [w.window for w in windows]
    for w in doc["windows"]:
        # 40 ms of local work gone and half of the 80 ms UDF: at least ~70 ms less
        assert w["predicted_ns"] < w["measured_ns"] - 60_000_000
        assert w["top"] and {"rank", "name", "kind", "ns"} <= set(w["top"][0])
        assert all(t["name"] != "planted:local" for t in w["top"])
    table = cli.run("whatif", *paths, "--speedup", "planted:udf@1=2")
    assert table.exit_code == 0 and "predicted ms" in table.stdout
    bad = cli.run("whatif", *paths, "--speedup", "planted:udf@1")
    assert bad.exit_code == 2 and "--speedup" in bad.stderr


@pytest.mark.parametrize("text, name, rank, factor", [
    ("aten::mm=2", "aten::mm", None, 2.0), ("planted:udf@1=2", "planted:udf", 1, 2.0),
    ("x@y=0", "x@y", None, float("inf")), ("f=inf", "f", None, float("inf")), ("a@3=0.5", "a", 3, 0.5)])
def test_speedup_parse(text, name, rank, factor):
    assert Speedup.parse(text) == Speedup(name, rank, factor)


@pytest.mark.parametrize("text", ["noequals", "=2", "a=-1", "a=fast"])
def test_speedup_parse_refuses(text):
    with pytest.raises(ValueError):
        Speedup.parse(text)
