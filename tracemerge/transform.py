"""Per-rank transform into the merged trace: aligned times, rank-owned pids, namespaced ids.

Pure: reads a RankTrace and a Placement, returns new event dicts; the trace is untouched,
so it can be transformed again (another output format, another alignment).
"""

from dataclasses import dataclass

import numpy as np

from tracemerge.clock import ClockModel
from tracemerge.model import NO_DUR, NO_TS

# Keys that join events into flows or correlate CPU ops with device work; namespaced per
# rank so no arrow ever joins two ranks by accident.
ID_KEYS = ("id", "bind_id")
ARG_ID_KEYS = ("External id", "correlation", "Correlation ID", "External ID")
EXTRA_ID_KEYS = frozenset(ID_KEYS + ("id2",))
NAMESPACE_BITS = 32
ID_LIMIT = 1 << NAMESPACE_BITS


@dataclass
class Placement:
    """Where one rank goes in the merged trace."""

    rank: int
    label: str              # process_name of every process of the rank
    pid_base: int           # output pid = pid_base + pid code (pid codes < pid_stride)
    clock: ClockModel
    out_base_ns: int        # reference-clock ns that becomes ts 0 in the output


def rank_label(rank, worker_name, hostname):
    return f"rank {rank} · {worker_name} · {hostname}"


def namespace_id(rank, value):
    """A rank-unique form of a flow/correlation id: ints stay ints below 2**53."""
    if value.__class__ is int and 0 <= value < ID_LIMIT:  # exact int: a bool is not an id
        return ((rank + 1) << NAMESPACE_BITS) | value
    return f"r{rank}:{value}"


def _namespace_extra(rank, extra):
    if extra is None or extra.keys().isdisjoint(EXTRA_ID_KEYS):
        return extra
    out = dict(extra)
    for k in ID_KEYS:
        if k in out:
            out[k] = namespace_id(rank, out[k])
    id2 = out.get("id2")
    if isinstance(id2, dict) and "global" in id2:
        out["id2"] = {**id2, "global": namespace_id(rank, id2["global"])}
    return out


def _namespace_args(rank, args):
    if not isinstance(args, dict) or args.keys().isdisjoint(ARG_ID_KEYS):
        return args
    out = dict(args)
    for k in ARG_ID_KEYS:
        if k in out:
            out[k] = namespace_id(rank, out[k])
    return out


def aligned_ns(trace, clock, out_base_ns):
    """(ts, dur) int64 ns arrays on the reference clock, ts relative to ``out_base_ns``;
    0 where an event has no ts, NO_DUR where it has no dur."""
    timed = trace.ts != NO_TS
    start = np.where(timed, clock.to_reference(np.where(timed, trace.ts, 0)), 0)
    has_dur = timed & (trace.dur != NO_DUR)
    if clock.drift_ppm or clock.corrections:  # both stretch time, so durations change too
        end = clock.to_reference(np.where(has_dur, trace.ts + trace.dur, 0))
        dur = np.where(has_dur, end - start, NO_DUR)
    else:
        dur = np.where(has_dur, trace.dur, NO_DUR)
    return np.where(timed, start - out_base_ns, 0), dur


def aligned_times(trace, clock, out_base_ns):
    """(ts µs floats or None, dur µs floats or None) lists on the reference clock."""
    timed = trace.ts != NO_TS
    has_dur = timed & (trace.dur != NO_DUR)
    start, dur = aligned_ns(trace, clock, out_base_ns)
    ts_us = (start / 1000.0).tolist()
    dur_us = (dur / 1000.0).tolist()
    if not timed.all():
        ts_us = [t if ok else None for t, ok in zip(ts_us, timed.tolist())]
    if not has_dur.all():
        dur_us = [d if ok else None for d, ok in zip(dur_us, has_dur.tolist())]
    return ts_us, dur_us


def _event(ph, cat, name, pid, tid, ts, dur, args, extra):
    e = {"ph": ph}
    if cat is not None:
        e["cat"] = cat
    if name is not None:
        e["name"] = name
    e["pid"] = pid
    e["tid"] = tid
    if ts is not None:
        e["ts"] = ts
    if dur is not None:
        e["dur"] = dur
    if args is not None:
        e["args"] = args
    if extra:
        e.update(extra)
    return e


def transform(trace, place):
    """(events, added) of one rank in the merged trace; ``added`` counts events the tool made."""
    rank = place.rank
    names = trace.names
    ts_us, dur_us = aligned_times(trace, place.clock, place.out_base_ns)
    ph = [chr(c) for c in range(256)]
    out_pids = [place.pid_base + code for code in range(len(trace.pids))]
    args = [a if a is None else _namespace_args(rank, a) for a in trace.args]
    extra = [x if x is None else _namespace_extra(rank, x) for x in trace.extra]
    args = _rewrite_process_metadata(trace, place, args)
    tids = trace.tids
    no_name = names.index(None) if None in names else -1
    # a dict literal for the common event that has every column and no extra keys (the
    # same keys in the same order as _event); a call per event would cost twice as much
    events = [
        {"ph": ph[p], "cat": names[c], "name": names[n], "pid": out_pids[pi], "tid": tids[ti], "ts": t, "dur": d,
         "args": a}
        if x is None and a is not None and d is not None and t is not None and c >= 0 and n != no_name else
        _event(ph[p], names[c] if c >= 0 else None, names[n], out_pids[pi], tids[ti], t, d, a, x)
        for p, c, n, pi, ti, t, d, a, x in zip(
            trace.ph.tolist(), trace.cat.tolist(), trace.name.tolist(), trace.pid.tolist(),
            trace.tid.tolist(), ts_us, dur_us, args, extra)
    ]
    added = _process_metadata(trace, place, out_pids)
    return events + added, len(added)


def _rewrite_process_metadata(trace, place, args):
    """Rename the rank's processes and sort them by rank, keeping the input events."""
    meta = np.flatnonzero(trace.ph == ord("M"))
    if not len(meta):
        return args
    args = list(args)
    for i in meta:
        kind = trace.names[trace.name[i]]
        a = args[i] if isinstance(args[i], dict) else {}
        if kind == "process_name":
            args[i] = {**a, "name": place.label, "original_name": a.get("name")}
        elif kind == "process_sort_index":
            # the output pid itself orders processes by rank
            args[i] = {**a, "sort_index": place.pid_base + int(trace.pid[i])}
    return args


def _process_metadata(trace, place, out_pids):
    """process_name / process_sort_index / process_labels for pids whose input lacks them."""
    present = {}
    for kind in ("process_name", "process_sort_index", "process_labels"):
        code = trace.code_of(kind)
        mask = (trace.ph == ord("M")) & (trace.name == code) if code is not None else np.zeros(len(trace), bool)
        present[kind] = set(trace.pid[mask].tolist())
    original_names = {pid: name for (pid, _), name in trace.metadata("process_name").items()}
    added = []
    for code, pid in enumerate(out_pids):
        made = {
            "process_name": {"name": place.label},
            "process_sort_index": {"sort_index": pid},
            "process_labels": {"labels": _labels(trace.pids[code], original_names.get(code))},
        }
        for kind, args in made.items():
            if code not in present[kind]:
                added.append({"ph": "M", "name": kind, "pid": pid, "tid": 0, "args": args})
    return added


def _labels(original_pid, original_name):
    label = original_pid if isinstance(original_pid, str) else f"pid {original_pid}"
    return f"{label} · {original_name}" if original_name and original_name != str(original_pid) else label
