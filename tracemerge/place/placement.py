"""Per-rank transform into the merged trace: aligned times, rank-owned pids, namespaced ids.

Pure in what it reads: the output comes from a RankTrace's columns, args and extra keys and
a Placement only, and those are untouched, so a trace can be transformed again (another
output format, another alignment). The typed reader's event structs are the one thing it
writes: they become the output events, every changed value written anew each time.
"""

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from itertools import chain, repeat
from operator import is_not
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import msgspec
import numpy as np

from tracemerge.algorithms.nesting import LANE_OF
from tracemerge.clocks.clock import ClockModel
from tracemerge.model import FLOW_ID_KEYS, NO_DUR, NO_TS, Args, RankTrace
from tracemerge.place.ids import CHUNK, namespace_extra, namespaced_args, namespaced_ids


@dataclass
class Placement:
    """Where one rank goes in the merged trace."""

    rank: int
    label: str              # process_name of every process of the rank
    pid_base: int           # output pid = pid_base + pid code (pid codes < pid_stride)
    clock: ClockModel
    out_base_ns: int        # reference-clock ns that becomes ts 0 in the output
    # a rank of several cycle files: the pid table of the whole rank, whose codes every
    # cycle's events are written with (tracemerge.inputs.cycles.recoded); () for one file
    pids: Tuple[Any, ...] = ()


def rank_label(rank: int, worker_name: str, hostname: str) -> str:
    return f"rank {rank} · {worker_name} · {hostname}"


def aligned_ns(trace: RankTrace, clock: ClockModel, out_base_ns: int) -> Tuple[np.ndarray, np.ndarray]:
    """(ts, dur) int64 ns arrays on the reference clock, ts relative to ``out_base_ns``;
    0 where an event has no ts, NO_DUR where it has no dur."""
    return aligned_times(trace.ts, trace.dur, clock, out_base_ns)


def aligned_times(ts: np.ndarray, dur: np.ndarray, clock: ClockModel, out_base_ns: int) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`aligned_ns` of a trace's ``ts`` and ``dur`` columns (NO_TS, NO_DUR where absent)."""
    timed = ts != NO_TS
    start = np.where(timed, clock.to_reference(np.where(timed, ts, 0)), 0)
    has_dur = timed & (dur != NO_DUR)
    if clock.drift_ppm or clock.corrections:  # both stretch time, so durations change too
        end = clock.to_reference(np.where(has_dur, ts + dur, 0))
        out_dur = np.where(has_dur, end - start, NO_DUR)
    else:
        out_dur = np.where(has_dur, dur, NO_DUR)
    return np.where(timed, start - out_base_ns, 0), out_dur


def _us(ns: np.ndarray, present: np.ndarray) -> List[Optional[float]]:
    """µs floats of ``ns`` as a list, None where not ``present``."""
    out = (ns / 1000.0).tolist()
    if not present.all():
        out = [v if ok else None for v, ok in zip(out, present.tolist())]
    return out


class Event(msgspec.Struct, omit_defaults=True, gc=False):
    """An output event without extra keys; None (absent) fields are left out. The keys come
    in Kineto's order; ``args`` may be a dict or raw JSON bytes written verbatim."""

    ph: str
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Any = None


# an output event: the typed reader's struct (inputs.chrome._Event), an Event, or a dict
OutputEvent = Union[msgspec.Struct, Dict[str, Any]]
# (sorted event indices, their lane tids) of the spans moved to lanes
Moved = Tuple[Sequence[int], Sequence[str]]


