"""The .pftrace writer, read back with Perfetto's own protos."""

import glob
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tracemerge.merge.combine import combine, placements
from tracemerge.formats.perfetto.encoder import nest
from tracemerge.session import Session
from tracemerge.merge.ids import namespace_args
from tracemerge.merge.placement import aligned_ns
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
    active, arcs, unmatched = {}, [], []     # flows replayed as Perfetto's importer does

    def flows(item, ev):
        for f in ev.flow_ids:
            if f in active:
                arcs.append((f, active[f], item))
            active[f] = item
        for f in ev.terminating_flow_ids:
            if f in active:
                arcs.append((f, active.pop(f), item))
            else:
                unmatched.append(f)

    for ts, _, ev, interned in timed:
        assert ev.track_uuid in tracks, "event on an undeclared track"
        stack = stacks.setdefault(ev.track_uuid, [])
        if ev.type == TE.TYPE_SLICE_END:
            assert stack, f"END without BEGIN on track {ev.track_uuid}"
            s = stack.pop()
            s.update(end=ts, end_flows=list(ev.flow_ids), end_terminating=list(ev.terminating_flow_ids))
            s["args"].update({_name(a, interned["anns"]): _value(a, interned["anns"]) for a in ev.debug_annotations})
            flows(s, ev)
            continue
        if ev.type == TE.TYPE_COUNTER:
            value = ev.counter_value if ev.HasField("counter_value") else ev.double_counter_value
            counters.append({"track": ev.track_uuid, "ts": ts, "value": value})
            continue
        item = {"name": interned["names"][ev.name_iid], "track": ev.track_uuid, "ts": ts,
                "cat": [interned["cats"][c] for c in ev.category_iids],
                "args": {_name(a, interned["anns"]): _value(a, interned["anns"]) for a in ev.debug_annotations},
                "flows": list(ev.flow_ids), "terminating": list(ev.terminating_flow_ids)}
        flows(item, ev)
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
    return {"tracks": tracks, "slices": slices, "instants": instants, "counters": counters, "arcs": arcs,
            "unmatched_flow_ends": unmatched}


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
    # integers beyond 64 bits travel as their decimal text; empty lists and null as JSON text
    assert outer["args"] == {**args, "big": str(2 ** 70)}
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
    assert summary["perfetto"] == {"overlapping_slices": 2, "overlap_tracks": 2, "flow_events": 0}
    assert summary["events"]["out"] == summary["events"]["in"] == 5


def test_nest_lanes():
    assert nest([0, 1, 2, 10], [10, 5, 3, 11]) == [0, 0, 0, 0]
    assert nest([0, 5, 6, 12], [10, 15, 7, 14]) == [0, 1, 0, 0]


def test_format_option_and_name(tmp_path):
    r0 = kineto([x("a", 100.0, 5.0)], rank=0)
    out, _ = merge(tmp_path, [r0], name="out.bin", fmt="perfetto")
    assert len(read_pftrace(out)["slices"]) == 1
    out, summary = merge(tmp_path, [r0], name="out.json")
    assert summary["format"] == "json" and load_output(out)["traceEvents"]


@pytest.mark.parametrize("sample", ["kineto_rpc/worker*.json.gz", "rpc_profiling/rank*.json.gz",
                                    "parameter_server/rank*.json.gz", "threads_8/rank*.json.gz",
                                    "rl_agent/rank*.json.gz", "threads_1/rank*.json.gz"])
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
            args = namespace_args(rank, trace.args[i]) or {}
            want[trace.names[trace.name[i]], place.pid_base + int(trace.pid[i]), int(start[i]) + place.out_base_ns,
                 int(dur[i]), json.dumps(args, sort_keys=True)] += 1
    have = Counter((s["name"], thread_of(got["tracks"], s["track"])[0], s["ts"], s["end"] - s["ts"],
                    json.dumps(s["args"], sort_keys=True)) for s in got["slices"])
    assert have == want and len(want) > 10
    ev = summary["events"]
    assert ev["dropped"] == 0 and ev["out"] == ev["in"]
    check_input_flows(session, alignment, got)


def check_input_flows(session, alignment, got):
    """Every input s/f pair is an arc between the slices enclosing its two points (innermost
    X of the thread containing the ts, recomputed here from the input)."""
    want = Counter()
    for rank, place in placements(session, alignment).items():
        trace = session.trace(rank)
        start, dur = aligned_ns(trace, place.clock, place.out_base_ns)
        xs = np.flatnonzero(trace.ph == ord("X"))
        ends = {}
        for i in np.flatnonzero(np.isin(trace.ph, [ord("s"), ord("f")])).tolist():
            hits = [j for j in xs.tolist() if (trace.pid[j], trace.tid[j]) == (trace.pid[i], trace.tid[i])
                    and start[j] <= start[i] <= start[j] + dur[j]]
            j = max(hits, key=lambda j: (start[j], -dur[j]))
            key = (trace.extra[i]["id"], trace.names[trace.cat[i]])
            ends.setdefault(key, {})[chr(trace.ph[i])] = (trace.names[trace.name[j]], int(start[j]) + place.out_base_ns)
        for pair in ends.values():
            want[pair["s"], pair["f"]] += 1
    have = Counter(((a["name"], a["ts"]), (b["name"], b["ts"])) for _, a, b in got["arcs"])
    assert not want - have      # (RPC arrows are arcs too)
    assert not got["unmatched_flow_ends"]


