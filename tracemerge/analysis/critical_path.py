r"""The cross-rank critical path: the chain of dependent work that decided when each window ended.

Graph (time runs right; the walk runs left, from the window's end)::

    caller  ==compute==* t1 send                          t4 completed *==compute==> window end
                        \  RPC transfer          RPC transfer  /
    callee  ==earlier===(*)arrival ..queueing..*==callee execution==* t3
                  `-- queue edge: busy when the request arrived, the path stays on the callee

    rank A  ==compute==* arrival ....waiting in a collective.... * completed ==>
    rank B  ==========compute==========* last arrival ========== * completed ==>

    pool thread  (idle) ....... *==work==    woken by the RPC completion that handed it its work

Algorithm: start at the window's end on the thread whose step (or last span) ended last;
then, until the window's start, ask what that thread was doing just before the moment the
walk is at and follow what made that moment late — the span it ran (thread order), the RPC
whose completion t4 is that moment (back through the return transfer to the callee's span,
its queueing, and the request's transfer to the caller's send t1), the collective that
completed then (back to the last rank to arrive, at its arrival), the completion that woke
an idle pool thread — each step one segment of the path, the segments tiling the window.
The rules, in detail:

A window is one step of the ranks whose ``ProfilerStep#N`` spans correspond (from the
first of them to start to the last to end, on the reference clock) when the trace has
steps, else the whole trace:

- **Which steps are one window.** Spans of one step name on different ranks are one
  window when they overlap in time, or when an RPC (a message of it sent in one and
  received in the other) or a collective (entered in both) joins them, and so on
  transitively (:func:`step_groups`). A step name whose spans all correspond is one
  window named ``ProfilerStep#N``, as when every rank steps together; otherwise each
  group is its own window, ``ProfilerStep#N (rank R)`` for one rank and
  ``ProfilerStep#N (ranks R1, R2)`` for several (a name that would repeat gets `` [2]``,
  …). Steps of different names are never one window.
- **Windows never overlap.** Taken in order of their ends, a window that began before the
  previous one ended begins where that one ended (:func:`disjoint`): every window keeps
  its end and the path that decided it, the shared time is counted once, in the window
  that ended first, and one left with no time is dropped. So no time is on two windows'
  paths, and each rank's total over all windows is at most the trace's length.

The path of each window is found by walking back in time from the window's end, on the thread whose step (or
whose last span) ended last, as Scalasca finds a critical path: at each moment the walk
asks what the thread it is on was doing just before, and follows whatever made that
moment late.

- **Thread order.** The thread ran a span (a piece of :mod:`~tracemerge.analysis.timeline`):
  that work is on the path (``compute``, or ``callee execution`` inside a served call).
  Time on a thread in no span is untraced work of that thread (``compute``, named
  ``(untraced)``) only on the job's own threads (a caller's, a step's); a *pool* thread
  (:func:`pool_threads`: it serves RPCs, or runs future callbacks) that runs nothing is
  idle, and the walk never goes back through that: it asks what woke the thread.
- **Wake-ups.** A pool thread that started work after being idle was handed it when an
  RPC its rank had called completed in the meantime (a future's callbacks run on the
  thread that completes it): the latest such completion is followed, as an RPC edge;
  without one, the thread of its rank whose work ended last before.
- **RPC edges.** The thread resumed when an RPC it called completed (the end t4 of a
  wait falls exactly where the walk is): the response travelled from the callee's t3
  (``RPC transfer``), before that the callee span ran (``callee execution``), and it
  started when the request was delivered (``callee queueing`` from the estimated
  arrival t1 + the fastest delivery between the two ranks, ``RPC transfer`` before that,
  from the caller's send t1) — unless the callee's thread was still busy with earlier
  work when the request arrived: then that earlier work is what the call waited for
  (``queue`` edge: thread order on the callee, the gap is ``callee queueing``).
- **async_execution continuations, by cause.** An ``async_execution`` callee span (its
  args say it ended on another thread) ends when the future it returned completes, which
  is when the RPCs issued inside it complete (plain, or through an RRef): the one that
  completed last is followed — through the callback that ran on the thread that received
  its reply, when there was one. A span of that kind that issued no RPC (its future
  completed by other work of the rank) falls back to the thread of its rank whose last
  work ended latest, within CONTINUATION_NS before its end.
- **Collectives.** A rank that resumed when a collective completed waited from the last
  rank's arrival (``waiting in a collective``); before that, the path is on the last
  arriver, at its arrival.

Each edge kind is one method of :class:`Walker`.
Segments tile the window from its start to its end; each is (rank, tid, name, kind,
start_ns, end_ns) on the reference clock. Removing an edge kind from ``edges`` shows what
the path would be without it (tests use this to check that each edge is taken).
"""

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

