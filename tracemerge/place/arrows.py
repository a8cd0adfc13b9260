"""Flow arrows between the spans of two ranks: one registry of kinds (:data:`KINDS`), one
way of drawing them.

- ``rpc``: caller span -> callee span -> back to the caller. The arrows come from
  :func:`~tracemerge.correlate.match.match_rpcs` (which calls have both sides in the
  inputs) and the spans that carry ``args.rpc_id`` / ``args.role`` in the events. A span
  only counts on the rank its record names (caller spans on ``call.caller``, callee spans
  on ``call.callee``), so an arrow never joins two ranks by accident. Each call gets two
  flow ids, one per direction, from its position in the match.
- ``p2p``: a send's span on the sender -> its receive's span on the receiver, one arrow per
  pair :func:`~tracemerge.correlate.match.match_p2p` matched: from the send's issue (gloo's
  ``c10d::send``, NCCL's send kernel) to where the receive's data had arrived (the end of
  gloo's ``gloo:recv``, NCCL's receive kernel), the one-way link the clocks are bound by.
  Each record names the span it was read from (``span``: name, ts_ns, dur_ns, cat on the
  rank's clock), so the worker that writes a rank finds its half by that alone.

Each rank's worker writes its own half of every arrow (:class:`Point` s on its spans, from
:meth:`Arrows.find`), so no rank waits for another; the halves meet in the output by flow id.
Flow ids of each kind come from a range of its own (:attr:`Kind.id_base`), so no two kinds'
ever meet.

JSON gets v1 flow events (``s`` then ``f`` with ``bp: "e"``, both binding to the slice that
encloses them); protobuf gets ``flow_ids`` / ``terminating_flow_ids`` on the slices. v2
``bind_id`` on the X events cannot carry the return arrow: Perfetto's JSON importer reads
an X's ``flow_in`` at the X's start, before the callee has begun the response flow.

The input's own flows (Kineto ``fwdbwd``, ``ac2g``, v2 ``bind_id``) are bound to slices for
the protobuf output by :mod:`tracemerge.formats.perfetto.flows`; JSON passes them through.
"""

from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import Any, Collection, Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np

from tracemerge.algorithms.nesting import nest_order, thread_runs
from tracemerge.inputs.rpc_spans import span_args
from tracemerge.model import NO_DUR, NO_TS, RankTrace
from tracemerge.place.placement import Placement, lane_tid


class Kind(NamedTuple):
    """One kind of arrow: its flow events' ``cat`` and ``name``, and the first of its flow ids."""

    cat: str
    id_base: int


# RPC flow ids start at 2**52, above the rank-namespaced ids of input flows
# (``(rank + 1) << 32 | id``) and below 2**53, where JSON readers lose integer precision;
# p2p's start halfway up: 2**50 calls' two ids each fit below them, more than any job makes
KINDS: Dict[str, Kind] = {"rpc": Kind("rpc", 1 << 52), "p2p": Kind("p2p", (1 << 52) + (1 << 51))}
FLOW_CAT = KINDS["rpc"].cat
FLOW_ID_BASE = KINDS["rpc"].id_base


class Point(NamedTuple):
    """One end of an arrow on a span: where it goes on the span (just inside its start, or
    its end) and whether the arrow leaves there (JSON ``s``, protobuf ``flow_ids``) or
    arrives (``f``, ``terminating_flow_ids``); ``label`` its JSON event's args, as (key, value)s."""

    kind: str
    flow_id: int
    at_end: bool
    leaves: bool
    label: Tuple[Tuple[str, Any], ...]


class SliceFlows(NamedTuple):
    """The flow ids a slice's packets carry in the protobuf output: its begin's ``flow_ids``
    and ``terminating_flow_ids``, its end's the same."""

    begin: Tuple[int, ...] = ()
    begin_terminating: Tuple[int, ...] = ()
    end: Tuple[int, ...] = ()
    end_terminating: Tuple[int, ...] = ()

    def add(self, flow_id: int, at_end: bool, terminating: bool) -> "SliceFlows":
        """These flows with ``flow_id`` on the slice's begin or end, continuing or ending there."""
        ids = list(self)
        ids[2 * at_end + terminating] += (flow_id,)   # the fields' order: begin, begin_terminating, end, …
        return _new_tuple(SliceFlows, ids)            # (not _replace: ~4x slower, called per flow point)

    def __add__(self, other: "SliceFlows") -> "SliceFlows":  # type: ignore[override]  # the flows of both, field by field
        return SliceFlows(*(a + b for a, b in zip(self, other)))


_new_tuple = tuple.__new__
# {event index: the arrows' ends on that span, in the order they are written}
Found = Dict[int, Tuple[Point, ...]]
NO_FLOWS = SliceFlows()