def test_generated_kineto_trace_keeps_every_event_and_flow(tmp_path):
    gen = os.path.join(os.path.dirname(__file__), "support", "gen_kineto.py")
    subprocess.run([sys.executable, gen, str(tmp_path), "--ranks", "2", "--mb", "1", "--jobs", "1"],
                   check=True, timeout=120)
    session = Session.open(sorted(glob.glob(str(tmp_path / "*.json"))))
    alignment = session.align("wall")
    out = str(tmp_path / "t.pftrace")
    summary = combine(session, alignment, out)
    got = read_pftrace(out)      # nesting checked on every track
    ev = summary["events"]
    assert ev["dropped"] == 0 and ev["out"] == ev["in"]
    n_flow_events = sum(int(np.isin(session.trace(r).ph, [ord("s"), ord("f")]).sum()) for r in session.ranks)
    assert n_flow_events > 100 and summary["perfetto"]["flow_events"] == n_flow_events
    assert len(got["arcs"]) == n_flow_events // 2
    check_input_flows(session, alignment, got)


def _ev(ph, name, ts, pid=100, tid=1, cat="c", **kw):
    return {"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, **kw}


def test_begin_end_pairs_become_nested_slices_with_both_args(tmp_path):
    r0 = kineto([_ev("B", "outer", 100.0, args={"a": 1}), _ev("B", "inner", 110.0),
                 _ev("E", None, 120.0, args={"b": 2}), _ev("E", None, 150.0, args={"c": 3}),
                 x("x_inside", 130.0, 5.0),
                 x("crossing", 140.0, 20.0),             # crosses outer: overlap track
                 _ev("E", None, 170.0),                  # nothing open: dropped, counted
                 _ev("B", "never_ends", 180.0)], rank=0)  # dropped, counted
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)
    by_name = {s["name"]: s for s in got["slices"]}
    assert sorted(by_name) == ["crossing", "inner", "outer", "x_inside"]
    base = by_name["outer"]["ts"] - 100_000
    assert [(by_name[n]["ts"] - base, by_name[n]["end"] - base) for n in ("outer", "inner", "crossing")] == \
        [(100_000, 150_000), (110_000, 120_000), (140_000, 160_000)]
    assert by_name["inner"]["parent"] is by_name["outer"] and by_name["x_inside"]["parent"] is by_name["outer"]
    assert by_name["inner"]["args"] == {"b": 2} and by_name["outer"]["args"] == {"a": 1, "c": 3}
    assert by_name["crossing"]["track"] != by_name["outer"]["track"]
    ev = summary["events"]
    assert ev["dropped_by"] == {"B/E end without a begin": 1, "B/E begin without an end": 1}
    assert ev["in"] == ev["out"] + ev["dropped"] == 8


def test_async_events_go_to_async_tracks_per_pid_cat_id(tmp_path):
    r0 = kineto([_ev("b", "req", 100.0, id=1, args={"k": "v"}), _ev("n", "mark", 105.0, id=1),
                 _ev("e", "req", 120.0, id=1, args={"status": 200}),
                 _ev("b", "req", 110.0, id=2), _ev("e", "req", 130.0, id=2),                  # another id
                 _ev("b", "req", 101.0, id=1, cat="other"), _ev("e", "req", 102.0, id=1, cat="other"),
                 _ev("b", "req", 100.0, id2={"local": "0x5"}), _ev("e", "req", 101.0, id2={"local": "0x5"}),
                 _ev("S", "legacy", 100.0, id="a"), _ev("F", "legacy", 140.0, id="a"),
                 _ev("b", "outer", 103.0, id=1), _ev("e", "outer", 125.0, id=1),   # crosses req on id 1
                 _ev("b", "no_id", 100.0), x("work", 100.0, 10.0)], rank=0)
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)
    tracks = got["tracks"]
    async_slices = [s for s in got["slices"] if not tracks[s["track"]].HasField("thread")]
    pid = summary["pids"]["0"]["100"]
    assert all(thread_of(tracks, s["track"])[0] == pid for s in async_slices)
    by = Counter((s["name"], tuple(s["cat"])) for s in async_slices)
    assert by == {("req", ("c",)): 3, ("req", ("other",)): 1, ("legacy", ("c",)): 1, ("outer", ("c",)): 1}
    req1 = next(s for s in async_slices if s["name"] == "req" and s["args"].get("k") == "v")
    assert req1["args"] == {"k": "v", "status": 200} and req1["end"] - req1["ts"] == 20_000
    assert tracks[req1["track"]].name == "req"
    # (pid, cat, id) keys: ids 1 and 2, cat "other", the local id2 and the legacy id each get a track
    assert len({s["track"] for s in async_slices if s["name"] != "outer"}) == 5
    outer = next(s for s in async_slices if s["name"] == "outer")
    assert tracks[outer["track"]].name == "req (overlap 1)"
    (mark,) = got["instants"]
    assert mark["name"] == "mark" and mark["track"] == req1["track"]
    ev = summary["events"]
    assert ev["dropped_by"] == {"async event without an id": 1}
    assert ev["in"] == ev["out"] + ev["dropped"] == 15


