"""The compiled .pftrace writer (``tracemerge.native._proto``) against the Python encoder,
the reference (``TRACEMERGE_CORE=python``): the same bytes for the samples, generated
ranks, the test corpus and hypothesis traces (overlapping spans, begin/end and async
pairs, instants, counters, v1 and v2 flows); its loops against the Python ones they
replace; its inputs checked."""

import glob
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.pftrace import read_pftrace
from support.ranks import write

from tracemerge import native
from tracemerge.errors import TraceError
from tracemerge.formats.perfetto.slices import SLICE_BEGIN, nest, slice_order
from tracemerge.job import Session
from tracemerge.merge.combine import combine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
built = pytest.mark.skipif(native._proto is None or native._core is None, reason="the compiled writer is not built")
SAMPLE_DIRS = sorted(d for d in glob.glob(os.path.join(ROOT, "samples", "*")) if glob.glob(os.path.join(d, "*.json*")))
CORPUS = sorted(p for p in glob.glob(os.path.join(ROOT, "tests", "corpus", "*.json*")))


def _pftrace(paths, out, core, monkeypatch, align="auto"):
    """(bytes, summary) of combining ``paths`` to ``out`` with ``core``, or the error's text."""
    monkeypatch.setenv(native.ENV, core)
    assert (native.proto() is not None) == (core == "native")
    try:
        session = Session.open([str(p) for p in paths])
        summary = combine(session, session.align(align), str(out), force=True)
    except TraceError as e:
        return f"error: {e}", None
    with open(out, "rb") as f:
        return f.read(), summary


def _same_both_ways(paths, tmp, monkeypatch, align="auto"):
    native = _pftrace(paths, os.path.join(tmp, "n.pftrace"), "native", monkeypatch, align)
    python = _pftrace(paths, os.path.join(tmp, "p.pftrace"), "python", monkeypatch, align)
    assert native[0] == python[0]
    assert native[1] == python[1]     # the counts too: what was dropped and why, flows, lanes
    return native


@built
@pytest.mark.parametrize("directory", SAMPLE_DIRS, ids=os.path.basename)
def test_samples_are_the_same_bytes(tmp_path, monkeypatch, directory):
    data, summary = _same_both_ways(sorted(glob.glob(os.path.join(directory, "*.json*"))), tmp_path, monkeypatch)
    got = read_pftrace(str(tmp_path / "n.pftrace"))
    ev = summary["events"]   # added: the callee spans drawn for builtins paired with their ops
    assert got["slices"] and ev["in"] + ev["added"] == ev["out"] + ev["dropped"]


@built
@pytest.mark.parametrize("path", CORPUS, ids=os.path.basename)
def test_corpus_is_the_same_bytes_or_the_same_error(tmp_path, monkeypatch, path):
    _same_both_ways([path], tmp_path, monkeypatch, align="none")


@built
def test_generated_ranks_are_the_same_bytes(tmp_path, monkeypatch):
    from support import gen_kineto
    for kw in ({"rank_files": True, "seed": 3}, {"seed": 8, "overlapping_kernels": True}):
        paths = gen_kineto.generate(str(tmp_path / str(kw["seed"])), 2, 0.5, jobs=1, **kw)
        data, summary = _same_both_ways(paths, tmp_path, monkeypatch)
        got = read_pftrace(str(tmp_path / "n.pftrace"))
        assert got["arcs"] and summary["perfetto"]["flow_events"] > 0     # ac2g / fwdbwd flows were bound
        if "overlapping_kernels" in kw:
            assert summary["perfetto"]["overlapping_slices"] > 0         # and lanes were made


# ---- hypothesis traces ------------------------------------------------------------------

PHASES = ["X", "X", "X", "B", "E", "b", "e", "n", "i", "C", "s", "t", "f", "f", "M"]


@st.composite
def rank_docs(draw):
    """A Kineto-like document whose events crowd a few threads: overlapping and crossing
    spans, begin/end and async pairs (some unpaired), instants, counters, v1 flow points
    with shared ids, v2 bind_ids."""
    events = []
    for _ in range(draw(st.integers(1, 40))):
        ph = draw(st.sampled_from(PHASES))
        e = {"ph": ph, "name": draw(st.sampled_from(["a", "b", "c", "ac2g", "fwdbwd"])),
             "cat": draw(st.sampled_from(["cpu_op", "kernel", "ac2g"])), "pid": draw(st.sampled_from([1, 2])),
             "tid": draw(st.sampled_from([1, 2, "stream 7"])), "ts": draw(st.integers(0, 60))}
        if ph == "X":
            e["dur"] = draw(st.integers(0, 30))
        if ph in "bensStf":
            e["id"] = draw(st.integers(0, 3))
        if ph == "f" and draw(st.booleans()):
            e["bp"] = "e"
        if ph in "in" and draw(st.booleans()):
            e["s"] = draw(st.sampled_from(["t", "p", "g"]))
        if ph in "XBbn" and draw(st.integers(0, 3)) == 0:
            e["bind_id"] = draw(st.integers(0, 2))
            e.update({k: True for k in draw(st.lists(st.sampled_from(["flow_in", "flow_out"]), max_size=2, unique=True))})
        if ph == "C":
            e["args"] = {"bytes": draw(st.integers(-5, 10**6)), "rate": draw(st.floats(-1e3, 1e3))}
        elif ph == "M":
            e.update(name="thread_name", args={"name": draw(st.sampled_from(["main", "worker"]))})
        elif draw(st.booleans()):
            e["args"] = {"External id": draw(st.integers(0, 9)), "Input Dims": [[1, 2]],
                         "k": draw(st.sampled_from([0, 1.5, "x", True, None]))}
        events.append(e)
    return {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}


