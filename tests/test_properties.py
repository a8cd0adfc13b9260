"""Hypothesis properties over random traces: events conserved, per-thread nesting kept,
alignment monotonic per rank, and nothing but the documented errors on any input."""

import gzip
import json
import os
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.ranks import BASE, kineto

from tracemerge.clocks.clock import ClockModel
from tracemerge.errors import TraceError, TracemergeError
from tracemerge.inputs import read_trace
from tracemerge.job import Session
from tracemerge.merge.combine import combine

SETTINGS = settings(max_examples=int(os.environ.get("TRACEMERGE_FUZZ_EXAMPLES", 40)), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def nested_spans(draw, tid, start=0, end=10_000, depth=0):
    """X events on one thread that nest properly inside [start, end) (µs, integers)."""
    out, t = [], start
    for _ in range(draw(st.integers(0, 3 if depth < 3 else 0))):
        if end - t < 4:
            break
        s = draw(st.integers(t, end - 2))
        e = draw(st.integers(s + 1, end))
        out.append({"ph": "X", "cat": "cpu_op", "name": draw(st.sampled_from(["mm", "add", "step"])),
                    "pid": 7, "tid": tid, "ts": s, "dur": e - s, "args": {"External id": len(out)}})
        out += draw(nested_spans(tid, s, e, depth + 1))
        t = e
    return out


@st.composite
def rank_docs(draw):
    ranks = draw(st.integers(1, 3))
    docs = []
    for r in range(ranks):
        events = [e for tid in range(draw(st.integers(1, 3))) for e in draw(nested_spans(tid))]
        events.append({"ph": "i", "name": "mark", "pid": 7, "tid": 0, "ts": draw(st.integers(0, 10_000)), "s": "t"})
        events.append({"ph": "M", "name": "thread_name", "pid": 7, "tid": 0, "args": {"name": "main"}})
        docs.append(kineto(draw(st.permutations(events)), base=BASE + draw(st.integers(-10**9, 10**9)), rank=r,
                           world_size=ranks))
    return docs


def write_all(tmp, docs):
    paths = []
    for r, doc in enumerate(docs):
        paths.append(os.path.join(tmp, f"rank{r}.json"))
        with open(paths[-1], "w") as f:
            json.dump(doc, f)
    return paths


def containment(events):
    """{(i, j): i contains j} over X events of one thread, by index in the given order, in
    integer ns as a viewer reads the µs floats."""
    span = [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in events]
    return {(i, j) for i, a in enumerate(span) for j, b in enumerate(span) if i != j and a[0] <= b[0] and b[1] <= a[1]}


@SETTINGS
@given(rank_docs(), st.sampled_from(["none", "wall", "start"]))
def test_combine_conserves_events_and_nesting(docs, method):
    with tempfile.TemporaryDirectory() as tmp:
        session = Session.open(write_all(tmp, docs))
        out = os.path.join(tmp, "out.json")
        summary = combine(session, session.align(method), out)
        merged = json.load(open(out))
    ev = summary["events"]
    assert ev["in"] == sum(len(d["traceEvents"]) for d in docs)
    assert ev["in"] + ev["added"] == ev["out"] + ev["filtered"] + ev["dropped"]
    assert len(merged["traceEvents"]) == ev["out"]
    for r, doc in enumerate(docs):
        pids = set(summary["pids"][str(r)].values())
        mine = [e for e in merged["traceEvents"] if e["pid"] in pids]
        for tid in {e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"}:
            before = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == tid]
            after = [e for e in mine if e["ph"] == "X" and e["tid"] == tid]
            assert [(e["name"], e["dur"]) for e in before] == [(e["name"], e["dur"]) for e in after]
            assert containment(before) == containment(after)
        names = sorted(e["name"] for e in doc["traceEvents"])
        assert sorted(e["name"] for e in mine if not e["name"].startswith("process_")) == \
            sorted(n for n in names if not n.startswith("process_"))


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**12, 10**12), st.floats(-500, 500), st.integers(0, 2 * 10**18),
       st.lists(st.integers(10**18, 2 * 10**18), min_size=2, max_size=50))