import numpy as np

from tracemerge.algorithms.arrays import distinct_rows
from tracemerge.algorithms.groups import components
from tracemerge.analysis.job_timeline import COLLECTIVE_WAIT, RPC_WAIT, JobTimeline, Thread, runloops

COMPUTE = "compute"
TRANSFER = "RPC transfer"
QUEUEING = "callee queueing"
EXECUTION = "callee execution"
COLLECTIVE = "waiting in a collective"
KINDS = (COMPUTE, TRANSFER, QUEUEING, EXECUTION, COLLECTIVE)
# only where a window's start has nothing running: a pool thread idle since it began
IDLE = "idle"
ALL_KINDS = KINDS + (IDLE,)
UNTRACED = "(untraced)"

EDGES = frozenset(("rpc", "queue", "continuation", "collective"))
# How close before a callee span's end another thread of its rank must have worked for the
# end to be taken as that thread completing the span's future (async_execution), and how
# long the span's own untraced tail must be for the question to arise.
CONTINUATION_NS = 200_000
WHOLE_TRACE = "trace"
_NEG = -(1 << 62)
_STALL = 64   # steps without moving back in time before dependencies are ignored for one step
# How soon after a wait ended a span begun after the wait must end to be taken as wrapping it
# (``record_function("sync"): fut.wait()``): the thread's wake-up after the completion.
WAKE_NS = 1_000_000


@dataclass
class Segment:
    rank: int
    tid: Any                    # the thread id as the trace spells it (a JSON scalar)
    name: str
    kind: str
    start_ns: int
    end_ns: int


@dataclass
class Window:
    window: str
    start_ns: int
    end_ns: int
    segments: List[Segment] = field(default_factory=list)    # in time order
    by_rank: Dict[int, int] = field(default_factory=dict)     # {rank: ns on the path}
    by_kind: Dict[str, int] = field(default_factory=dict)     # {kind: ns on the path}

    def as_dict(self) -> Dict[str, Any]:
        return {"window": self.window, "start_ns": self.start_ns, "end_ns": self.end_ns,
                "segments": [{"rank": s.rank, "tid": s.tid, "name": s.name, "kind": s.kind,
                              "start_ns": s.start_ns, "end_ns": s.end_ns} for s in self.segments]}


class Span(NamedTuple):
    """One window before its walk: its name, [start_ns, end_ns) on the reference clock, the
    (rank, thread index) the walk starts on (where the window ends) and the one where the
    window begins (``whatif`` replays from there)."""

    name: str
    start_ns: int
    end_ns: int
    at: Tuple[int, int]
    begins: Tuple[int, int]


def windows(job: JobTimeline) -> List[Span]:
    """The job's windows, in time order and never overlapping: its steps that correspond
    (:func:`step_groups`) made disjoint (:func:`disjoint`), else one for the whole trace."""
    steps = [(name, start, end, rank, thread) for rank, tl in sorted(job.ranks.items())
             for name, start, end, thread in tl.steps]
    if steps:
        return disjoint(_labelled(steps, step_groups(job, steps)))
    threads = [th for th in job.threads.values() if th.bounds or th.wait_end]
    if not threads:
        return []
    # a collective's runloop thread ends when the last collective does: the job's own
    # thread that issued it is where the path ends
    runloop = runloop_threads(job)
    last = max([th for th in threads if (th.rank, th.index) not in runloop] or threads, key=lambda th: th.last_ns)
    first = min(threads, key=lambda th: th.first_ns)
    return [Span(WHOLE_TRACE, first.first_ns, last.last_ns, (last.rank, last.index), (first.rank, first.index))]


