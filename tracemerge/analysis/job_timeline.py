"""The whole job on the reference clock: every rank's thread timelines, plus the RPC calls
and collectives that tie threads of different ranks together, as the analyses use them.

Built from a :class:`~tracemerge.job.Job` and its alignment: each rank's
:class:`~tracemerge.analysis.timeline.RankTimeline` is made by a worker of the job's
engine (the events never leave it); the calls and collectives are the job's own joins
(``Job.links``), put on the reference clock here.

A *wait* is an interval on one thread during which it may be blocked on another rank:
an RPC it called, from send (t1) to completion (t4), or a collective, from its arrival to
its completion. Waits come from the records; the thread is the caller span's (RPCs) or
the one that was inside a span when the collective was issued (collectives carry no thread).
"""

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from tracemerge.algorithms.arrays import distinct
from tracemerge.analysis.timeline import RankTimeline
from tracemerge.clocks.clock import ClockModel
from tracemerge.correlate.match import TIMES, Collectives, RpcCalls
from tracemerge.inputs.event_collectives import SOURCE as EVENTS
from tracemerge.place.plan import make_plan
from tracemerge.place.rank_pass import Options, Product, gather
from tracemerge.runtime.engine import Engine

if TYPE_CHECKING:
    from tracemerge.job import Alignment, Job

# the rank's timeline, as the critical path's section asks it of the per-rank pass
TIMELINE: Product = ("timeline", "tracemerge.analysis.timeline:timeline_of")
RPC_WAIT = 0
COLLECTIVE_WAIT = 1
# {(rank, thread index): [(start ns, end ns, RPC_WAIT or COLLECTIVE_WAIT, call or collective)]}
Waits = Dict[Tuple[int, int], List[Tuple[int, int, int, int]]]


@dataclass
class Thread:
    """One thread of one rank, with its pieces and waits as lists (the walk reads them one
    at a time, where list indexing beats numpy scalars)."""

    rank: int
    index: int                   # in its RankTimeline.threads
    tid: Any                     # the thread id as the trace spells it (a JSON scalar)
    bounds: "array[int]"        # int64 reference ns (array('q'))
    owner: "array[int]"
    first_ns: int
    last_ns: int
    wait_start: List[int] = field(default_factory=list)   # sorted by end, with:
    wait_end: List[int] = field(default_factory=list)
    wait_kind: List[int] = field(default_factory=list)    # RPC_WAIT or COLLECTIVE_WAIT
    wait_ref: List[int] = field(default_factory=list)     # call or collective index


@dataclass
class JobTimeline:
    ranks: Dict[int, RankTimeline]                 # {rank: RankTimeline}
    threads: Dict[Tuple[int, int], Thread]         # {(rank, thread index): Thread}
    span_start: Dict[int, "array[int]"]          # {rank: array('q')}, as RankTimeline.span_start
    span_end: Dict[int, "array[int]"]
    callee_of: Dict[int, "array[int]"]           # {rank: array('q')}
    names: Dict[int, List[str]]                    # {rank: [span name of each span]} built lazily (name_of)
    # calls (the order of correlate.RpcCalls)
    call_name: List[str]
    call_caller: List[int]
    call_callee: List[int]
    t_ref: np.ndarray            # int64 (4, calls): t1..t4 on the reference clock
    has: np.ndarray              # bool (4, calls)
    floor: np.ndarray            # int64: the fastest delivery t2 - t1 seen between the call's two ranks
    caller_span: Dict[int, Tuple[int, int]]     # {call: (rank, span)}
    callee_span: Dict[int, Tuple[int, int]]     # {call: (rank, span)}
    span_call: Dict[Tuple[int, int], int]       # {(rank, span): call} for callee spans
    # collectives (the order of correlate.Collectives)
    coll_op: list
    coll_group: list
    coll_ranks: list             # [ranks that recorded it], per collective
    coll_arrive: dict            # {(collective, rank): arrival ns}
    coll_last: list              # [(rank, arrival ns) of the last arriver, or None when not every rank recorded it]
    coll_thread: dict            # {(collective, rank): thread index}
    _names: dict = field(default_factory=dict)
    _completions: dict = field(default_factory=dict)   # rank_completions, per rank, made on first use

    def rank_completions(self, rank: int) -> tuple:
        """([t4 ns, sorted], [call]) of the calls ``rank`` made that completed: when a
        future of the rank completed, and so ran its callbacks."""
        found = self._completions.get(rank)
        if found is None:
            pairs = sorted((int(self.t_ref[3, c]), c) for c in range(len(self.call_caller))
                           if self.call_caller[c] == rank and self.has[3, c])
            found = ([e for e, _ in pairs], [c for _, c in pairs])
            self._completions[rank] = found
        return found

    def thread(self, rank: int, index: int) -> Thread:
        return self.threads[(rank, index)]

    def rank_threads(self, rank: int) -> List[Thread]:
        return [self.threads[(rank, i)] for i in range(len(self.ranks[rank].threads))]

    def name_of(self, rank: int, span: int) -> str:
        tl = self.ranks[rank]
        return tl.names[tl.span_name[span]]


