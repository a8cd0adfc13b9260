"""The input's own flows (Kineto ``fwdbwd``, ``ac2g``, v2 ``bind_id``) bound to slices for
the protobuf output; the JSON output passes them through as they are.

A flow map is {event index: :class:`~tracemerge.place.arrows.SliceFlows`}: the ids a
slice's begin and end packets carry.
"""

import hashlib
import operator
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Callable, Dict, Hashable, List, Mapping, Optional, Protocol, Tuple

import numpy as np
from msgspec import UNSET

from tracemerge.model import RankTrace
from tracemerge.place.arrows import NO_FLOWS, SliceFlows
from tracemerge.place.ids import namespace_id, namespace_ids


class Slices(Protocol):
    """What binding flows reads of the encoder's slices (:class:`~tracemerge.formats.perfetto.encoder.Slices`,
    which imports this module: a protocol here, not an import back)."""

    start: np.ndarray
    end: np.ndarray
    begin: np.ndarray

# {thread track: (first row, end row)} of the sorted slices (encoder.Slices.ranges)
Ranges = Mapping[int, Tuple[int, int]]
# (flow key, id, event index, role, slice row or None) of one flow point
Point = Tuple[Hashable, Any, int, str, Optional[int]]

OUT, STEP, IN = "out", "step", "in"
V1_ROLES = {ord("s"): OUT, ord("t"): STEP, ord("f"): IN}
KIND_SHIFT = 56       # flow kinds beyond the first are told apart above the namespaced id




def merge_flows(a: Mapping[int, SliceFlows], b: Mapping[int, SliceFlows]) -> Dict[int, SliceFlows]:
    """{event index: SliceFlows} of two flow maps together."""
    out = dict(a)
    for i, ids in b.items():
        out[i] = out[i] + ids if i in out else ids
    return out


def bind_input_flows(trace: RankTrace, rank: int, start: np.ndarray, slices: "Slices",
                     ranges: Ranges) -> Tuple[Dict[int, SliceFlows], Dict[str, int]]:
    """Bind the rank's input flows to its slices, for protobuf output.

    v1 events (``s``/``t``/``f``, keyed like Perfetto by (id, cat, name)) bind to the
    innermost slice of their thread containing their ts (an ``f`` without ``bp: "e"`` to the
    next slice beginning at or after it); v2 ``bind_id`` + ``flow_out``/``flow_in`` on an
    ``X``/``B``/``b`` binds to that event's slice (on an ``n``/``i``, to the instant).
    ``slices`` is :class:`~tracemerge.formats.perfetto.encoder.Slices`, ``ranges`` its rows per track.

    Perfetto reads packets in time order, so each point after a flow's first is put on its
    slice's begin when that begins after the previous point, else on its end.
    Returns ({event index: SliceFlows}, {"converted": v1 events bound, reason: v1 events
    dropped}).
    """
    drops: Dict[str, int] = {}
    points = _points(trace, start, slices, ranges, drops)
    kinds = {k: n for n, k in enumerate(sorted({p[0] for p in points}, key=str))}
    s_begin, s_start, s_end = slices.begin.tolist(), slices.start.tolist(), slices.end.tolist()
    at_ns = start[[p[2] for p in points]].tolist()
    fids = proto_flow_ids(rank, [kinds[p[0]] for p in points], [p[1] for p in points])
    by_id: Dict[int, List[Tuple[int, int, str, Tuple[int, int, Optional[int]], bool]]] = {}
    for (key, value, i, role, row), ts, fid in zip(points, at_ns, fids):
        anchor = (s_begin[row], s_start[row], s_end[row]) if row is not None else (i, ts, None)
        by_id.setdefault(fid, []).append((ts, i, role, anchor, key != "v2"))
    bound: Dict[int, SliceFlows] = {}
    converted = 0
    for fid, chain in by_id.items():
        chain.sort()        # by (ts, event index), which are unique
        last = None         # when Perfetto sees the previous point of the chain; None: not in flight
        for _, i, role, (event, begin_ns, end_ns), v1 in chain:
            at, at_end, why = _point_at(role, last, begin_ns, end_ns)
            if at is None:
                if v1:  # a v2 point rides on an event that is kept
                    _drop(drops, why)
                continue
            bound[event] = bound.get(event, NO_FLOWS).add(fid, at_end, terminating=role == IN)
            last = None if role == IN else at
            converted += v1
    return bound, {"converted": converted, **drops}


