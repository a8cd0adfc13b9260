"""The .pftrace writer, read back with Perfetto's own protos."""

import glob
import json
import os
from collections import Counter

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tracemerge.combine import combine, placements
from tracemerge.perfetto import nest
from tracemerge.session import Session
from tracemerge.transform import _namespace_args, aligned_ns
from tracefiles import kineto, load_output, write, x

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "samples")
TE = pb.TrackEvent


def _value(ann, names):
    kind = ann.WhichOneof("value")
    if ann.dict_entries:
        return {_name(e, names): _value(e, names) for e in ann.dict_entries}
    if ann.array_values:
        return [_value(v, names) for v in ann.array_values]
    if kind == "legacy_json_value":
        return json.loads(ann.legacy_json_value)
    return getattr(ann, kind)


def _name(ann, names):
    return names[ann.name_iid] if ann.HasField("name_iid") else ann.name


def read_pftrace(path):
    """Tracks, slices, instants and counters of a .pftrace, replayed in timestamp order the
    way Perfetto does; asserts that BEGIN/END nest properly on every track."""
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    tracks, seqs, timed = {}, {}, []
    for n, p in enumerate(trace.packet):
        interned = seqs.setdefault(p.trusted_packet_sequence_id, {"names": {}, "cats": {}, "anns": {}})
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            interned.update(names={}, cats={}, anns={})
        for e in p.interned_data.event_names:
            interned["names"][e.iid] = e.name
        for e in p.interned_data.event_categories:
            interned["cats"][e.iid] = e.name
        for e in p.interned_data.debug_annotation_names:
            interned["anns"][e.iid] = e.name
        if p.HasField("track_descriptor"):
            assert p.track_descriptor.uuid not in tracks
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("track_event"):
            assert p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            timed.append((p.timestamp, n, p.track_event, dict(interned)))
    timed.sort(key=lambda t: (t[0], t[1]))
    stacks, slices, instants, counters = {}, [], [], []
    for ts, _, ev, interned in timed:
        assert ev.track_uuid in tracks, "event on an undeclared track"
        stack = stacks.setdefault(ev.track_uuid, [])
        if ev.type == TE.TYPE_SLICE_END:
            assert stack, f"END without BEGIN on track {ev.track_uuid}"
            s = stack.pop()
            s.update(end=ts, end_flows=list(ev.flow_ids), end_terminating=list(ev.terminating_flow_ids))
            continue
        if ev.type == TE.TYPE_COUNTER:
            value = ev.counter_value if ev.HasField("counter_value") else ev.double_counter_value
            counters.append({"track": ev.track_uuid, "ts": ts, "value": value})
            continue
        item = {"name": interned["names"][ev.name_iid], "track": ev.track_uuid, "ts": ts,
                "cat": [interned["cats"][c] for c in ev.category_iids],
                "args": {_name(a, interned["anns"]): _value(a, interned["anns"]) for a in ev.debug_annotations},
                "flows": list(ev.flow_ids), "terminating": list(ev.terminating_flow_ids)}
        if ev.type == TE.TYPE_SLICE_BEGIN:
            if stack:
                item["parent"] = stack[-1]
            stack.append(item)
            slices.append(item)
        else:
            assert ev.type == TE.TYPE_INSTANT
            instants.append(item)
    assert all(not s for s in stacks.values()), "slices left open"
    for s in slices:   # a child lies within its parent
        if "parent" in s:
            assert s["parent"]["ts"] <= s["ts"] and s["end"] <= s["parent"]["end"]
    return {"tracks": tracks, "slices": slices, "instants": instants, "counters": counters}


def thread_of(tracks, uuid):
    """(pid, tid, thread name) of a thread track, or (pid, None, track name) of another track."""
    t = tracks[uuid]
    if t.HasField("thread"):
        return t.thread.pid, t.thread.tid, t.thread.thread_name
    return tracks[t.parent_uuid].process.pid, None, t.name