def job_timeline(job: "Job", alignment: Optional["Alignment"] = None, engine: Optional[Engine] = None) -> "JobTimeline":
    """The :class:`JobTimeline` of a job under ``alignment`` (None: the job's own): each
    rank's timeline made by the per-rank pass (:mod:`tracemerge.place.rank_pass`), on
    ``engine`` (None: the job's)."""
    plan = make_plan(job, alignment)
    made = gather(job, plan, (TIMELINE,), Options(timelines=True), engine)["timeline"]
    return build_timeline(made, job.links.rpcs.calls, job.links.collectives, plan.clocks)


def build_timeline(timelines: Dict[int, RankTimeline], calls: RpcCalls, collectives: Collectives,
                   clocks: Mapping[int, ClockModel]) -> "JobTimeline":
    """The :class:`JobTimeline` of rank timelines and the joined records (correlate's RpcCalls and
    Collectives) under ``clocks`` ({rank: ClockModel})."""
    threads = _threads(timelines)
    n = len(calls)
    caller, callee = (calls.caller.tolist(), calls.callee.tolist()) if n else ([], [])
    t_ref, has = _calls_on_reference(calls, clocks)
    caller_span, callee_span, span_call = _rpc_spans(timelines, calls, caller, callee)
    waits: Waits = {}
    for c, (rank, span) in caller_span.items():
        if has[0, c] and has[3, c]:
            ti = int(timelines[rank].span_thread[span])
            waits.setdefault((rank, ti), []).append((int(t_ref[0, c]), max(int(t_ref[3, c]), int(t_ref[0, c])),
                                                     RPC_WAIT, c))
    coll_op, coll_group, coll_ranks, coll_arrive, coll_last, coll_thread = _collectives(collectives, clocks, timelines, waits)
    for at, ws in waits.items():
        thread = threads[at]
        ws.sort(key=lambda w: (w[1], w[0]))
        thread.wait_start, thread.wait_end, thread.wait_kind, thread.wait_ref = (list(x) for x in zip(*ws))
    return JobTimeline(ranks=timelines, threads=threads,
               span_start={r: _ints(tl.span_start) for r, tl in timelines.items()},
               span_end={r: _ints(tl.span_end) for r, tl in timelines.items()},
               callee_of={r: _ints(tl.callee_of) for r, tl in timelines.items()}, names={},
               call_name=[rec.get("name", "") for rec in calls.first] if n else [], call_caller=caller,
               call_callee=callee, t_ref=t_ref, has=has, floor=_floors(caller, callee, t_ref, has),
               caller_span=caller_span, callee_span=callee_span, span_call=span_call, coll_op=coll_op,
               coll_group=coll_group, coll_ranks=coll_ranks, coll_arrive=coll_arrive, coll_last=coll_last,
               coll_thread=coll_thread)