def _point_at(role: str, last: Optional[int], begin_ns: int, end_ns: Optional[int]) -> Tuple[Optional[int], bool, str]:
    """(the ns a point of a chain goes at, whether on its slice's end, ""), or (None, False,
    why it is dropped); ``last``: when Perfetto sees the chain's previous point, None when
    no flow of its id is in flight."""
    if role == OUT:
        if last is not None:
            return None, False, "flow start while the same id is in flight"
        return begin_ns, False, ""
    if last is None:
        return None, False, f"flow {'step' if role == STEP else 'end'} without a start"
    if begin_ns > last:
        return begin_ns, False, ""
    if end_ns is not None and end_ns > last:
        return end_ns, True, ""
    return None, False, "flow point on a slice that ends before its flow starts"


# chains()' drop codes (tracemerge/native/_proto.c), as the reference above words them
CHAIN_DROPS = {1: "flow start while the same id is in flight", 2: "flow step without a start",
               3: "flow end without a start", 4: "flow point on a slice that ends before its flow starts"}
ROLE_CODES = {OUT: 0, STEP: 1, IN: 2}


@dataclass
class FlowRows:
    """Flow ids bound to slices as columns, in the order they were bound: the flow ids of
    event ``event[k]``'s SliceFlows field ``slot[k]`` (0 begin, 1 begin terminating, 2 end,
    3 end terminating) are ``fid[k]`` (uint64) in row order."""

    event: np.ndarray
    slot: np.ndarray
    fid: np.ndarray

    @classmethod
    def of(cls, flows: Mapping[int, SliceFlows]) -> "FlowRows":
        """The rows of a flow map {event index: SliceFlows} (the RPC arrows: few)."""
        rows = [(i, slot, fid) for i, f in flows.items() for slot, ids in enumerate(f) for fid in ids]
        event, slot, fid = zip(*rows) if rows else ((), (), ())
        return cls(np.array(event, np.int64), np.array(slot, np.int64), np.array(fid, np.uint64))

    def __add__(self, other: "FlowRows") -> "FlowRows":   # as merge_flows: per field, this map's ids before the other's
        return FlowRows(*(np.concatenate((a, b)) for a, b in zip(
            (self.event, self.slot, self.fid), (other.event, other.slot, other.fid))))


def bind_input_flow_rows(trace: RankTrace, rank: int, start: np.ndarray, slices: "Slices", ranges: Ranges,
                         chains: Callable[..., Tuple[bytes, bytes]]) -> Tuple[FlowRows, Dict[str, int]]:
    """:func:`bind_input_flows` as :class:`FlowRows`, the chains walked by the compiled
    ``chains`` (``tracemerge.native._proto``); the same bindings in the same order, the same
    counts."""
    drops: Dict[str, int] = {}
    kind, values, i, role, v1, row = _point_columns(trace, start, slices, ranges, drops)
    n = len(i)
    fid = np.array(proto_flow_ids(rank, kind.tolist(), values), np.uint64)
    ts = start[i].astype(np.int64)
    has = row >= 0
    at = np.maximum(row, 0)
    if len(slices.begin):
        event = np.where(has, slices.begin[at], i)
        begin_ns, end_ns = np.where(has, slices.start[at], ts), np.where(has, slices.end[at], 0)
    else:
        event, begin_ns, end_ns = i, ts, np.zeros(n, np.int64)
    # chains in the order their ids first appear, each in (ts, event index) order
    _, first, inverse = np.unique(fid, return_index=True, return_inverse=True)
    order = np.lexsort((i, ts, first[inverse.reshape(-1)]))
    cols = (fid.view(np.int64), role, v1, begin_ns, end_ns, has.astype(np.int64))
    slot, drop = (np.frombuffer(r, np.int64) for r in chains(*(np.ascontiguousarray(c[order], np.int64)
                                                                for c in cols)))
    codes, firsts, counts = np.unique(drop[drop > 0], return_index=True, return_counts=True)
    for k in np.argsort(firsts, kind="stable").tolist():   # reasons in the order first met
        drops[CHAIN_DROPS[int(codes[k])]] = drops.get(CHAIN_DROPS[int(codes[k])], 0) + int(counts[k])
    kept = slot >= 0
    converted = int((kept & (v1[order] == 1)).sum())
    return FlowRows(event[order][kept], slot[kept].copy(), fid[order][kept]), {"converted": converted, **drops}


def _drop(drops: Dict[str, int], reason: str) -> None:
    drops[reason] = drops.get(reason, 0) + 1