def test_input_flows_join_the_slices_perfetto_binds_them_to(tmp_path):
    gpu = dict(pid=0, tid=7)
    r0 = kineto([
        x("aten::linear", 100.0, 20.0, tid=1), x("aten::t", 105.0, 2.0, tid=1),
        x("cudaLaunchKernel", 110.0, 5.0, tid=1, cat="cuda_runtime"),
        x("sgemm", 130.0, 10.0, cat="kernel", **gpu),
        x("LinearBackward0", 300.0, 30.0, tid=2), x("bwd_child", 310.0, 5.0, tid=2),
        # fwdbwd: s at the forward op's start, f (bp e) at the backward op's start
        _ev("s", "fwdbwd", 100.0, tid=1, cat="fwdbwd", id=5),
        _ev("f", "fwdbwd", 300.0, tid=2, cat="fwdbwd", id=5, bp="e"),
        # ac2g with the same id 5: told apart by (cat, name), as Perfetto does
        _ev("s", "ac2g", 111.0, tid=1, cat="ac2g", id=5),
        _ev("f", "ac2g", 130.0, cat="ac2g", id=5, bp="e", **gpu),
        # a step and an f without bp (binds to the next slice beginning on its thread)
        _ev("s", "chain", 106.0, tid=1, id=9), _ev("t", "chain", 135.0, cat="c", id=9, **gpu),
        _ev("f", "chain", 305.0, tid=2, id=9),
        # v2 on the X events themselves
        x("producer", 200.0, 5.0, tid=3), x("consumer", 250.0, 5.0, tid=4),
        # nothing to bind to: dropped and counted
        _ev("s", "lost", 1000.0, tid=1, id=11), _ev("f", "lost", 1001.0, tid=1, id=11, bp="e"),
    ], rank=1)
    r0["traceEvents"][-4].update(bind_id=77, flow_out=True)      # producer
    r0["traceEvents"][-3].update(bind_id=77, flow_in=True)       # consumer
    out, summary = merge(tmp_path, [kineto([x("r0", 100.0, 1.0)], rank=0), r0])
    got = read_pftrace(out)
    arcs = Counter((a["name"], b["name"]) for _, a, b in got["arcs"])
    assert arcs == {("aten::linear", "LinearBackward0"): 1, ("cudaLaunchKernel", "sgemm"): 1,
                    ("aten::t", "sgemm"): 1, ("sgemm", "bwd_child"): 1, ("producer", "consumer"): 1}
    ids = {(a["name"], b["name"]): f for f, a, b in got["arcs"]}
    # ids are the JSON output's namespaced ids; the second flow kind sits above bit 56
    from tracemerge.merge.ids import namespace_id
    assert {ids["aten::linear", "LinearBackward0"] & ((1 << 56) - 1), ids["cudaLaunchKernel", "sgemm"] & ((1 << 56) - 1)} \
        == {namespace_id(1, 5)}
    assert ids["aten::linear", "LinearBackward0"] != ids["cudaLaunchKernel", "sgemm"]
    assert not got["unmatched_flow_ends"]
    ev = summary["events"]
    assert ev["dropped_by"] == {"flow 's' with no slice on its thread at its time": 1,
                                "flow 'f' with no slice on its thread at its time": 1}
    assert summary["perfetto"]["flow_events"] == 7
    assert ev["in"] == ev["out"] + ev["dropped"]


def test_flow_end_on_a_slice_that_began_before_the_source_goes_on_its_end(tmp_path):
    r0 = kineto([x("long", 100.0, 100.0, tid=2), x("src", 120.0, 10.0, tid=1),
                 _ev("s", "f", 125.0, tid=1, id=1), _ev("f", "f", 150.0, tid=2, id=1, bp="e")], rank=0)
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)
    ((_, a, b),) = got["arcs"]
    assert (a["name"], b["name"]) == ("src", "long") and b["end_terminating"] == [_]
    assert summary["events"]["dropped"] == 0