def _threads(timelines: Dict[int, RankTimeline]) -> Dict[Tuple[int, int], Thread]:
    """{(rank, thread index): Thread} of every rank's threads, waits still empty (the walk's
    list-backed copy of each RankTimeline thread)."""
    return {(rank, i): Thread(rank=rank, index=i, tid=th.tid, bounds=_ints(th.bounds), owner=_ints(th.owner),
                              first_ns=th.first_ns, last_ns=th.last_ns)
            for rank, tl in timelines.items() for i, th in enumerate(tl.threads)}


def _calls_on_reference(calls: RpcCalls, clocks: Mapping[int, ClockModel]) -> Tuple[np.ndarray, np.ndarray]:
    """(t_ref, has): each call's t1..t4 on the reference clock (t1 and t4 on the caller's,
    t2 and t3 on the callee's), a time of a rank without a clock model not had."""
    n = len(calls)
    t_ref = np.zeros((4, n), dtype=np.int64)
    has = calls.has.copy() if n else np.zeros((4, 0), bool)
    for k, key in enumerate(TIMES):
        side = calls.caller if key in ("send_ns", "complete_ns") else calls.callee
        for rank in distinct(side).tolist() if n else []:
            sel = (side == rank) & has[k]
            if rank in clocks:
                t_ref[k, sel] = clocks[rank].to_reference(calls.times[k, sel])
            else:
                has[k, side == rank] = False
    return t_ref, has


def _floors(caller: List[int], callee: List[int], t_ref: np.ndarray, has: np.ndarray) -> np.ndarray:
    """Per call: the fastest delivery (t2 - t1) seen between its caller and callee, over the
    calls with all four times (as the RPC report: failed ones too); 0 where none has."""
    n = len(caller)
    quad = has.all(axis=0)
    transit = t_ref[1] - t_ref[0]
    floor = np.zeros(n, dtype=np.int64)
    pair = np.asarray(caller, dtype=np.int64) * (1 << 20) + np.asarray(callee, dtype=np.int64)
    for p in distinct(pair[quad]).tolist():
        floor[pair == p] = transit[quad & (pair == p)].min()
    return floor


def _rpc_spans(timelines: Dict[int, RankTimeline], calls: RpcCalls, caller: List[int], callee: List[int]
               ) -> Tuple[Dict[int, Tuple[int, int]], Dict[int, Tuple[int, int]], Dict[Tuple[int, int], int]]:
    """({call: (rank, caller span)}, {call: (rank, callee span)}, {(rank, callee span): call}):
    the RPC spans of the timelines tied to the calls they belong to, each on its own side's rank."""
    index = {rec["rpc_id"]: i for i, rec in enumerate(calls.first)} if len(calls) else {}
    caller_span: Dict[int, Tuple[int, int]] = {}
    callee_span: Dict[int, Tuple[int, int]] = {}
    span_call: Dict[Tuple[int, int], int] = {}
    for rank, tl in timelines.items():
        for rpc_id, role, span in tl.rpc_spans:
            c = index.get(rpc_id)
            if c is None:
                continue
            if role == "caller" and caller[c] == rank:
                caller_span[c] = (rank, span)
            elif role == "callee" and callee[c] == rank:
                callee_span[c] = (rank, span)
                span_call[(rank, span)] = c
    return caller_span, callee_span, span_call


