"""A .pftrace reader for tests, on Perfetto's own protos: tracks, slices, instants, counters
and flow arcs, replayed in timestamp order the way Perfetto's importer does."""

import json

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

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


def _same_track(a, b):
    """Perfetto's rule for a descriptor emitted again (TrackEventTracker's reservation
    check): the same parent, process and thread."""
    return (a.parent_uuid, a.process.pid, a.thread.pid, a.thread.tid) == (b.parent_uuid, b.process.pid, b.thread.pid,
                                                                          b.thread.tid)


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
            d = p.track_descriptor
            if d.uuid in tracks:  # re-emitted (a rank's schedule cycles): Perfetto takes it for the same track only
                assert _same_track(tracks[d.uuid], d), f"track {d.uuid} declared twice, differently"
            else:
                tracks[d.uuid] = d
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