@dataclass
class RpcFlows:
    """The RPC arrows of one combine: which calls get arrows, and their ids.

    Small and picklable: each rank's worker finds its own spans and writes its own half
    of every arrow (the caller's ``s``/``f`` around its span, the callee's ``f``/``s``).
    """

    calls: Dict[str, Tuple[int, int, int]]  # {rpc_id: (index, caller rank, callee rank)}
    # calls that never completed (the callee never ended them, or the caller never heard
    # back): the request arrow only, no arrow for a return that never happened
    unreturned: FrozenSet[str] = frozenset()

    @classmethod
    def plan(cls, between: Iterable[Tuple[int, str, int, int, bool]], spans: Collection[Tuple[str, str, int]],
             drawn: Collection[str] = frozenset()) -> "RpcFlows":
        """Calls with both records whose two ranks are both in the output (``between``: the
        job's RPC join's ``calls.between`` those ranks) and whose two spans the output will
        hold: ``spans`` the (rpc_id, role, rank) of the RPC spans the ranks' events hold and
        the size controls keep (``selection.kept_spans``); ``drawn`` the calls whose callee
        span is drawn from the caller's file (place.remote_spans). No arrow is drawn with
        one end in the air."""
        calls = {rpc_id: (n, caller, callee, returned)
                 for n, rpc_id, caller, callee, returned in between
                 if (rpc_id, "caller", caller) in spans
                 and ((rpc_id, "callee", callee) in spans or rpc_id in drawn)}
        return cls({k: v[:3] for k, v in calls.items()}, frozenset(k for k, v in calls.items() if not v[3]))

    def ids(self, rpc_id: str) -> Tuple[int, int]:
        """(request flow id, response flow id) of a call."""
        n = self.calls[rpc_id][0]
        base = KINDS["rpc"].id_base
        return base + 2 * n, base + 2 * n + 1

    def find(self, trace: RankTrace, rank: int) -> Tuple[Found, Dict[str, int]]:
        """({event index: its points} of the rank's RPC spans, counts).

        A span counts only on the rank its role names, and only once per (rpc_id, role).
        The request leaves the caller's begin and ends at the callee's begin, the response
        leaves the callee's end and ends at the caller's end.
        """
        found: Found = {}
        seen: Set[Tuple[str, Optional[str]]] = set()
        duplicates = 0
        roles: List[str] = []
        if self.calls:
            for i, rpc_id, role in span_args(trace):
                call = self.calls.get(rpc_id)
                if call is None or role not in ROLES or rank != call[ROLES[role]]:
                    continue
                if (rpc_id, role) in seen:
                    duplicates += 1
                    continue
                seen.add((rpc_id, role))
                roles.append(role)
                req, resp = self.ids(rpc_id)
                caller = role == "caller"
                label = (("rpc_id", rpc_id),)
                points: Tuple[Point, ...] = (Point("rpc", req, False, caller, label),)
                if rpc_id not in self.unreturned:  # no arrow for a return that never happened
                    points += (Point("rpc", resp, True, not caller, label),)
                found[i] = points
        return found, {"rpc_caller_spans": roles.count("caller"), "rpc_callee_spans": roles.count("callee"),
                       "rpc_duplicate_spans": duplicates}


# (name, ts_ns, dur_ns) of a span on its rank's clock: how a p2p record names the span it was read from
SpanKey = Tuple[str, int, int]