def _ints(column: Any) -> "array[int]":
    """An int64 column as an ``array('q')``: indexing gives Python ints as fast as a list
    does (the walk's bisects), at 8 bytes an item instead of a list's ~36."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(column, dtype=np.int64).tobytes())
    return out


def _collectives(colls: Collectives, clocks: Mapping[int, ClockModel], timelines: Dict[int, RankTimeline],
                 waits: Waits) -> Tuple[List[str], List[str], List[List[int]], Dict[Tuple[int, int], int],
                                        List[Optional[Tuple[int, int]]], Dict[Tuple[int, int], int]]:
    """Per collective: op, group, arrivals and the last arriver on the reference clock, and
    the thread of each rank it ran on; its waits are added to ``waits``."""
    if not len(colls):
        return [], [], [], {}, [], {}
    firsts = [colls.records[i] for i in colls.first.tolist()]
    start_ref, end_ref, seen = _collectives_on_reference(colls, clocks)
    ranks, arrive, last = _arrivals(colls, firsts, start_ref, seen)
    thread_of: Dict[Tuple[int, int], int] = {}
    for col, rank in enumerate(colls.ranks):
        tl = timelines.get(rank)
        ks = np.flatnonzero(seen[:, col])
        if tl is None or not len(ks) or not tl.threads:
            continue
        for k, th, wait in _rank_waits(colls, tl, col, ks, start_ref[ks, col], end_ref[ks, col]):
            thread_of[(k, rank)] = th
            if wait is not None:
                waits.setdefault((rank, th), []).append(wait)
    return ([r.get("op", "") for r in firsts], [str(r.get("group", "")) for r in firsts], ranks, arrive, last,
            thread_of)


def _collectives_on_reference(colls: Collectives,
                              clocks: Mapping[int, ClockModel]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, seen) of the collectives' (collective, rank column) cells on the
    reference clock; a rank without a clock model sees none (nothing to place it by)."""
    start_ref = np.zeros(colls.start.shape, dtype=np.int64)
    end_ref = np.zeros(colls.end.shape, dtype=np.int64)
    seen = colls.last >= 0
    for col, rank in enumerate(colls.ranks):
        if rank in clocks:
            start_ref[:, col] = clocks[rank].to_reference(colls.start[:, col])
            end_ref[:, col] = clocks[rank].to_reference(colls.end[:, col])
        else:
            seen[:, col] = False
    return start_ref, end_ref, seen


def _arrivals(colls: Collectives, firsts: List[Dict[str, Any]], start_ref: np.ndarray, seen: np.ndarray
              ) -> Tuple[List[List[int]], Dict[Tuple[int, int], int], List[Optional[Tuple[int, int]]]]:
    """Per collective: the ranks that recorded it, each one's arrival, and the last arriver
    (rank, arrival) where every member of its group recorded it (else None: the last may be
    one unseen)."""
    ranks: List[List[int]] = []
    arrive: Dict[Tuple[int, int], int] = {}
    last: List[Optional[Tuple[int, int]]] = []
    col_of = {rank: c for c, rank in enumerate(colls.ranks)}
    for k, rec in enumerate(firsts):
        members = [int(r) for r in (rec.get("group_ranks") or [])]
        cols = np.flatnonzero(seen[k])
        ranks.append(sorted(colls.ranks[c] for c in cols.tolist()))
        for c in cols.tolist():
            arrive[(k, colls.ranks[c])] = int(start_ref[k, c])
        complete = bool(members) and all(r in col_of and seen[k, col_of[r]] for r in members)
        if complete and len(cols):
            c = cols[np.argmax(start_ref[k, cols])]
            last.append((colls.ranks[c], int(start_ref[k, c])))
        else:
            last.append(None)
    return ranks, arrive, last


def _rank_waits(colls: Collectives, tl: RankTimeline, col: int, ks: np.ndarray, starts: np.ndarray,
                ends: np.ndarray) -> List[Tuple[int, int, Optional[Tuple[int, int, int, int]]]]:
    """[(collective, thread index, its wait or None)] of the collectives ``ks`` one rank (its
    column ``col``) recorded: the thread that entered each, and the wait of each that ended."""
    which = _entering_threads(tl, starts)
    ended = colls.ended[ks, col]
    # an execution span's end lags the completion (resumed_at); a capture's record's does not
    lags = [colls.records[i].get("source") == EVENTS for i in colls.last[ks, col].tolist()]
    out: List[Tuple[int, int, Optional[Tuple[int, int, int, int]]]] = []
    for k, th, s, e, done, lag in zip(ks.tolist(), which.tolist(), starts.tolist(), ends.tolist(),
                                      ended.tolist(), lags):
        e = resumed_at(tl, th, s, e) if done and lag else e
        out.append((k, th, (s, max(e, s), COLLECTIVE_WAIT, k) if done else None))
    return out