def test_alignment_is_monotonic_per_rank(offset, drift, anchor, local):
    clock = ClockModel(rank=1, method="test", offset_ns=offset, drift_ppm=drift, anchor_ns=anchor)
    local = np.sort(np.array(local, dtype=np.int64))
    ref = clock.to_reference(local)
    assert (np.diff(ref) >= 0).all()
    assert all(clock.to_reference(int(a)) <= clock.to_reference(int(b)) for a, b in zip(local[:-1], local[1:]))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=20)
EVENTISH = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "i", "M", "B", "E", "", "XX"]) | JSON, "name": st.text(max_size=3) | JSON,
    "ts": st.floats(allow_nan=True, allow_infinity=True) | st.integers() | JSON, "dur": st.integers(-5, 5) | JSON,
    "pid": st.integers(0, 3) | JSON, "tid": st.integers(0, 3) | JSON, "args": JSON})


def _documented(path):
    try:
        t = read_trace(path)
    except TraceError as e:
        assert str(e).startswith(path + ": ") and "\n" not in str(e)
        return None
    return t


@SETTINGS
@given(st.one_of(JSON, st.lists(EVENTISH, max_size=6),
                 st.builds(lambda ev, extra: {**extra, "traceEvents": ev}, st.lists(EVENTISH, max_size=6),
                           st.dictionaries(st.text(max_size=4), JSON, max_size=3))),
       st.floats(0, 1), st.booleans())
def test_any_input_reads_or_fails_with_a_documented_error(doc, cut, gz):
    data = json.dumps(doc, allow_nan=True).encode()
    data = data[:int(len(data) * cut)] if cut < 0.5 else data
    if gz:
        data = gzip.compress(data)
        data = data[:max(2, int(len(data) * cut))] if cut < 0.3 else data
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rank0.json")
        with open(path, "wb") as f:
            f.write(data)
        t = _documented(path)
        if t is not None:
            try:
                session = Session.open([path])
                combine(session, session.align("wall"), os.path.join(tmp, "o.json"))
            except TracemergeError as e:
                assert "\n" not in str(e)


@SETTINGS
@given(rank_docs(), st.data())
def test_truncation_keeps_a_prefix_of_the_events(docs, data):
    text = json.dumps(docs[0], indent=data.draw(st.sampled_from([None, 1]))).encode()
    cut = data.draw(st.integers(1, len(text)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rank0.json")
        with open(path, "wb") as f:
            f.write(text[:cut])
        t = _documented(path)
    if t is not None:
        full = docs[0]["traceEvents"]
        assert [t.names[c] for c in t.name] == [e["name"] for e in full[:len(t)]]
        assert t.truncated == (cut < len(text))


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 30)), max_size=40),
       st.lists(st.tuples(st.integers(0, 4), st.integers(-5, 100), st.booleans()), max_size=40))
def test_flow_points_find_the_slice_a_one_by_one_search_finds(spans, points):
    """formats.perfetto.flows._Enclosing.rows (per thread, vectorised) against the definition: the innermost
    slice containing ts — the latest start at or before it whose end is at or after it — or
    with next_begin the first slice starting at or after ts; overlapping slices included."""
    from tracemerge.formats.perfetto.flows import _Enclosing
    rows = sorted((track, s, s + d) for track, s, d in spans)
    rows.sort(key=lambda r: (r[0], r[1], -r[2]))
    track = np.array([r[0] for r in rows], np.int64)
    start = np.array([r[1] for r in rows], np.int64)
    end = np.array([r[2] for r in rows], np.int64)
    ranges = {}
    for k, t in enumerate(track.tolist()):
        lo, _ = ranges.get(t, (k, k))
        ranges[t] = (lo, k + 1)
    slices = type("Slices", (), {"start": start, "end": end})
    thread = np.array([p[0] for p in points], np.int64)
    ts = np.array([p[1] for p in points], np.int64)
    next_begin = np.array([p[2] for p in points], bool)
    got = _Enclosing(slices, ranges).rows(thread, ts, next_begin).tolist()
    for (t, at, nb), row in zip(points, got):
        lo, hi = ranges.get(t, (0, 0))
        if nb:
            want = next((k for k in range(lo, hi) if start[k] >= at), -1)
        else:
            want = next((k for k in reversed(range(lo, hi)) if start[k] <= at <= end[k]), -1)
        assert row == want, (t, at, nb)