@dataclass
class P2pFlows:
    """The send/recv arrows of one combine: per rank, the spans its halves go on.

    Small and picklable, as :class:`RpcFlows`: two points per matched pair.
    """

    points: Dict[int, Dict[SpanKey, Point]]   # {rank: {span: its point}}

    @classmethod
    def plan(cls, p2p: Any, records: Mapping[int, Sequence[Dict[str, Any]]],
             kept: Mapping[int, Sequence[bool]]) -> "P2pFlows":
        """The pairs of ``p2p`` (:class:`~tracemerge.correlate.match.PointToPoint`) whose two
        ranks are in the output (``records``: the output's ranks' ``p2p`` records, the
        positions ``p2p.send_record``/``recv_record`` name) and whose two spans the size
        controls keep (``kept``: per rank, per record, ``selection.kept_spans`` of their
        ``span``). No arrow is drawn with one end in the air, nor where two of a rank's
        records name one span (which arrow it would take cannot be told)."""
        base = KINDS["p2p"].id_base
        ends: List[Tuple[int, SpanKey, Point]] = []
        columns = zip(p2p.sender.tolist(), p2p.receiver.tolist(), p2p.send_record.tolist(),
                      p2p.recv_record.tolist(), p2p.bytes.tolist())
        for n, (s, r, at_s, at_r, size) in enumerate(columns):
            if s not in records or r not in records or not (kept[s][at_s] and kept[r][at_r]):
                continue
            send, recv = _span_key(records[s][at_s]), _span_key(records[r][at_r])
            if send is None or recv is None:
                continue
            label = (("sender", s), ("receiver", r), ("bytes", size))
            ends += [(s, send, Point("p2p", base + n, False, True, label)),
                     (r, recv, Point("p2p", base + n, True, False, label))]
        named = Counter((rank, key) for rank, key, _ in ends)
        halves = Counter(p.flow_id for rank, key, p in ends if named[rank, key] == 1)
        points: Dict[int, Dict[SpanKey, Point]] = {}
        for rank, key, p in ends:
            if halves[p.flow_id] == 2:   # an arrow keeps its two ends or neither
                points.setdefault(rank, {})[key] = p
        return cls(points)

    def find(self, trace: RankTrace, rank: int) -> Tuple[Found, Dict[str, int]]:
        """({event index: its point} of the rank's send and receive spans, counts): the timed
        X events of each planned span's name, start and duration, the first of each."""
        mine = self.points.get(rank)
        if not mine:
            return {}, {}
        wanted = {n for n, _, _ in mine}
        codes = [c for c, n in enumerate(trace.names) if n.__class__ is str and n in wanted]
        span = (trace.ph == ord("X")) & (trace.ts != NO_TS) & (trace.dur != NO_DUR)
        at = np.flatnonzero(span & np.isin(trace.name, codes)).tolist() if codes else []
        found: Found = {}
        seen: Set[SpanKey] = set()
        for i, code, ts, dur in zip(at, trace.name[at].tolist(), trace.ts[at].tolist(), trace.dur[at].tolist()):
            key = (trace.names[code], ts, dur)
            point = mine.get(key)
            if point is not None and key not in seen:
                seen.add(key)
                found[i] = (point,)
        leaving = sum(p.leaves for (p,) in found.values())
        return found, {"p2p_send_spans": leaving, "p2p_recv_spans": len(found) - leaving}


def _span_key(record: Dict[str, Any]) -> Optional[SpanKey]:
    """The (name, ts_ns, dur_ns) a p2p record's ``span`` names, None where it names none."""
    span = record.get("span")
    if not isinstance(span, dict):
        return None
    return str(span["name"]), int(span["ts_ns"]), int(span["dur_ns"])


@dataclass
class Arrows:
    """Every kind's arrows of one combine (:data:`KINDS`): what each rank's worker finds on
    its spans, all kinds' points together."""

    rpc: RpcFlows
    p2p: P2pFlows

    def by_rank(self) -> Dict[int, "Arrows"]:
        """{rank: the arrows with an end on its spans}: what its worker needs, each rank's
        task carrying its own (the whole plan in every rank's task grew as ranks²: 51,200
        calls in each of 512 tasks). ``find`` on a rank's own gives what it gives on the whole."""
        calls: Dict[int, Dict[str, Tuple[int, int, int]]] = {}
        for rpc_id, call in self.rpc.calls.items():
            for rank in {call[1], call[2]}:
                calls.setdefault(rank, {})[rpc_id] = call
        out: Dict[int, Arrows] = {}
        for rank in set(calls) | set(self.p2p.points):
            mine = calls.get(rank, {})
            out[rank] = Arrows(RpcFlows(mine, self.rpc.unreturned & frozenset(mine)),
                               P2pFlows({rank: self.p2p.points[rank]} if rank in self.p2p.points else {}))
        return out

    def find(self, trace: RankTrace, rank: int) -> Tuple[Found, Dict[str, int]]:
        """({event index: its points, every kind's}, counts of every kind)."""
        found, counts = self.rpc.find(trace, rank)
        more, more_counts = self.p2p.find(trace, rank)
        for i, points in more.items():
            found[i] = found.get(i, ()) + points
        return found, {**counts, **more_counts}


def proto_flows(found: Found) -> Dict[int, SliceFlows]:
    """{event index: :class:`SliceFlows`} of the spans' points: each on its span's begin or
    end, continuing there or ending."""
    out: Dict[int, SliceFlows] = {}
    for i, points in found.items():
        flows = NO_FLOWS
        for p in points:
            flows = flows.add(p.flow_id, p.at_end, not p.leaves)
        out[i] = flows
    return out