def _entering_threads(tl: RankTimeline, starts: np.ndarray) -> np.ndarray:
    """The thread index that entered each collective arriving at ``starts`` on ``tl``: the
    one whose span open at the arrival began last (the collective's own op, or the span
    around it); where none is open (a record with no op of its own in the trace), the one
    whose work ended last before the arrival: a blocking call follows the caller's work.
    Else the busiest thread."""
    # no collective is issued from a runloop thread (its execution span may still be open
    # when the issuing thread, resumed, issues the next one)
    loops = runloops(tl)
    issuing = [i for i in range(len(tl.threads)) if i not in loops] or list(range(len(tl.threads)))
    never = np.iinfo(np.int64).min
    best = np.full(len(starts), never)
    recent = np.full(len(starts), never)
    which = np.full(len(starts), max(issuing, key=lambda i: len(tl.threads[i].bounds)))
    after = which.copy()
    for i in issuing:
        th = tl.threads[i]
        if not len(th.bounds):
            continue
        at = np.searchsorted(th.bounds, starts, side="right") - 1
        owner = np.where(at >= 0, th.owner[np.maximum(at, 0)], -1)
        score = np.where(owner >= 0, tl.span_start[np.maximum(owner, 0)], never)
        better = (owner >= 0) & (score > best)
        best[better], which[better] = score[better], i
        # in a gap: it began when the thread's previous span ended
        gap_from = np.where((at > 0) & (owner < 0), th.bounds[np.maximum(at, 0)], never)
        later = gap_from > recent
        recent[later], after[later] = gap_from[later], i
    return np.where(best > never, which, np.where(recent > never, after, which))


# the spans a collective's runloop thread runs (gloo's pt_gloo_runloop): work handed to it
RUNLOOP_PREFIXES = ("gloo:",)


def runloops(tl: RankTimeline) -> frozenset:
    """The indices of the threads of ``tl`` that ran only collectives' execution spans
    (``gloo:all_reduce`` …)."""
    runs = np.fromiter((str(n).startswith(RUNLOOP_PREFIXES) for n in tl.names), bool, len(tl.names))
    if not len(tl.span_name) or not runs.any():
        return frozenset()
    on = set(tl.span_thread[runs[tl.span_name]].tolist())
    return frozenset(int(i) for i in on - set(tl.span_thread[~runs[tl.span_name]].tolist()))


# how long after the completion a collective's execution span may be stamped on its own
# thread: the issuing thread resumes when the work completes, the runloop thread closes the
# span after (a few ms later on busy cores: measured up to ~2 ms on 2 shared cores)
END_LAG_NS = 5_000_000


def resumed_at(tl: RankTimeline, thread: int, start: int, end: int) -> int:
    """The end of a collective wait on ``thread`` of ``tl`` from ``start`` to ``end``.

    An execution span's end (gloo's runloop thread) is stamped after the completion that
    woke the issuing thread, by up to END_LAG_NS on busy cores. The thread sat blocked
    longest, within the wait, in a stretch where it ran nothing of its own (no span, or
    only spans open since before the wait: the step around it); where it resumed from that
    stretch no more than END_LAG_NS before ``end``, the collective completed then, and the
    wait ends there. Else ``end``."""
    th = tl.threads[thread]
    bounds, owner = th.bounds, th.owner
    lo = max(int(np.searchsorted(bounds, start, side="right")) - 1, 0)
    hi = int(np.searchsorted(bounds, end, side="right"))
    if hi - lo < 2:
        return end
    own = owner[lo:hi]
    blocked = (own < 0) | (tl.span_start[np.maximum(own, 0)] <= start)
    edges = np.diff(np.r_[0, blocked.astype(np.int8), 0])
    first, after = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)   # runs [first, after)
    after_ns = bounds[np.minimum(lo + after, len(bounds) - 1)]
    inside = lo + after < len(bounds)
    if not inside.any():
        return end
    lengths = np.where(inside, after_ns - np.maximum(bounds[lo + first], start), -1)
    k = int(np.argmax(lengths))
    resume = int(after_ns[k])
    return resume if inside[k] and start < resume < end and end - resume <= END_LAG_NS else end