@st.composite
def crossing_spans(draw):
    """X events of a few threads that may overlap in any way, some of them asynchronous
    (rpc_async caller spans with or without args.async, gloo work)."""
    events = []
    for k in range(draw(st.integers(1, 25))):
        s = draw(st.integers(0, 200))
        d = draw(st.integers(0, 80))
        kind = draw(st.sampled_from(["op", "op", "caller", "caller_sync", "gloo"]))
        e = {"ph": "X", "cat": "cpu_op", "name": "mm", "pid": 7, "tid": draw(st.integers(0, 2)), "ts": s, "dur": d,
             "args": {"k": k}}
        if kind.startswith("caller"):
            e.update(cat="user_annotation", name="rpc_async#f(worker0 -> worker1)")
            e["args"].update(rpc_id=f"0:{k}", role="caller")
            if kind == "caller_sync" or draw(st.booleans()):
                e["args"]["async"] = kind == "caller"
        elif kind == "gloo":
            e.update(cat="user_annotation", name="gloo:all_reduce")
        events.append(e)
    return events


def _partly_overlapping(spans):
    """(a, b) pairs of spans of one thread that partly overlap."""
    bad = []
    spans = sorted(spans, key=lambda x: (x[0], -x[1]))
    stack = []
    for s, e, name in spans:
        while stack and s >= stack[-1][1]:
            stack.pop()
        if stack and e > stack[-1][1]:
            bad.append((stack[-1], (s, e, name)))
            continue
        stack.append((s, e, name))
    return bad


@SETTINGS
@given(crossing_spans())
def test_json_output_has_no_partly_overlapping_spans_and_loses_none(events):
    from tracemerge.algorithms.nesting import asynchronous
    from tracemerge.report.keyavg import key_averages
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_all(tmp, [kineto(events, rank=0, world_size=1)])
        session = Session.open(paths)
        out = os.path.join(tmp, "out.json")
        combine(session, session.align("none"), out)
        with open(out) as f:
            doc = json.load(f)
        lanes = {e["tid"]: e["args"]["lane_of"] for e in doc["traceEvents"]
                 if e.get("ph") == "M" and e["name"] == "thread_name" and "lane_of" in e.get("args", {})}
        by_thread, kept = {}, []
        for e in doc["traceEvents"]:
            if e.get("ph") == "X":
                by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
                kept.append((e["args"]["k"], e["ts"], e["dur"], lanes.get(e["tid"], e["tid"])))
        for spans in by_thread.values():
            assert _partly_overlapping(spans) == []
        # every span once, with its times, on its own thread or a lane of it
        assert sorted(kept) == sorted((e["args"]["k"], float(e["ts"]), float(e["dur"]), e["tid"]) for e in events)
        # an asynchronous span that another starts inside has left its thread
        trace = read_trace(paths[0])
        flags = asynchronous(trace)
        moved = {k for k, _, _, _ in kept} - {e["args"]["k"] for e in doc["traceEvents"]
                                               if e.get("ph") == "X" and not isinstance(e["tid"], str)}
        for a in events:
            # b comes after a in torch's order (start, then end descending) and starts before a ends
            inside = [b for b in events if b["tid"] == a["tid"] and b["ts"] < a["ts"] + a["dur"]
                      and (b["ts"], -b["ts"] - b["dur"]) > (a["ts"], -a["ts"] - a["dur"])]
            if flags[events.index(a)] and inside:
                assert a["args"]["k"] in moved
        # the report on the merged trace counts the moved spans where they came from
        merged = read_trace(out)
        node = np.zeros(len(merged.pids), dtype=np.int64)
        rows = {(r.key, r.count, round(r.cpu_time_total, 3), round(r.self_cpu_time_total, 3))
                for r in key_averages(merged, node)}
        rows0 = {(r.key, r.count, round(r.cpu_time_total, 3), round(r.self_cpu_time_total, 3))
                 for r in key_averages(trace, np.zeros(len(trace.pids), dtype=np.int64))}
        assert rows == rows0
        assert flags.tolist() == [e["name"].startswith("gloo:") or (e["name"].startswith("rpc_async#")
                                                                   and e["args"].get("async", True)) for e in events]
