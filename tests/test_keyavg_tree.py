"""The numpy nesting equals torch's own EventList on generated events, nested or not."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracemerge import native
from tracemerge.algorithms.nesting import parents_nested as _parents_nested
from tracemerge.algorithms.nesting import parents_stack_walk as _parents_stack_walk
from tracemerge.algorithms.nesting import walk
from tracemerge.inputs.chrome import build
from tracemerge.report.keyavg import group_rows, key_averages, op_tree

profiler_util = pytest.importorskip("torch.autograd.profiler_util")

NAMES = ["a", "b", "ProfilerStep#1", "ProfilerStep#2", "aten::is_leaf"]


def nested_events(draw, t0, t1, depth):
    """Properly nested spans inside [t0, t1], with touching and zero-length ones."""
    out = []
    t = t0
    while t < t1 and draw(st.booleans()) and len(out) < 4:
        s = draw(st.integers(t, t1))
        e = draw(st.integers(s, t1))
        out.append((s, e))
        if depth < 3 and e > s:
            out += nested_events(draw, s, e, depth + 1)
        t = e
    return out


@st.composite
def traces(draw, proper):
    if proper:
        spans = [(tid, s, e) for tid in (1, 2) for s, e in nested_events(draw, 0, 60, 0)]
    else:
        spans = draw(st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(0, 40), st.integers(0, 20))
                              .map(lambda x: (x[0], x[1], x[1] + x[2])), max_size=30))
    names = [draw(st.sampled_from(NAMES)) for _ in spans]
    return [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 7, "tid": tid, "ts": s, "dur": e - s}
            for (tid, s, e), n in zip(spans, names)]


def torch_rows(events):
    evs = profiler_util.EventList([
        profiler_util.FunctionEvent(
            id=i, name=profiler_util._rewrite_name(e["name"], with_wildcard=True), thread=e["tid"],
            start_us=e["ts"], end_us=e["ts"] + e["dur"], stack=[])
        for i, e in enumerate(events) if not profiler_util._filter_name(e["name"])])
    evs._build_tree()
    return {a.key: (a.count, a.cpu_time_total, a.self_cpu_time_total) for a in evs.key_averages()}


def ours(events):
    trace = build("gen.json", events, {}, None)
    rows = group_rows(key_averages(trace, np.zeros(len(trace.pids), dtype=np.int64)), by_rank=False)
    return {r.key: (r.count, r.cpu_time_total, r.self_cpu_time_total) for r in rows}


@settings(max_examples=300, deadline=None)
@given(traces(proper=True))
def test_nested_events_match_torch(events):
    assert ours(events) == torch_rows(events)


@settings(max_examples=300, deadline=None)
@given(traces(proper=False))
def test_overlapping_events_match_torch(events):
    assert ours(events) == torch_rows(events)


@settings(max_examples=300, deadline=None)
@given(traces(proper=True))
def test_vectorised_nesting_is_the_stack_walk(events):
    trace = build("gen.json", events, {}, None)
    tree = op_tree(trace)
    for tid in set(trace.tid[tree.index].tolist()):
        sel = trace.tid[tree.index] == tid
        s, e = tree.start[sel], tree.end[sel]
        fast = _parents_nested(s, e)
        assert fast is not None
        assert fast.tolist() == _parents_stack_walk(s, e).tolist()


def test_partial_overlap_is_detected():
    s = np.array([0, 5], dtype=np.int64)
    e = np.array([10, 15], dtype=np.int64)
    assert _parents_nested(s, e) is None
    assert _parents_stack_walk(s, e).tolist() == [-1, -1]


@st.composite
def thread_slices(draw):
    """One thread's slices in nest order (start, then end descending), many of them tied,
    touching, zero-length, nested or crossing."""
    spans = draw(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6), st.booleans()), max_size=40))
    pairs = sorted(((s, s + d * keep) for s, d, keep in spans), key=lambda p: (p[0], -p[1]))
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


@settings(max_examples=500, deadline=None)
@given(thread_slices())
def test_walk_is_the_tree_where_there_is_one_else_torchs_walk(slices):
    s, e = slices
    parents, proper = walk(s, e)
    assert proper == (_parents_nested(s, e) is not None)
    assert parents.tolist() == _parents_stack_walk(s, e).tolist()


@pytest.mark.skipif(native.active() != "native", reason="the compiled core is not active")
@settings(max_examples=1000, deadline=None)
@given(thread_slices())
def test_the_compiled_walk_is_the_reference(slices):
    s, e = slices
    parents, proper = native.walk(s, e)
    want, want_proper = walk(s, e)
    assert proper is want_proper and parents.tolist() == want.tolist()


def test_dropped_names_and_profiler_span_are_not_counted():
    events = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "x", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "aten::output_nr", "pid": 1, "tid": 1, "ts": 2, "dur": 1},
        {"ph": "i", "name": "Iteration Start", "pid": 1, "tid": 1, "ts": 0},
    ]
    assert ours(events) == {"aten::add": (1, 10.0, 10.0)}


@pytest.mark.parametrize("reader", ["core", "python"])
def test_correlations_decoded_once_are_those_each_event_has(tmp_path, reader):
    """The key averages and the GPU section read kernels' and runtime calls' correlation ids
    from one decoding (keyavg.correlations); each is what that event's own args say."""
    import json

    from msgspec import UNSET

    from tracemerge import native
    from tracemerge.inputs import read_trace
    from tracemerge.report.keyavg import correlations, device_events

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5, "dur": 3,
         "args": {"correlation": 7, "cbid": 211}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 10, "dur": 3,
         "args": {"correlation": None}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 20, "dur": 3,
         "args": {"cbid": 131}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "pid": 1, "tid": 1, "ts": 30, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 12, "dur": 20,
         "args": {"device": 0, "correlation": 7}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 33, "dur": 2,
         "args": {"correlation": "7"}},
        {"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0, "tid": 7, "ts": 40, "dur": 2, "args": {"device": 0}},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = native.read_rank(str(path))[0] if reader == "core" else read_trace(str(path))
    links = correlations(trace)
    runtime = [i for i, e in enumerate(events) if e["cat"] == "cuda_runtime"]
    device = device_events(trace).tolist()
    assert device == [5, 6, 7]
    for idx in (runtime, device, runtime + device):
        for missing in (UNSET, None):
            assert links.of(idx, missing) == list(trace.args.key_values(idx, "correlation", missing=missing))
    # by hand: explicit null, args without the key (``missing``), no args at all (UNSET)
    assert links.of(runtime, missing=None) == [7, None, None, UNSET]
    assert links.of(runtime) == [7, None, UNSET, UNSET]
