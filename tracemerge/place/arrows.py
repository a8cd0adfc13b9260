"""RPC flow arrows: caller span -> callee span -> back to the caller.

The arrows come from :func:`~tracemerge.correlate.match.match_rpcs` (which calls have both sides
in the inputs) and the spans that carry ``args.rpc_id`` / ``args.role`` in the events. A
span only counts on the rank its record names (caller spans on ``call.caller``, callee
spans on ``call.callee``), so an arrow never joins two ranks by accident. Each call gets
two flow ids, one per direction, from its position in the match, so every rank's shard is
written without the other side's events.

JSON gets v1 flow events (``s`` then ``f`` with ``bp: "e"``, both binding to the slice that
encloses them); protobuf gets ``flow_ids`` / ``terminating_flow_ids`` on the slices. v2
``bind_id`` on the X events cannot carry the return arrow: Perfetto's JSON importer reads
an X's ``flow_in`` at the X's start, before the callee has begun the response flow.

The input's own flows (Kineto ``fwdbwd``, ``ac2g``, v2 ``bind_id``) are bound to slices for
the protobuf output by :mod:`tracemerge.formats.perfetto.flows`; JSON passes them through.
"""

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any, Collection, Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Set, Tuple

import numpy as np

from tracemerge.algorithms.nesting import nest_order, thread_runs
from tracemerge.inputs.rpc_spans import span_args
from tracemerge.model import RankTrace
from tracemerge.place.placement import Placement, lane_tid

FLOW_CAT = "rpc"


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
# {event index: (rpc_id, role)} of a rank's RPC spans (RpcFlows.find)
Found = Dict[int, Tuple[str, Optional[str]]]
NO_FLOWS = SliceFlows()
# RPC flow ids start at 2**52, above the rank-namespaced ids of input flows
# (``(rank + 1) << 32 | id``) and below 2**53, where JSON readers lose integer precision.
FLOW_ID_BASE = 1 << 52


@dataclass
class RpcFlows:
    """The flow plan of one combine: which calls get arrows, and their ids.

    Small and picklable: each rank's worker finds its own spans and writes its own half
    of every arrow (the caller's ``s``/``f`` around its span, the callee's ``f``/``s``), so
    no rank waits for another; the halves meet in the output by flow id.
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
        return FLOW_ID_BASE + 2 * n, FLOW_ID_BASE + 2 * n + 1

    def find(self, trace: RankTrace, rank: int) -> Tuple[Found, Dict[str, int]]:
        """({event index: (rpc_id, role)} of the rank's RPC spans, counts).

        A span counts only on the rank its role names, and only once per (rpc_id, role).
        """
        found: Found = {}
        seen: Set[Tuple[str, Optional[str]]] = set()
        duplicates = 0
        if self.calls:
            for i, rpc_id, role in span_args(trace):
                call = self.calls.get(rpc_id)
                if call is None or role not in ROLES or rank != call[ROLES[role]]:
                    continue
                if (rpc_id, role) in seen:
                    duplicates += 1
                    continue
                seen.add((rpc_id, role))
                found[i] = (rpc_id, role)
        roles = [r for _, r in found.values()]
        return found, {"rpc_caller_spans": roles.count("caller"), "rpc_callee_spans": roles.count("callee"),
                       "rpc_duplicate_spans": duplicates}

    def proto_flows(self, found: Found) -> Dict[int, SliceFlows]:
        """{event index: :class:`SliceFlows`} of the rank's RPC spans: the request leaves the
        caller's begin and ends at the callee's begin, the response leaves the callee's end
        and ends at the caller's end."""
        out: Dict[int, SliceFlows] = {}
        for i, (rpc_id, role) in found.items():
            req, resp = self.ids(rpc_id)
            back = () if rpc_id in self.unreturned else (resp,)
            out[i] = (SliceFlows(begin=(req,), end_terminating=back) if role == "caller"
                      else SliceFlows(begin_terminating=(req,), end=back))
        return out

    def json_events(self, found: Found, trace: RankTrace, place: Placement, start: np.ndarray, dur: np.ndarray,
                    lanes: Optional[Dict[int, int]] = None) -> List[Dict[str, Any]]:
        """This rank's v1 flow events: 2 per span, just inside its start and its end.

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
        for (i, (rpc_id, role)), s, e, pid_code, tid_code in columns:
            req, resp = self.ids(rpc_id)
            pid = place.pid_base + pid_code
            first, last = ("s", "f") if role == "caller" else ("f", "s")
            if i in lanes:
                tid = lane_tid(trace.tids[tid_code], lanes[i])
                events.append(_flow(first, req, rpc_id, pid, tid, _inside(s, e, at_end=False)))
                if rpc_id not in self.unreturned:
                    events.append(_flow(last, resp, rpc_id, pid, tid, _inside(s, e, at_end=True)))
                continue
            # spans of the thread nested in this one; a span that only partly overlaps it is
            # not on the thread's slice stack in Perfetto (dropped or moved), so it cannot
            # take the point, and counting it would push the return point before the callee's end
            t_start, t_end = threads[pid_code, tid_code]
            lo, hi = bisect_left(t_start, s), bisect_right(t_start, e)
            gaps = _gaps(s, e, [(cs, ce) for cs, ce in zip(t_start[lo:hi], t_end[lo:hi])
                                if ce <= e and not (cs == s and ce == e)])
            tid = trace.tids[tid_code]
            events.append(_flow(first, req, rpc_id, pid, tid, _inside(*gaps[0], at_end=False)))
            if rpc_id not in self.unreturned:  # no arrow for a return that never happened
                events.append(_flow(last, resp, rpc_id, pid, tid, _inside(*gaps[-1], at_end=True)))
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


def _flow(ph: str, flow_id: int, rpc_id: str, pid: int, tid: Any, ts_ns: int) -> Dict[str, Any]:
    e: Dict[str, Any] = {"ph": ph, "cat": FLOW_CAT, "name": "rpc", "id": flow_id, "pid": pid, "tid": tid,
         "ts": ts_ns / 1000.0, "args": {"rpc_id": rpc_id}}
    if ph == "f":
        e["bp"] = "e"
    return e