def merge(tmp_path, docs, name="out.pftrace", **kw):
    paths = [write(tmp_path / f"rank{r}.json", d) for r, d in enumerate(docs)]
    session = Session.open(paths)
    out = str(tmp_path / name)
    summary = combine(session, session.align("wall"), out, force=True, **kw)
    return out, summary


def test_every_slice_instant_and_counter_is_there_with_name_track_and_args(tmp_path):
    args = {"Input Dims": [[2, 3], []], "Input type": ["float", ""], "flag": True, "ratio": 0.5,
            "nested": {"a": 1, "b": "two"}, "big": 2 ** 70, "none": None}
    r0 = kineto([
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "thread 1 (python)"}},
        x("outer", 100.0, 50.0, pid=7, tid=1, **args),
        x("inner", 110.0, 10.0, pid=7, tid=1, cat="user_annotation"),
        x("sibling", 150.0, 5.0, pid=7, tid=1),          # starts where outer ends
        x("zero", 120.0, 0.0, pid=7, tid=1),             # zero-length, right after inner ends
        x("profiler", 90.0, 100.0, pid="Spans", tid="PyTorch Profiler", cat="Trace"),
        {"ph": "i", "name": "mark", "pid": 7, "tid": 1, "ts": 130.0, "s": "t", "args": {"k": 1}},
        {"ph": "C", "name": "mem", "pid": 7, "tid": 1, "ts": 140.0, "args": {"bytes": 4096, "frac": 0.25}},
    ], rank=0)
    r1 = kineto([x("other", 100.0, 1.0, pid=7, tid=1)], rank=1)
    out, summary = merge(tmp_path, [r0, r1])
    got = read_pftrace(out)
    pids = summary["pids"]

    slices = {(s["name"], thread_of(got["tracks"], s["track"])[0]): s for s in got["slices"]}
    assert len(got["slices"]) == 6
    outer = slices["outer", pids["0"]["7"]]
    # orjson reads integers beyond 64 bits as floats; empty lists and null travel as JSON text
    assert outer["args"] == {**args, "big": float(2 ** 70)}
    assert outer["cat"] == ["cpu_op"]
    assert outer["end"] - outer["ts"] == 50_000
    assert slices["inner", pids["0"]["7"]]["parent"] is outer
    assert slices["inner", pids["0"]["7"]]["cat"] == ["user_annotation"]
    assert "parent" not in slices["sibling", pids["0"]["7"]]
    assert slices["other", pids["1"]["7"]]["ts"] - outer["ts"] == 0    # same wall time on both ranks
    assert thread_of(got["tracks"], outer["track"]) == (pids["0"]["7"], 1, "thread 1 (python)")
    # a string tid gets a 32-bit tid of its own and keeps its name, as in Perfetto's JSON import
    pid, tid, name = thread_of(got["tracks"], slices["profiler", pids["0"]["Spans"]]["track"])
    assert name == "PyTorch Profiler" and 0 < tid < 2 ** 31
    processes = {t.process.pid: t.process.process_name for t in got["tracks"].values() if t.HasField("process")}
    assert processes[pids["0"]["7"]].startswith("rank 0 · rank0 · ")
    assert all(0 < p < 2 ** 31 for p in processes)

    (mark,) = got["instants"]
    assert (mark["name"], mark["args"], mark["track"]) == ("mark", {"k": 1}, outer["track"])
    counters = {got["tracks"][c["track"]].name: c["value"] for c in got["counters"]}
    assert counters == {"mem bytes": 4096, "mem frac": 0.25}
    assert all(got["tracks"][c["track"]].HasField("counter") for c in got["counters"])
    ev = summary["events"]
    assert ev["in"] == ev["out"] == 9 and ev["dropped"] == 0 and summary["format"] == "perfetto"