def step_groups(job: JobTimeline, steps: List[Tuple[str, int, int, int, int]]) -> List[List[int]]:
    """The steps ([(name, start, end, rank, thread)], reference ns) that correspond, as groups
    of indices into ``steps``: steps of one name are in one group when they overlap in time,
    or when an RPC or a collective joins them (:func:`_joined`), and so on transitively. Steps
    of different names are never grouped."""
    links: List[Tuple[int, int]] = []
    by_name: Dict[str, List[int]] = {}
    for i, step in enumerate(steps):
        by_name.setdefault(step[0], []).append(i)
    split = False
    for members in by_name.values():
        members.sort(key=lambda i: (steps[i][1], steps[i][2]))
        head, reach = members[0], steps[members[0]][2]
        for i in members[1:]:
            if steps[i][1] < reach:
                links.append((head, i))
                reach = max(reach, steps[i][2])
            else:
                split = True
                head, reach = i, steps[i][2]
    if split:   # joins only ever merge groups of one name that overlap did not
        links += [(i, j) for i, j in _joined(job, steps) if steps[i][0] == steps[j][0]]
    return components(range(len(steps)), links)


def _joined(job: JobTimeline, steps: List[Tuple[str, int, int, int, int]]) -> List[Tuple[int, int]]:
    """[(i, j)] of steps an exchange joins: an RPC sent (t1) in step i of its caller whose
    callee started it (t2) in step j of the callee, or whose callee ended it (t3) in step j
    and whose caller saw it complete (t4) in step i; a collective its ranks entered in steps
    i and j. A time is in a step of its rank from the step's start to its end, inclusive."""
    of_rank: Dict[int, List[int]] = {}
    for i, step in enumerate(steps):
        of_rank.setdefault(step[3], []).append(i)
    per_rank: Dict[int, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for rank, idx in of_rank.items():
        idx.sort(key=lambda i: (steps[i][1], steps[i][2]))
        per_rank[rank] = (np.array([steps[i][1] for i in idx], dtype=np.int64),
                          np.array([steps[i][2] for i in idx], dtype=np.int64), np.array(idx, dtype=np.int64))

    def step_at(ranks: np.ndarray, times: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """The step (index into ``steps``, -1: none) each rank was in at each time."""
        out = np.full(len(times), -1, dtype=np.int64)
        for rank, (starts, ends, idx) in per_rank.items():
            sel = np.flatnonzero(ok & (ranks == rank))
            if not len(sel):
                continue
            k = np.searchsorted(starts, times[sel], side="right") - 1
            inside = (k >= 0) & (times[sel] <= ends[np.maximum(k, 0)])
            out[sel[inside]] = idx[k[inside]]
        return out

    found: List[np.ndarray] = []
    if len(job.call_caller):
        caller = np.asarray(job.call_caller, dtype=np.int64)
        callee = np.asarray(job.call_callee, dtype=np.int64)
        for a, b in ((0, 1), (3, 2)):   # the request (t1 -> t2), the response (t3 -> t4)
            x = step_at(caller, job.t_ref[a], job.has[a])
            y = step_at(callee, job.t_ref[b], job.has[b])
            both = (x >= 0) & (y >= 0)
            found.append(np.stack([x[both], y[both]], axis=1))
    if job.coll_arrive:
        keys = list(job.coll_arrive)
        coll = np.array([k for k, _ in keys], dtype=np.int64)
        ranks = np.array([r for _, r in keys], dtype=np.int64)
        times = np.array([job.coll_arrive[k] for k in keys], dtype=np.int64)
        at = step_at(ranks, times, np.ones(len(keys), dtype=bool))
        keep = at >= 0
        coll, at = coll[keep], at[keep]
        order = np.argsort(coll, kind="stable")
        coll, at = coll[order], at[order]
        _, first, counts = np.unique(coll, return_index=True, return_counts=True)
        # each rank's step joined to the first rank's step of the same collective
        found.append(np.stack([np.repeat(at[first], counts), at], axis=1))
    if not found:
        return []
    pairs = np.concatenate(found)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return [(int(i), int(j)) for i, j in distinct_rows(pairs).tolist()] if len(pairs) else []


def _labelled(steps: List[Tuple[str, int, int, int, int]], groups: List[List[int]]) -> List[Span]:
    """One :class:`Span` per group of steps: from its first start to its last end, walked from
    the step that ended last (the first of them in rank order). Named after its step, when
    that step's spans form one group; else after the step and its ranks,
    ``ProfilerStep#N (rank R)`` or ``ProfilerStep#N (ranks R1, R2)``, and a name that would
    repeat gets `` [2]``, `` [3]``, … in time order."""
    groups = sorted(groups, key=lambda g: (min(steps[i][1] for i in g), max(steps[i][2] for i in g), min(g)))
    count: Dict[str, int] = {}
    for g in groups:
        count[steps[g[0]][0]] = count.get(steps[g[0]][0], 0) + 1
    seen: Dict[str, int] = {}
    out = []
    for g in groups:
        name = steps[g[0]][0]
        if count[name] > 1:
            ranks = sorted({steps[i][3] for i in g})
            name += f" (rank {ranks[0]})" if len(ranks) == 1 else f" (ranks {', '.join(map(str, ranks))})"
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name} [{seen[name]}]"
        first = min(g, key=lambda i: (steps[i][1], i))
        last = max(g, key=lambda i: (steps[i][2], -i))
        out.append(Span(label, steps[first][1], steps[last][2], (steps[last][3], steps[last][4]),
                        (steps[first][3], steps[first][4])))
    return out


def disjoint(spans: List[Span]) -> List[Span]:
    """``spans`` made disjoint, deterministically: taken in order of their ends (then starts,
    then names), a window that begins before the one taken before it ended begins where that
    one ended instead (and ``whatif`` replays it from there, on the thread that one ended on).
    Each window keeps its end, and the path that decided it; the time two windows shared
    stays with the one that ended first. A window left with no time (its steps took none, or
    the window before took all of it) is dropped."""
    out: List[Span] = []
    for w in sorted(spans, key=lambda w: (w.end_ns, w.start_ns, w.name)):
        if out and w.start_ns < out[-1].end_ns:
            w = w._replace(start_ns=out[-1].end_ns, begins=out[-1].at)
        if w.end_ns > w.start_ns:
            out.append(w)
    return out


def critical_path(job: JobTimeline, edges: FrozenSet[str] = EDGES) -> List[Window]:
    """[:class:`Window`] of the job (:class:`~tracemerge.analysis.job_timeline.JobTimeline`), in time order."""
    out = []
    pool = pool_threads(job)
    for span in windows(job):
        segments = walk(job, job.thread(*span.at), span.start_ns, span.end_ns, edges, pool)
        w = Window(window=span.name, start_ns=span.start_ns, end_ns=span.end_ns, segments=segments)
        for s in segments:
            w.by_rank[s.rank] = w.by_rank.get(s.rank, 0) + s.end_ns - s.start_ns
            w.by_kind[s.kind] = w.by_kind.get(s.kind, 0) + s.end_ns - s.start_ns
        out.append(w)
    return out


def walk(job: JobTimeline, th: Thread, wstart: int, wend: int, edges: frozenset = EDGES,
         pool: Optional[frozenset] = None) -> list:
    """The segments of the path ending on thread ``th`` at ``wend``, back to ``wstart``.
    ``pool``: the (rank, thread index) of pool threads (:func:`pool_threads`; found when None)."""
    w = Walker(job, edges, wstart, th, wend, pool_threads(job) if pool is None else pool)
    while w.t > wstart:
        w.step()
    w.back.reverse()
    return [Segment(*s) for s in w.back]


def pool_threads(job: JobTimeline) -> frozenset:
    """The (rank, thread index) of threads that run work handed to them: RPC server threads
    (they ran a served call) and, on ranks that serve RPCs, every thread but the process's
    main thread and those that ran a step (RPC agent threads running future callbacks, which
    may issue RPCs of their own). A pool thread that runs nothing is idle, not busy with
    untraced work of its own."""
    serving = {(rank, int(job.ranks[rank].span_thread[span])) for rank, span in job.span_call}
    callees = set(job.call_callee)
    stepping = {(rank, th) for rank, tl in job.ranks.items() for _, _, _, th in tl.steps}
    helpers = {(rank, i) for rank in callees if rank in job.ranks
               for i, th in enumerate(job.ranks[rank].threads) if not th.main and (rank, i) not in stepping}
    return frozenset(serving | helpers | runloop_threads(job))


def runloop_threads(job: JobTimeline) -> frozenset:
    """The (rank, thread index) of threads that ran only collectives' execution spans
    (:func:`~tracemerge.analysis.job_timeline.runloops`): they run what the issuing threads enqueue."""
    return frozenset((rank, i) for rank, tl in job.ranks.items() for i in runloops(tl))


class Walker:
    """One walk back in time: where it is (``th``, ``t``) and the segments emitted so far,
    newest first. :meth:`step` moves it back by one edge; each edge kind is its own method,
    which either takes the walk somewhere earlier (returning True) or declines."""

    def __init__(self, job: JobTimeline, edges: frozenset, wstart: int, th: Thread, t: int, pool: frozenset):
        self.job, self.edges, self.wstart, self.pool = job, edges, wstart, pool
        self.th, self.t = th, t
        self.back: list = []
        self.last_t: Optional[int] = None
        self.stall = 0

    # -- output -------------------------------------------------------------------------
    def emit(self, th: Thread, name: str, kind: str, lo: int, hi: int) -> None:
        """Put [lo, hi) of ``th`` on the path (clamped to the window's start)."""
        lo = max(lo, self.wstart)
        if hi <= lo:
            return
        back = self.back
        if back and back[-1][5] == hi and back[-1][:4] == [th.rank, th.tid, name, kind]:
            back[-1][4] = lo  # the same thing continues further back
        else:
            back.append([th.rank, th.tid, name, kind, lo, hi])

    def go(self, th: Thread, t: int) -> bool:
        self.th, self.t = th, t
        return True

    # -- one step -------------------------------------------------------------------------
    def step(self) -> None:
        t = self.t
        self.stall = self.stall + 1 if t == self.last_t else 0
        self.last_t = t
        # after many steps without moving back, dependencies are ignored for one step, so
        # the walk always ends (clock error can make edges point at the same instant)
        free = self.stall < _STALL
        p = self.piece()
        if free and self.resume_edge(p):
            return
        if free:
            p.lower = self.earlier_wait_end(p)
        if p.owner < 0:
            self.gap(p, free)
            return
        if free and p.callee == p.owner and "continuation" in self.edges and self.continuation_edge(p):
            return
        self.thread_order(p, free)

    def piece(self) -> "Piece":
        """What the thread was running just before ``t``."""
        th, t, job = self.th, self.t, self.job
        k = bisect_left(th.bounds, t) - 1
        lower, owner = (th.bounds[k], th.owner[k]) if k >= 0 else (_NEG, -1)
        rank = th.rank
        ostart = job.span_start[rank][owner] if owner >= 0 else _NEG
        callee = job.callee_of[rank][owner] if owner >= 0 else -1
        return Piece(k=k, lower=lower, owner=owner, ostart=ostart, callee=callee)

    # -- edges ------------------------------------------------------------------------------
    def resume_edge(self, p: "Piece") -> bool:
        """A wait of this thread that ends exactly here, begun inside the running span: the
        thread resumed when that RPC or collective completed."""
        th, t = self.th, self.t
        we = th.wait_end
        for w in range(bisect_left(we, t), bisect_right(we, t)):
            if th.wait_start[w] < t and (p.ostart <= th.wait_start[w] or wraps_wait(self.job, th, p.owner, t)):
                if th.wait_kind[w] == RPC_WAIT:
                    return self.rpc_edge(th.wait_ref[w], th.wait_start[w])
                if th.wait_kind[w] == COLLECTIVE_WAIT:
                    return self.collective_edge(th.wait_ref[w], th.wait_start[w])
        return False

    def rpc_edge(self, call: int, ws: int) -> bool:
        """The call completed at ``t``: its response left the callee at t3 (``RPC transfer``),
        so the path goes on in the callee span at t3; without the callee's side, the whole
        wait is transfer on this thread."""
        job, th, t = self.job, self.th, self.t
        name = job.call_name[call]
        where = job.callee_span.get(call)
        if "rpc" in self.edges and where is not None and job.has[2, call]:
            x = job.thread(where[0], int(job.ranks[where[0]].span_thread[where[1]]))
            nt = min(int(job.t_ref[2, call]), t)
            self.emit(x, name, TRANSFER, nt, t)
            return self.go(x, nt)
        self.emit(th, name, TRANSFER, ws, t)
        return self.go(th, ws)

    def collective_edge(self, coll: int, ws: int) -> bool:
        """The collective completed at ``t``: this rank waited from the last rank's arrival,
        and the path goes on at the last arriver's thread at its arrival."""
        job, th, t = self.job, self.th, self.t
        name = job.coll_op[coll]
        last = job.coll_last[coll]
        at = job.coll_thread.get((coll, last[0])) if last is not None else None
        if "collective" in self.edges and last is not None and at is not None and last[0] != th.rank:
            lo = max(min(last[1], t), ws)
            self.emit(th, name, COLLECTIVE, lo, t)
            return self.go(job.thread(last[0], at), lo)
        self.emit(th, name, COLLECTIVE, ws, t)
        return self.go(th, ws)

    def earlier_wait_end(self, p: "Piece") -> int:
        """The start of the stretch of this piece the walk covers now: an earlier wait begun
        inside the running span that ended within the piece cuts it there (the next step
        resumes from that wait)."""
        th, t, lower = self.th, self.t, p.lower
        we = th.wait_end
        j = bisect_left(we, t) - 1
        for _ in range(64):
            if j < 0 or we[j] <= lower:
                break
            if th.wait_start[j] >= p.ostart:   # begun inside the span (or as it opened)
                return we[j]
            j -= 1
        return lower

    def gap(self, p: "Piece", free: bool) -> None:
        """The thread ran no span just before ``t``. A pool thread was idle: the path does not
        go through that; it follows what woke the thread (:meth:`wake_edge`). A thread of the
        job's own (a caller's) was busy with untraced work."""
        th, t = self.th, self.t
        c = self.served_call_starting()
        if free and c is not None and self.served_start_edge(c, self.job.name_of(th.rank, c)):
            return
        if (th.rank, th.index) not in self.pool:
            self.emit(th, UNTRACED, COMPUTE, p.lower, t)
            self.go(th, max(p.lower, self.wstart))
            return
        if free and self.wake_edge(p):
            return
        lo = max(p.lower, self.wstart)
        if p.k < 0 or lo == self.wstart:
            # nothing ran before on the thread, or since the window's start: idle from there
            self.emit(th, IDLE, IDLE, lo, t)
        else:
            # nothing of the rank ran during the gap: what woke the thread is not in the trace
            self.emit(th, UNTRACED, COMPUTE, lo, t)
        self.go(th, lo)

    def served_call_starting(self) -> Optional[int]:
        """The callee span that starts exactly at ``t`` on the thread (the walk arrived at a
        served call's start from elsewhere), or None."""
        job, th, t = self.job, self.th, self.t
        k = bisect_right(th.bounds, t) - 1
        if k < 0 or th.bounds[k] != t or th.owner[k] < 0:
            return None
        c = job.callee_of[th.rank][th.owner[k]]
        return c if c >= 0 and job.span_start[th.rank][c] == t else None

    def wake_edge(self, p: "Piece") -> bool:
        """An idle pool thread started work at ``t``: it was handed that work when an RPC its
        rank had called completed during the gap (a future's callbacks run on the thread
        that completes it) — the latest such completion; else by the thread of its rank
        whose work ended last before ``t``."""
        job, th, t = self.job, self.th, self.t
        ends, calls = job.rank_completions(th.rank)
        i = bisect_right(ends, t) - 1
        if i >= 0 and ends[i] > p.lower and "rpc" in self.edges:
            # the callback's dispatch is part of delivering the response
            self.emit(th, job.call_name[calls[i]], TRANSFER, ends[i], t)
            self.t = ends[i]
            return self.rpc_edge(calls[i], ends[i])
        opened = open_async_span(job, th.rank, t)
        if opened is not None:
            # work handed over by an untraced step of an async_execution function still in
            # progress (an RRef proxy's type lookup): that served call's time
            c, y = opened
            k = bisect_right(y.bounds, t) - 1
            since = max(min(y.bounds[k], t) if k >= 0 else t, job.span_start[th.rank][c])
            self.emit(y, job.name_of(th.rank, c), EXECUTION, since, t)
            return self.go(y, since)
        found = _completer(job, th, t, p.lower, window=None)
        if found is not None:
            y, y_end = found
            self.emit(th, UNTRACED, COMPUTE, y_end, t)
            return self.go(y, y_end)
        return False

    def continuation_edge(self, p: "Piece") -> bool:
        """The walk is in a served call's own time. If the span is an ``async_execution``
        function's, it ended when the future it returned completed: when the last of the
        RPCs it issued completed (their waits are on its thread, begun inside it), then
        whatever callback ran on the thread that completed it. Without RPCs of its own (its
        future completed by other work of the rank), the thread whose work ended last, within
        CONTINUATION_NS, is taken as the completer."""
        job, th, t = self.job, self.th, self.t
        c = p.callee
        rank = th.rank
        span_async = c in job.ranks[rank].async_spans
        nested = self.last_nested_call(c) if span_async else None
        if nested is not None:
            call, done = nested
            name = job.name_of(rank, c)
            found = _completer(job, th, t, done, window=None)
            if found is not None and found[1] < t:
                y, y_end = found
                self.emit(th, name, EXECUTION, y_end, t)
                return self.go(y, y_end)
            self.emit(th, name, EXECUTION, done, t)
            return self.go(th, done)
        ends = job.span_end[rank]
        if t - p.lower > CONTINUATION_NS and t >= ends[c] - CONTINUATION_NS:
            found = _completer(job, th, t, p.lower, window=CONTINUATION_NS)
            if found is not None:
                y, y_end = found
                self.emit(th, job.name_of(rank, c), EXECUTION, y_end, t)
                return self.go(y, y_end)
        return False

    def last_nested_call(self, c: int) -> Optional[tuple]:
        """(call, completion) of the RPC issued inside async callee span ``c`` that completed
        last before ``t`` (:func:`nested_calls`), or None."""
        found = nested_calls(self.job, self.th, c, self.t)
        return max(found, key=lambda cw: cw[1]) if found else None

    def thread_order(self, p: "Piece", free: bool) -> None:
        """The running span's work is on the path, back to the piece's start; at the start
        of a served call, the request it waited for (:meth:`served_start_edge`)."""
        job, th, t = self.job, self.th, self.t
        rank = th.rank
        name = job.name_of(rank, p.owner)
        kind = EXECUTION if p.callee >= 0 else COMPUTE
        lower = p.lower
        at_callee = p.callee >= 0 and job.span_start[rank][p.callee] >= lower and free
        if at_callee:
            lower = job.span_start[rank][p.callee]
        lower = max(lower, self.wstart)
        self.emit(th, name, kind, lower, t)
        self.go(th, lower)
        if at_callee and lower > self.wstart:
            self.served_start_edge(p.callee, name)

    def served_start_edge(self, c: int, name: str) -> bool:
        """A served call started at ``t``: when its request arrived (``callee queueing``
        from t1 + the pair's fastest delivery, ``RPC transfer`` before that from the
        caller's send), unless the thread was still busy with earlier work then — that work
        is what the call waited for (the ``queue`` edge)."""
        job, th, t = self.job, self.th, self.t
        call = job.span_call.get((th.rank, c))
        if call is None or "rpc" not in self.edges or not job.has[0, call]:
            return False
        k = bisect_left(th.bounds, t) - 1
        busy_until = t if k >= 0 and th.owner[k] >= 0 else (th.bounds[k] if k >= 1 else _NEG)
        t1 = int(job.t_ref[0, call])
        arrival = min(max(t1 + int(job.floor[call]), t1), t)
        caller = job.caller_span.get(call)
        if "queue" in self.edges and busy_until > arrival:
            self.emit(th, name, QUEUEING, busy_until, t)
            return self.go(th, busy_until)
        if caller is None:
            return False
        y = job.thread(caller[0], int(job.ranks[caller[0]].span_thread[caller[1]]))
        self.emit(th, name, QUEUEING, arrival, t)
        self.emit(y, job.call_name[call], TRANSFER, min(t1, arrival), arrival)
        return self.go(y, min(t1, arrival))


def wraps_wait(job: JobTimeline, th: Thread, owner: int, t: int) -> bool:
    """Whether span ``owner`` of ``th``, begun after a wait that ends at ``t``, only wraps that
    wait (it ends within WAKE_NS of ``t``): the thread was blocked in it, not working — a
    span around ``fut.wait()``, ``wait_all`` or a collective's ``wait()``. A span that runs on
    well after the completion was working while the call was in flight."""
    return owner >= 0 and job.span_end[th.rank][owner] - t <= WAKE_NS


def nested_calls(job: JobTimeline, th: Thread, c: int, t: int) -> list:
    """[(call, completion)] of the RPCs callee span ``c`` (on ``th``) issued that completed
    by ``t``: those issued on its own thread inside it (their waits are there), and those its
    rank issued while it was open from a pool thread running no span — a callback the span
    chained, as an RRef proxy's ``rpc_async()`` sends its call once the RRef's type is known."""
    rank = th.rank
    start = job.span_start[rank][c]
    out = []
    we = th.wait_end
    j = bisect_right(we, t) - 1
    while j >= 0 and we[j] > start:
        if th.wait_kind[j] == RPC_WAIT and th.wait_start[j] >= start:
            out.append((th.wait_ref[j], we[j]))
        j -= 1
    ends, calls = job.rank_completions(rank)
    i = bisect_right(ends, t) - 1
    mine = {call for call, _ in out}
    while i >= 0 and ends[i] > start:
        call = calls[i]
        t1 = int(job.t_ref[0, call])
        where = job.caller_span.get(call)
        if call not in mine and where is not None and job.has[0, call] and t1 >= start:
            y = job.thread(rank, int(job.ranks[rank].span_thread[where[1]]))
            k = bisect_right(y.bounds, t1) - 1
            if y is not th and (k < 0 or y.owner[k] < 0) and not _is_main(job, y):
                out.append((call, ends[i]))
        i -= 1
    return out


def open_async_span(job: JobTimeline, rank: int, t: int) -> Optional[tuple]:
    """(span, thread) of the ``async_execution`` callee span of ``rank`` open at ``t`` that
    started last, or None."""
    tl = job.ranks[rank]
    starts, ends = job.span_start[rank], job.span_end[rank]
    best = None
    for c in tl.async_spans:
        if starts[c] < t < ends[c] and (best is None or starts[c] > starts[best]):
            best = c
    if best is None:
        return None
    return best, job.thread(rank, int(tl.span_thread[best]))


def _is_main(job: JobTimeline, y: Thread) -> bool:
    return bool(job.ranks[y.rank].threads[y.index].main)


@dataclass
class Piece:
    """What a thread ran just before the walk's time: piece ``k`` of the thread, from
    ``lower``, run by span ``owner`` (-1: none) that started at ``ostart``, inside served
    call ``callee`` (-1: none)."""

    k: int
    lower: int
    owner: int
    ostart: int
    callee: int


def _completer(job: JobTimeline, th: Thread, t: int, lower: int, window: Optional[int]) -> Optional[tuple]:
    """(thread, time) of the other thread of ``th``'s rank whose last work before ``t``
    ended latest, after ``lower`` (and, with ``window``, within ``window`` of ``t``); else None."""
    callee_of = job.callee_of[th.rank]
    best = None
    for y in job.rank_threads(th.rank):
        if y is th or not y.bounds:
            continue
        k = bisect_left(y.bounds, t) - 1
        if k < 0:
            continue
        o = y.owner[k]
        if o >= 0 and callee_of[o] != o:
            end = t                       # running an op at t
        elif k >= 1 and y.owner[k - 1] >= 0:
            end = y.bounds[k]             # idle, or in a served call's own time, since its last op
        else:
            continue
        if (window is None or end >= t - window) and end > lower and (best is None or end > best[1]):
            best = (y, end)
    return best


def totals(windows_: List[Window]) -> Tuple[Dict[int, int], Dict[str, int]]:
    """({rank: ns}, {kind: ns}) over all windows."""
    by_rank: Dict[int, int] = {}
    by_kind: Dict[str, int] = {}
    for w in windows_:
        for r, v in w.by_rank.items():
            by_rank[r] = by_rank.get(r, 0) + v
        for k, v in w.by_kind.items():
            by_kind[k] = by_kind.get(k, 0) + v
    return by_rank, by_kind