def _point_columns(trace: RankTrace, start: np.ndarray, slices: "Slices", ranges: Ranges, drops: Dict[str, int],
                   ) -> Tuple[np.ndarray, List[Any], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_points` as columns, the v1 points (nearly all) found with numpy: (flow kind
    index, ids, event index, role code, v1 flag, slice row or -1), the same points in the
    same order with the same drops; kinds numbered as :func:`bind_input_flows` numbers them
    (flow keys sorted by their str)."""
    ph, extra = trace.ph, trace.extra
    v1 = np.flatnonzero(np.isin(ph, list(V1_ROLES)))
    n = len(v1)
    codes = ph[v1]
    role = np.where(codes == ord("s"), 0, np.where(codes == ord("t"), 1, 2)).astype(np.int64)
    values = list(map(event_id, extra.column("id", v1), extra.column("id2", v1)))
    # bp == "e" by operator.eq: a str compared with any JSON value, never NotImplemented
    at_e = np.fromiter(map(operator.eq, extra.column("bp", v1), repeat("e")), np.bool_, n)
    next_begin = (role == ROLE_CODES[IN]) & ~at_e
    rows = _Enclosing(slices, ranges).rows(trace.thread_keys(v1), start[v1], next_begin)
    has_id = np.fromiter(map(operator.is_not, values, repeat(None)), bool, n)
    # the drops, reasons in the order the reference meets them (event order)
    why = np.where(~has_id, 0, np.where(rows < 0, codes.astype(np.int64), -1))
    reasons, firsts, counts = np.unique(why[why >= 0], return_index=True, return_counts=True)
    for k in np.argsort(firsts, kind="stable").tolist():
        code = int(reasons[k])
        reason = "flow event without an id" if code == 0 else f"flow '{chr(code)}' with no slice on its thread at its time"
        drops[reason] = drops.get(reason, 0) + int(counts[k])
    kept = np.flatnonzero(has_id & (rows >= 0))
    # the (cat, name) keys as one int each (cat -1 is no category; names are codes >= 0)
    width = len(trace.names) + 1
    pairs = (trace.cat[v1[kept]].astype(np.int64) + 1) * width + trace.name[v1[kept]]
    unique_pairs, pair_of = np.unique(pairs, return_inverse=True)
    keys = [(c // width - 1, c % width) for c in unique_pairs.tolist()]

    v2 = _points_v2(trace, slices)
    kinds = {k: m for m, k in enumerate(sorted(set(keys) | ({"v2"} if v2 else set()), key=str))}
    kind = np.concatenate((np.array([kinds[k] for k in keys], np.int64)[pair_of.reshape(-1)] if keys else
                           np.zeros(0, np.int64), np.full(len(v2), kinds.get("v2", 0), np.int64)))
    values = [values[k] for k in kept.tolist()] + [p[1] for p in v2]
    i = np.concatenate((v1[kept], np.array([p[2] for p in v2], np.int64))).astype(np.int64)
    role = np.concatenate((role[kept], np.array([ROLE_CODES[p[3]] for p in v2], np.int64)))
    is_v1 = np.concatenate((np.ones(len(kept), np.int64), np.zeros(len(v2), np.int64)))
    row = np.concatenate((rows[kept], np.array([-1 if p[4] is None else p[4] for p in v2], np.int64)))
    return kind, values, i, role, is_v1, row.astype(np.int64)


def _points(trace: RankTrace, start: np.ndarray, slices: "Slices", ranges: Ranges,
            drops: Dict[str, int]) -> List[Point]:
    """The input's flow points bound to slice rows: [(flow key, id, event index, role, slice
    row or None)]; points that bind nowhere are counted in ``drops``."""
    ph, extra = trace.ph, trace.extra

    def drop(reason: str) -> None:
        _drop(drops, reason)

    # v1: the slices of all points found at once, per thread
    v1 = np.flatnonzero(np.isin(ph, list(V1_ROLES)))
    roles = list(map(V1_ROLES.__getitem__, ph[v1].tolist()))
    values = list(map(event_id, extra.column("id", v1), extra.column("id2", v1)))
    next_begin = np.array([role == IN and bp != "e" for role, bp in zip(roles, extra.column("bp", v1))], np.bool_)
    thread = trace.thread_keys(v1)
    rows = _Enclosing(slices, ranges).rows(thread, start[v1], next_begin).tolist()
    points: List[Point] = []        # (flow key, id, event index, role, slice row or None)
    for i, key, value, role, row in zip(v1.tolist(), zip(trace.cat[v1].tolist(), trace.name[v1].tolist()),
                                        values, roles, rows):
        if value is None:
            drop("flow event without an id")
        elif row < 0:
            drop(f"flow '{chr(ph[i])}' with no slice on its thread at its time")
        else:
            points.append((key, value, i, role, row))

    return points + _points_v2(trace, slices)


def _points_v2(trace: RankTrace, slices: "Slices") -> List[Point]:
    """The v2 points of :func:`_points`: a bind_id on the event itself."""
    ph, extra = trace.ph, trace.extra
    points: List[Point] = []
    hosts = np.flatnonzero(np.isin(ph, [ord(c) for c in "XBbniIR"]))
    bind = [(i, b) for i, b in zip(hosts.tolist(), extra.column("bind_id", hosts)) if b is not UNSET]
    at = [i for i, _ in bind]
    row_of = dict(zip(slices.begin.tolist(), range(len(slices.begin)))) if bind else {}
    for (i, bind_id), out, inn in zip(bind, extra.column("flow_out", at), extra.column("flow_in", at)):
        out, inn = bool(out), bool(inn)  # UNSET (absent) is false
        if not (out or inn):
            continue    # Perfetto ignores a bind_id without a direction too
        row = row_of.get(i)
        if row is None and ph[i] in (ord("X"), ord("B"), ord("b")):
            continue    # its slice was not written (unpaired begin): counted there
        points.append(("v2", bind_id, i, STEP if out and inn else OUT if out else IN, row))
    return points


def event_id(id_: Any, id2: Any) -> Any:
    """The id a flow or async event is keyed by, from its ``id`` and ``id2`` keys (UNSET
    where absent): ``id``, else ``id2.global``, else ``id2.local``; None when it has none."""
    if id_ is not None and id_ is not UNSET:
        return id_
    return id2.get("global", id2.get("local")) if isinstance(id2, dict) else None


def proto_flow_id(rank: int, kind: int, value: Any) -> int:
    """The uint64 flow id of an input flow: ``merge.ids.namespace_id`` (as in the JSON output),
    plus ``kind << 56`` for the rank's second and later flow kinds ((cat, name) of v1 events,
    or v2), which may reuse each other's ids; a string id becomes a 64-bit hash."""
    ns = namespace_id(rank, value)
    if isinstance(ns, int) and kind < 1 << (64 - KIND_SHIFT) and ns < 1 << KIND_SHIFT:
        return ns | kind << KIND_SHIFT
    digest = hashlib.blake2b(f"{kind}:{ns}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") | 1 << 63


def proto_flow_ids(rank: int, kinds: List[int], values: List[Any]) -> List[int]:
    """``[proto_flow_id(rank, kind, value) ...]`` of whole columns: plain integer ids (nearly
    all) in one numpy pass, the others one by one."""
    ns = namespace_ids(rank, values)
    if ns and set(map(type, ns)) == {int} and max(ns) < 1 << KIND_SHIFT and max(kinds) < 1 << (64 - KIND_SHIFT):
        return (np.array(ns, np.uint64) | np.array(kinds, np.uint64) << np.uint64(KIND_SHIFT)).tolist()
    return list(map(proto_flow_id, repeat(rank), kinds, values))


class _Enclosing:
    """Slice lookups on threads' rows of the sorted slices (all their lanes)."""

    def __init__(self, slices: "Slices", ranges: Ranges) -> None:
        self.start, self.end, self.ranges = slices.start, slices.end, ranges

    def rows(self, thread: np.ndarray, ts: np.ndarray, next_begin: np.ndarray) -> np.ndarray:
        """For each point (its thread track, ts): the innermost slice of the thread
        containing ts, or with ``next_begin`` the first slice beginning at or after ts;
        -1 where there is none."""
        out = np.full(len(ts), -1, np.int64)
        order = np.argsort(thread, kind="stable")
        tracks, firsts = np.unique(thread[order], return_index=True)
        for track, a, b in zip(tracks.tolist(), firsts.tolist(), np.append(firsts[1:], len(order)).tolist()):
            lo_hi = self.ranges.get(track)
            if lo_hi is None:
                continue
            sel = order[a:b]
            out[sel] = self._rows(lo_hi, ts[sel], next_begin[sel])
        return out

    def _rows(self, lo_hi: Tuple[int, int], ts: np.ndarray, next_begin: np.ndarray) -> np.ndarray:
        lo, hi = lo_hi
        starts = self.start[lo:hi]
        after = lo + np.searchsorted(starts, ts, side="left")
        # the innermost slice containing ts: the latest start at or before ts whose end is at
        # or after it, found by walking back over earlier slices that end later
        row = lo + np.searchsorted(starts, ts, side="right") - 1
        walking = (row >= lo) & ~next_begin
        walking[walking] = self.end[row[walking]] < ts[walking]
        if walking.any():
            jump = self._jumps(lo, hi)
            while walking.any():
                row[walking] = jump[row[walking] - lo]
                walking[walking] = row[walking] >= lo
                walking[walking] = self.end[row[walking]] < ts[walking]
        row[row < lo] = -1
        return np.where(next_begin, np.where(after < hi, after, -1), row)

    def _jumps(self, lo: int, hi: int) -> np.ndarray:
        """Previous-greater-end row of every row of a thread (``lo - 1`` when none)."""
        jump: List[int] = []
        stack: List[int] = []
        end = self.end[lo:hi].tolist()
        for row, e in enumerate(end):
            while stack and end[stack[-1]] <= e:
                stack.pop()
            jump.append(stack[-1] + lo if stack else lo - 1)
            stack.append(row)
        return np.array(jump, np.int64)