@built
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(rank_docs(), min_size=1, max_size=2))
def test_hypothesis_traces_are_the_same_bytes(docs):
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        paths = [write(os.path.join(tmp, f"rank{r}.json"), doc) for r, doc in enumerate(docs)]
        data, summary = _same_both_ways(paths, tmp, monkeypatch, align="none")
        if summary is None:
            return
        got = read_pftrace(os.path.join(tmp, "n.pftrace"))      # nesting asserted on every track
        spans = sum(e["ph"] == "X" for d in docs for e in d["traceEvents"])
        assert len(got["slices"]) >= spans
        ev = summary["events"]
        assert ev["in"] == ev["out"] + ev["dropped"]


# ---- the loops themselves ---------------------------------------------------------------

SPANS = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=60)


@built
@settings(max_examples=300, deadline=None)
@given(spans=SPANS)
def test_nest_and_slice_order_are_the_python_ones(spans):
    spans = sorted(((s, s + d) for s, d in spans), key=lambda t: (t[0], -t[1]))
    start, end = np.array([s for s, _ in spans], np.int64), np.array([e for _, e in spans], np.int64)
    lanes = np.frombuffer(native._proto.nest(start, end), np.int64).tolist()
    assert lanes == nest(start.tolist(), end.tolist())
    for lane in set(lanes):
        sel = [k for k, v in enumerate(lanes) if v == lane]
        ts, kind, n = (np.frombuffer(r, np.int64).tolist() for r in native._proto.slice_order(start[sel], end[sel]))
        assert list(zip(ts, kind, n)) == slice_order(start[sel].tolist(), end[sel].tolist())
        assert kind.count(SLICE_BEGIN) == len(sel)


def _columns(n, **changed):
    cols = {c: np.zeros(n, np.int64) for c in ("ts", "kind", "uuid", "name", "cat", "args_slot", "tail_slot",
                                               "flow_lo", "flow_hi")}
    cols.update(args_slot=np.full(n, -1, np.int64), tail_slot=np.full(n, -1, np.int64))
    cols.update(changed)
    return cols


def _packets(cols, flow_id=np.zeros(0, np.int64), flow_slot=np.zeros(0, np.int64), args=(), tails=()):
    return native._proto.packets(*cols.values(), flow_id, flow_slot, list(args), list(tails), b"\x68\x02")


@built
def test_packets_are_the_protobuf_perfetto_reads():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    cols = _columns(2, ts=np.array([5, 300], np.int64), kind=np.array([1, 2], np.int64),
                    uuid=np.array([-1, 7], np.int64), name=np.array([200, -1], np.int64),
                    cat=np.array([0, -1], np.int64), flow_lo=np.array([0, 2], np.int64),
                    flow_hi=np.array([2, 2], np.int64))
    data = _packets(cols, np.array([-2, 9], np.int64), np.array([0, 1], np.int64))
    trace = pb.Trace.FromString(data)
    a, b = trace.packet
    assert (a.timestamp, a.sequence_flags, b.timestamp) == (5, 2, 300)
    assert a.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN and b.track_event.type == pb.TrackEvent.TYPE_SLICE_END
    assert a.track_event.track_uuid == (1 << 64) - 1 and b.track_event.track_uuid == 7   # uuids are uint64
    assert (a.track_event.name_iid, list(a.track_event.category_iids)) == (201, [1])
    assert list(a.track_event.flow_ids) == [(1 << 64) - 2] and list(a.track_event.terminating_flow_ids) == [9]
    assert not b.track_event.HasField("name_iid") and not b.track_event.flow_ids


@built
@pytest.mark.parametrize("bad, error", [
    ({"ts": np.array([-1], np.int64)}, ValueError), ({"name": np.array([-2], np.int64)}, ValueError),
    ({"flow_hi": np.array([1], np.int64)}, ValueError), ({"flow_lo": np.array([-1], np.int64)}, ValueError),
    ({"args_slot": np.array([0], np.int64)}, IndexError), ({"tail_slot": np.array([-2], np.int64)}, IndexError),
    ({"uuid": np.zeros(2, np.int64)}, ValueError), ({"cat": np.zeros(1, np.int32)}, TypeError),
    ({"kind": np.zeros((1, 1), np.int64)}, TypeError),
])
def test_packets_check_their_inputs(bad, error):
    with pytest.raises(error):
        _packets(_columns(1, **bad))