def _event(ph: str, cat: Optional[str], name: Optional[str], pid: Any, tid: Any, ts: Optional[float],
           dur: Optional[float], args: Any, extra: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    e: Dict[str, Any] = {"ph": ph}
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


PH = np.array([chr(c) for c in range(256)], dtype=object)


def transform(trace: RankTrace, place: Placement) -> Tuple[List[OutputEvent], int]:
    """(events, added) of one rank in the merged trace; ``added`` counts events the tool made.

    Events are the typed reader's structs patched in place (:func:`_patched_chunks`), or
    for the generic reader :class:`Event` structs built from the columns with C-level maps
    (dicts for events with extra keys); raw args pass through undecoded.
    """
    chunks, added = transform_chunks(trace, place)
    return list(chain.from_iterable(chunks)) + added, len(added)


def transform_chunks(trace: RankTrace, place: Placement, times: Optional[Tuple[np.ndarray, np.ndarray]] = None,
                     release: Optional[str] = None, lanes: Optional[Dict[int, int]] = None,
                     ) -> Tuple[Iterator[List[OutputEvent]], List[Dict[str, Any]]]:
    """(chunks, added): the events of :func:`transform` as a lazy iterator of lists of up
    to CHUNK input events, and the process metadata events the tool adds after them.

    ``lanes`` ({event index: lane k}, :func:`tracemerge.algorithms.nesting.lanes`) moves those spans
    to the thread :func:`lane_tid` of their process, named by a ``thread_name`` event the
    tool adds (its args' ``lane_of`` is the thread they left).

    A consumer that encodes each chunk and drops it never holds more than one chunk's
    events (nor their rewritten args) next to the trace. Such a consumer may ``release``
    what the trace's own structs hold once the next chunk is asked for: "args", their
    rewritten args (the trace stays whole: its Args column is where a later transform
    takes them from again), or "events", the structs themselves (the trace is used up: the
    engine's workers read a rank to write it once). ``times`` is the :func:`aligned_ns` of
    the trace when the caller has it already.
    """
    times = times if times is not None else aligned_ns(trace, place.clock, place.out_base_ns)
    moved = _lane_tids(trace, lanes)
    chunks = _patched_chunks(trace, place, *times, release, moved) if trace.events is not None else \
        _built_chunks(trace, place, *times, moved)
    added = _process_metadata(trace, place, [place.pid_base + code for code in range(len(trace.pids))])
    return chunks, added + _lane_metadata(trace, place, lanes)


def lane_tid(tid: Any, lane: int) -> str:
    """The output tid of a thread's lane: a string, so it never takes a real thread's tid."""
    return f"{tid} (overlap {lane})"


def _lane_tids(trace: RankTrace, lanes: Optional[Dict[int, int]]) -> Tuple[List[int], List[str]]:
    """(sorted event indices, their lane tids) of the spans moved to lanes."""
    if not lanes:
        return [], []
    at = sorted(lanes)
    return at, [lane_tid(trace.tids[trace.tid[i]], lanes[i]) for i in at]


def _lane_metadata(trace: RankTrace, place: Placement, lanes: Optional[Dict[int, int]]) -> List[Dict[str, Any]]:
    """A thread_name event per lane: the thread's name (or tid) and the lane, and the tid
    of the thread it belongs to (``lane_of``), by which a report puts its spans back."""
    if not lanes:
        return []
    names = trace.metadata("thread_name")
    made: Dict[Tuple[int, int, int], Dict[str, Any]] = {}
    for i, lane in sorted(lanes.items()):
        key = (int(trace.pid[i]), int(trace.tid[i]), lane)
        if key not in made:
            tid = trace.tids[key[1]]
            made[key] = {"ph": "M", "name": "thread_name", "pid": place.pid_base + key[0], "tid": lane_tid(tid, lane),
                         "args": {"name": f"{names.get(key[:2], tid)} (overlap {lane})", LANE_OF: tid}}
    return [made[k] for k in sorted(made, key=lambda k: (k[0], k[1], k[2]))]


def _patched_chunks(trace: RankTrace, place: Placement, start: np.ndarray, dur: np.ndarray, release: Optional[str],
                    moved: Moved = ((), ())) -> Iterator[List[OutputEvent]]:
    """The trace's event structs as output events, chunk by chunk: each value the output
    changes is written into them with one C-level setattr pass per key over the events it
    changes (pid, ts, dur, namespaced ids and args, renamed processes), so no event is
    built. Every value written comes from the trace's columns (the flow ids from those
    :class:`Extra` read before any rewrite), so a second transform of the same trace (or
    of a selection sharing its structs) writes the same. The one value not written anew is
    the tid of a span moved to a lane (``moved``): it is written when the span moves, and
    the same spans move again on any transform, since which spans cannot nest follows from
    the rank's own times (a clock model maps all of them alike)."""
    rank, events = place.rank, trace.events
    assert events is not None  # only for the typed reader's traces (transform_chunks)
    timed = trace.ts != NO_TS
    has_dur = timed & (trace.dur != NO_DUR)
    if not all(v is None or v.__class__ is str for v in trace.names):  # a non-string interned with an equal one
        table = np.array(trace.names + [None], dtype=object)
        _set(events, "name", table[trace.name].tolist())
        _set(events, "cat", table[trace.cat].tolist())
    ids: List[Tuple[str, Sequence[int], Sequence[Any]]] = [(k, *namespaced_ids(rank, k, column)) for k in FLOW_ID_KEYS
           if (column := trace.extra.read(k)) is not None]
    meta = np.flatnonzero(trace.ph == ord("M"))
    with_dur = trace.dur != NO_DUR  # an absent dur is None in its struct already
    chunk: Optional[List[Any]]
    for lo in range(0, len(trace), CHUNK):
        hi = lo + CHUNK
        chunk = events[lo:hi]
        args = namespaced_args(rank, Args(trace.args.items[lo:hi], trace.args.raw))
        _rewrite_process_metadata(trace, place, args, meta[np.searchsorted(meta, lo):np.searchsorted(meta, hi)], lo)
        at_args = np.flatnonzero(np.fromiter(map(is_not, args, repeat(None)), bool, len(args))).tolist()
        _set(chunk, "args", map(args.__getitem__, at_args), at_args)
        _set(chunk, "pid", (trace.pid[lo:hi] + place.pid_base).tolist())
        _set(chunk, "ts", _us(start[lo:hi], timed[lo:hi]))  # None where the struct has none already
        at_dur = np.flatnonzero(with_dur[lo:hi])
        _set(chunk, "dur", _us(dur[lo:hi][at_dur], has_dur[lo:hi][at_dur]), at_dur.tolist())  # untimed: none
        for key, at, values in ids + [("tid", *moved)]:
            a, b = bisect_left(at, lo), bisect_left(at, hi)
            _set(events, key, values[a:b], at[a:b])
        yield chunk
        if release == "events":  # the rank's biggest part, freed while the rest is encoded
            chunk = None
            events[lo:hi] = repeat(None, hi - lo)
        elif release == "args":
            _set(chunk, "args", repeat(None), at_args)


def _set(events: List[Any], key: str, values: Iterable[Any], at: Optional[Sequence[int]] = None) -> None:
    """``events[i].key = values[n]`` for the n-th i of ``at`` (default: every event)."""
    targets = events if at is None else map(events.__getitem__, at)
    deque(map(setattr, targets, repeat(key), values), maxlen=0)  # consumed in C


def _built_chunks(trace: RankTrace, place: Placement, start: np.ndarray, dur: np.ndarray,
                  moved: Moved = ((), ())) -> Iterator[List[OutputEvent]]:
    """Output events built from the columns, chunk by chunk (the generic reader's traces)."""
    rank = place.rank
    timed = trace.ts != NO_TS
    has_dur = timed & (trace.dur != NO_DUR)
    table = np.array(trace.names + [None], dtype=object)  # code -1 (no cat) is the None at the end
    tids = _objects(trace.tids)
    meta = np.flatnonzero(trace.ph == ord("M"))
    extra = trace.extra.items or []  # [] for a typed read without its extra keys
    for lo in range(0, len(trace), CHUNK):
        hi = lo + CHUNK
        args = namespaced_args(rank, Args(trace.args.items[lo:hi], trace.args.raw))
        _rewrite_process_metadata(trace, place, args, meta[np.searchsorted(meta, lo):np.searchsorted(meta, hi)], lo)
        columns = (PH[trace.ph[lo:hi]].tolist(), table[trace.cat[lo:hi]].tolist(),
                   table[trace.name[lo:hi]].tolist(), (trace.pid[lo:hi] + place.pid_base).tolist(),
                   tids[trace.tid[lo:hi]].tolist(), _us(start[lo:hi], timed[lo:hi]),
                   _us(dur[lo:hi], has_dur[lo:hi]), args)
        a, b = bisect_left(moved[0], lo), bisect_left(moved[0], hi)
        for i, tid in zip(moved[0][a:b], moved[1][a:b]):
            columns[4][i - lo] = tid
        chunk: List[OutputEvent] = list(map(Event, *columns))
        for i, x in enumerate(extra[lo:hi]):
            if x is not None:
                chunk[i] = _event(*(c[i] for c in columns), namespace_extra(rank, x))  # type: ignore[arg-type, call-arg]
        del columns, args
        yield chunk


def _objects(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values  # element by element: a tuple/list value stays one object
    return out


# One id key token of a flat args object and, when its value is a plain non-negative
# integer, the value's digits. A match preceded by a backslash is inside a string.
def _rewrite_process_metadata(trace: RankTrace, place: Placement, args: List[Any], meta: Iterable[int],
                              lo: int) -> None:
    """Rename the rank's processes and sort them by rank, keeping the input events: rewrites,
    in place, the metadata events ``meta`` (trace indices) in ``args``, the args of the events
    from ``lo``."""
    for i in meta:
        kind = trace.names[trace.name[i]]
        if kind not in ("process_name", "process_sort_index"):
            continue
        a = args[i - lo]
        a = msgspec.json.decode(a) if a.__class__ is msgspec.Raw else a
        a = a if isinstance(a, dict) else {}
        if kind == "process_name":
            args[i - lo] = {**a, "name": place.label, "original_name": a.get("name")}
        elif kind == "process_sort_index":
            # the output pid itself orders processes by rank
            args[i - lo] = {**a, "sort_index": place.pid_base + int(trace.pid[i])}


def _process_metadata(trace: RankTrace, place: Placement, out_pids: List[int]) -> List[Dict[str, Any]]:
    """process_name / process_sort_index / process_labels for pids whose input lacks them."""
    present: Dict[str, set] = {}
    for kind in ("process_name", "process_sort_index", "process_labels"):
        code = trace.code_of(kind)
        mask = (trace.ph == ord("M")) & (trace.name == code) if code is not None else np.zeros(len(trace), bool)
        present[kind] = set(trace.pid[mask].tolist())
    original_names = {pid: name for (pid, _), name in trace.metadata("process_name").items()}
    added: List[Dict[str, Any]] = []
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


def _labels(original_pid: Any, original_name: Optional[str]) -> str:
    label = original_pid if isinstance(original_pid, str) else f"pid {original_pid}"
    return f"{label} · {original_name}" if original_name and original_name != str(original_pid) else label