def json_events(found: Found, trace: RankTrace, place: Placement, start: np.ndarray, dur: np.ndarray,
                lanes: Optional[Dict[int, int]] = None) -> List[Dict[str, Any]]:
    """This rank's v1 flow events: one per point, just inside its span's start or end.

    ``start``/``dur`` are the rank's aligned ns (``merge.placement.aligned_ns``); ``lanes``
    the spans the output moves to lanes of their thread (``nesting.lanes``): their
    points go there, where no other span overlaps them, and they are no longer spans
    of the thread they left.
    """
    events: List[Dict[str, Any]] = []
    lanes = lanes or {}
    ends = start + np.maximum(dur, 0)
    at = np.fromiter(found, np.int64, len(found))
    # the spans' columns as Python ints at once (a numpy scalar per field and span cost
    # more than the rest of the loop)
    pids, tids = trace.pid[at].tolist(), trace.tid[at].tolist()
    threads = _thread_spans(trace, start, ends, dur, set(zip(pids, tids)), lanes)
    columns = zip(found.items(), start[at].tolist(), ends[at].tolist(), pids, tids)
    for (i, points), s, e, pid_code, tid_code in columns:
        pid = place.pid_base + pid_code
        if i in lanes:
            tid = lane_tid(trace.tids[tid_code], lanes[i])
            events += [_flow(p, pid, tid, _inside(s, e, p.at_end)) for p in points]
            continue
        # spans of the thread nested in this one; a span that only partly overlaps it is
        # not on the thread's slice stack in Perfetto (dropped or moved), so it cannot
        # take the point, and counting it would push the return point before the callee's end
        t_start, t_end = threads[pid_code, tid_code]
        lo, hi = bisect_left(t_start, s), bisect_right(t_start, e)
        gaps = _gaps(s, e, [(cs, ce) for cs, ce in zip(t_start[lo:hi], t_end[lo:hi])
                            if ce <= e and not (cs == s and ce == e)])
        tid = trace.tids[tid_code]
        events += [_flow(p, pid, tid, _inside(*gaps[-1 if p.at_end else 0], at_end=p.at_end)) for p in points]
    return events


def _thread_spans(trace: RankTrace, start: np.ndarray, ends: np.ndarray, dur: np.ndarray,
                  wanted: Iterable[Tuple[int, int]], moved: Collection[int] = (),
                  ) -> Dict[Tuple[int, int], Tuple[List[int], List[int]]]:
    """{(pid code, tid code): (starts, ends)} of the X spans of each wanted thread in nesting
    order (:func:`~tracemerge.algorithms.nesting.nest_order`), as lists of ints, leaving out the spans
    ``moved`` to lanes: one sort, then a binary search per call (in Python: thousands of
    calls on small slices cost less than as many numpy calls). The order of spans that
    start together does not change the gaps."""
    spans = np.flatnonzero((trace.ph == ord("X")) & (dur >= 0))
    if moved:
        spans = np.setdiff1d(spans, np.fromiter(moved, np.int64, len(moved)), assume_unique=True)
    keys = trace.thread_keys(spans)
    order = nest_order(keys, start[spans], ends[spans])
    spans, keys = spans[order], keys[order]
    by_key = {pid * trace.thread_stride + tid: (pid, tid) for pid, tid in wanted}
    out: Dict[Tuple[int, int], Tuple[List[int], List[int]]] = {thread: ([], []) for thread in wanted}
    for lo, hi in thread_runs(keys):
        thread = by_key.get(int(keys[lo]))
        if thread is not None:
            out[thread] = start[spans[lo:hi]].tolist(), ends[spans[lo:hi]].tolist()
    return out


ROLES = {"caller": 1, "callee": 2}  # role -> position of its rank in a planned call


def _gaps(start: int, end: int, children: Iterable[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The stretches of [start, end] no other span covers (the whole span when they tile
    it), so a flow point placed there binds to the span itself, not to a child."""
    gaps: List[Tuple[int, int]] = []
    at = start
    for cs, ce in children:
        if cs > at:
            gaps.append((at, cs))
        at = max(at, ce)
    if end > at:
        gaps.append((at, end))
    return gaps or [(start, end)]


def _inside(start: int, end: int, at_end: bool) -> int:
    """A point just inside a stretch (up to 1 µs, at most a quarter of it in), clear of its
    edges even after µs float rounding."""
    margin = min(1000, (end - start) // 4)
    return end - margin if at_end else start + margin


def _flow(point: Point, pid: int, tid: Any, ts_ns: int) -> Dict[str, Any]:
    cat = KINDS[point.kind].cat
    e: Dict[str, Any] = {"ph": "s" if point.leaves else "f", "cat": cat, "name": cat, "id": point.flow_id,
                         "pid": pid, "tid": tid, "ts": ts_ns / 1000.0, "args": dict(point.label)}
    if not point.leaves:
        e["bp"] = "e"
    return e