@built
def test_packets_take_only_bytes_and_check_flow_columns():
    with pytest.raises(TypeError):
        _packets(_columns(1, args_slot=np.zeros(1, np.int64)), args=["text"])
    with pytest.raises(ValueError):
        _packets(_columns(1), np.zeros(2, np.int64), np.zeros(1, np.int64))


@built
def test_chains_bind_as_perfetto_reads_and_check_lengths():
    # one id: a start, a step on a slice beginning after it, a step on a slice that began
    # before but ends after (its end), an end on a slice over before the last point (dropped)
    fid = np.array([4, 4, 4, 4, 6], np.int64)
    role = np.array([0, 1, 1, 2, 2], np.int64)
    v1 = np.ones(5, np.int64)
    begin = np.array([10, 20, 15, 5, 1], np.int64)
    end = np.array([12, 30, 40, 8, 2], np.int64)
    slot, drop = (np.frombuffer(r, np.int64).tolist() for r in native._proto.chains(fid, role, v1, begin, end,
                                                                                     np.ones(5, np.int64)))
    assert slot == [0, 0, 2, -1, -1]
    assert drop == [0, 0, 0, 4, 3]      # ends before the flow's last point; an end without a start
    with pytest.raises(ValueError):
        native._proto.chains(fid, role[:4], v1, begin, end, v1)
    for loop in (native._proto.nest, native._proto.slice_order):
        with pytest.raises(ValueError):
            loop(begin, end[:3])
        with pytest.raises(TypeError):
            loop(begin.astype(np.float64), end)


@built
def test_instants_by_the_thousand_keep_their_tracks_and_order(tmp_path, monkeypatch):
    # Kineto's memory profile: "[memory]" instants on many threads and both scopes, the
    # tracks first used in a mixed order (the descriptors come out in that order), threads
    # asked for again and again before others whose tids are near theirs (the Python
    # encoder's _Tracks takes a tid at every request: instants stay its loop)
    events = [{"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 5000}]
    for k in range(3000):
        e = {"ph": "i", "name": "[memory]", "pid": 1 + k % 3, "tid": k % 7, "ts": k, "args": {"Bytes": k * 8}}
        if k % 5 == 0:
            e["s"] = "p" if k % 10 else "g"
        events.append(e)
    path = write(tmp_path / "rank0.json", {"schemaVersion": 1, "traceEvents": events})
    data, summary = _same_both_ways([path], tmp_path, monkeypatch, align="none")
    got = read_pftrace(str(tmp_path / "n.pftrace"))
    assert len(got["instants"]) == 3000 and summary["events"]["out"] == 3001
    on_process = [i for i in got["instants"] if not got["tracks"][i["track"]].HasField("thread")]
    assert len(on_process) == 600
    assert [i["args"]["Bytes"] for i in got["instants"]] == [k * 8 for k in range(3000)]


# ---- flows the Python reader keeps (string ids, id2, odd bp): the compiled writer too ----

ODD_IDS = st.one_of(st.integers(0, 3), st.sampled_from(["a", "0x1", ""]), st.none(), st.just(2 ** 60))


@st.composite
def odd_flow_docs(draw):
    events = [{"ph": "X", "name": draw(st.sampled_from(["p", "q"])), "pid": 1, "tid": draw(st.integers(1, 2)),
               "ts": draw(st.integers(0, 40)), "dur": draw(st.integers(0, 30))} for _ in range(draw(st.integers(1, 8)))]
    for _ in range(draw(st.integers(0, 14))):
        e = {"ph": draw(st.sampled_from("stf")), "name": draw(st.sampled_from(["ac2g", "fwdbwd"])), "pid": 1,
             "tid": draw(st.integers(1, 2)), "ts": draw(st.integers(0, 60)), "cat": draw(st.sampled_from(["a", "b"]))}
        if draw(st.integers(0, 3)):
            e["id"] = draw(ODD_IDS)
        else:
            e["id2"] = draw(st.sampled_from([{"global": 1}, {"local": "x"}, {}, 5]))
        if draw(st.booleans()):
            e["bp"] = draw(st.sampled_from(["e", "s", 1, None, ["e"]]))
        events.append(e)
    for e in events[:3]:
        if draw(st.booleans()):
            e["bind_id"] = draw(ODD_IDS)
            e.update({k: True for k in draw(st.lists(st.sampled_from(["flow_in", "flow_out"]), max_size=2, unique=True))})
    return {"traceEvents": events}


@built
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=odd_flow_docs())
def test_flows_of_any_id_bind_the_same_in_both_encoders(doc):
    from fuzz.differential import same_pftrace
    from tracemerge.inputs.chrome import read_trace
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv(native.ENV, raising=False)
        trace = read_trace(write(os.path.join(tmp, "rank0.json"), doc))   # the Python reader: ids as they are
        # the compiled writer's packets and counts against encode_rank(reference=True)'s, three placements
        assert same_pftrace(trace, trace) is None