def test_overlapping_spans_go_to_an_overlap_track_and_are_counted(tmp_path):
    r0 = kineto([x("a", 100.0, 50.0), x("b", 120.0, 50.0), x("c", 125.0, 10.0), x("d", 130.0, 50.0),
                 x("e", 200.0, 5.0)], rank=0)
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)       # asserts nesting on every track
    by_name = {s["name"]: s for s in got["slices"]}
    assert sorted(by_name) == ["a", "b", "c", "d", "e"]
    main = by_name["a"]["track"]
    assert by_name["e"]["track"] == main and by_name["b"]["track"] != main
    assert by_name["c"]["parent"] is by_name["a"]    # the thread track is tried first
    assert by_name["d"]["track"] not in (main, by_name["b"]["track"])
    assert got["tracks"][by_name["b"]["track"]].name == "thread 1 (overlap 1)"
    assert summary["perfetto"] == {"overlapping_slices": 2, "overlap_tracks": 2}
    assert summary["events"]["out"] == summary["events"]["in"] == 5


def test_nest_lanes():
    assert nest([0, 1, 2, 10], [10, 5, 3, 11]) == [0, 0, 0, 0]
    assert nest([0, 5, 6, 12], [10, 15, 7, 14]) == [0, 1, 0, 0]


def test_unsupported_phases_are_counted_as_dropped(tmp_path):
    r0 = kineto([x("a", 100.0, 5.0),
                 {"ph": "b", "cat": "c", "name": "async", "id": 1, "pid": 100, "tid": 1, "ts": 100.0},
                 {"ph": "e", "cat": "c", "name": "async", "id": 1, "pid": 100, "tid": 1, "ts": 104.0}], rank=0)
    out, summary = merge(tmp_path, [r0])
    assert len(read_pftrace(out)["slices"]) == 1
    ev = summary["events"]
    assert ev["dropped"] == 2 and ev["in"] == ev["out"] + ev["dropped"]
    assert ev["dropped_by"] == {"phase 'b' has no TrackEvent form": 1, "phase 'e' has no TrackEvent form": 1}


def test_format_option_and_name(tmp_path):
    r0 = kineto([x("a", 100.0, 5.0)], rank=0)
    out, _ = merge(tmp_path, [r0], name="out.bin", fmt="perfetto")
    assert len(read_pftrace(out)["slices"]) == 1
    out, summary = merge(tmp_path, [r0], name="out.json")
    assert summary["format"] == "json" and load_output(out)["traceEvents"]


@pytest.mark.parametrize("sample", ["kineto_rpc/worker*.json.gz", "rpc_profiling/rank*.json.gz",
                                    "parameter_server/rank*.json.gz", "threads_8/rank*.json.gz"])
def test_real_traces_keep_every_slice_with_its_time_process_and_args(tmp_path, sample):
    paths = sorted(glob.glob(os.path.join(SAMPLES, sample)))
    if not paths:
        pytest.skip(f"no {sample} samples")
    session = Session.open(paths)
    alignment = session.align("wall")
    out = str(tmp_path / "t.pftrace")
    summary = combine(session, alignment, out)
    got = read_pftrace(out)
    want = Counter()
    for rank, place in placements(session, alignment).items():
        trace = session.trace(rank)
        start, dur = aligned_ns(trace, place.clock, place.out_base_ns)
        for i in np.flatnonzero(trace.ph == ord("X")).tolist():
            args = _namespace_args(rank, trace.args[i]) or {}
            want[trace.names[trace.name[i]], place.pid_base + int(trace.pid[i]), int(start[i]) + place.out_base_ns,
                 int(dur[i]), json.dumps(args, sort_keys=True)] += 1
    have = Counter((s["name"], thread_of(got["tracks"], s["track"])[0], s["ts"], s["end"] - s["ts"],
                    json.dumps(s["args"], sort_keys=True)) for s in got["slices"])
    assert have == want and len(want) > 10
    ev = summary["events"]
    # only v1 flow events (autograd fwdbwd) have no TrackEvent form yet, and they are counted
    assert set(ev["dropped_by"]) <= {"phase 's' has no TrackEvent form", "phase 'f' has no TrackEvent form"}
    assert ev["out"] + ev["dropped"] == ev["in"]
