"""The cross-rank critical path: the chain of dependent work that decided when each window ended.

A window is one ``ProfilerStep#N`` (from the first rank's start of that step to the last
rank's end, on the reference clock) when the trace has steps, else the whole trace. Its
path is found by walking back in time from the window's end, on the thread whose step (or
whose last span) ended last, as Scalasca finds a critical path: at each moment the walk
asks what the thread it is on was doing just before, and follows whatever made that
moment late.

- **Thread order.** The thread ran a span (a piece of :mod:`~tracemerge.analysis.timeline`):
  that work is on the path (``compute``, or ``callee execution`` inside a served call);
  time on a thread in no span is untraced work of that thread (``compute``, named
  ``(untraced)``).
- **RPC edges.** The thread resumed when an RPC it called completed (the end t4 of a
  wait falls exactly where the walk is): the response travelled from the callee's t3
  (``RPC transfer``), before that the callee span ran (``callee execution``), and it
  started when the request was delivered (``callee queueing`` from the estimated
  arrival t1 + the fastest delivery between the two ranks, ``RPC transfer`` before that,
  from the caller's send t1) — unless the callee's thread was still busy with earlier
  work when the request arrived: then that earlier work is what the call waited for
  (``queue`` edge: thread order on the callee, the gap is ``callee queueing``).
- **async_execution continuations.** A callee span that ended after a long stretch of its
  own time (its thread had returned the future and ran nothing of it) ended when another
  thread of the same rank completed the future: the thread whose last work ended latest,
  within CONTINUATION_NS before, is followed.
- **Collectives.** A rank that resumed when a collective completed waited from the last
  rank's arrival (``waiting in a collective``); before that, the path is on the last
  arriver, at its arrival.

Segments tile the window from its start to its end; each is (rank, tid, name, kind,
start_ns, end_ns) on the reference clock. Removing an edge kind from ``edges`` shows what
the path would be without it (tests use this to check that each edge is taken).
"""

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from tracemerge.analysis.job_timeline import COLLECTIVE_WAIT, RPC_WAIT, JobTimeline, Thread

COMPUTE = "compute"
TRANSFER = "RPC transfer"
QUEUEING = "callee queueing"
EXECUTION = "callee execution"
COLLECTIVE = "waiting in a collective"
KINDS = (COMPUTE, TRANSFER, QUEUEING, EXECUTION, COLLECTIVE)
UNTRACED = "(untraced)"

EDGES = frozenset(("rpc", "queue", "continuation", "collective"))
# How close before a callee span's end another thread of its rank must have worked for the
# end to be taken as that thread completing the span's future (async_execution), and how
# long the span's own untraced tail must be for the question to arise.
CONTINUATION_NS = 200_000
WHOLE_TRACE = "trace"
_NEG = -(1 << 62)
_STALL = 64   # steps without moving back in time before dependencies are ignored for one step


@dataclass
class Segment:
    rank: int
    tid: object
    name: str
    kind: str
    start_ns: int
    end_ns: int


@dataclass
class Window:
    window: str
    start_ns: int
    end_ns: int
    segments: list = field(default_factory=list)    # [Segment] in time order
    by_rank: dict = field(default_factory=dict)     # {rank: ns on the path}
    by_kind: dict = field(default_factory=dict)     # {kind: ns on the path}

    def as_dict(self) -> dict:
        return {"window": self.window, "start_ns": self.start_ns, "end_ns": self.end_ns,
                "segments": [{"rank": s.rank, "tid": s.tid, "name": s.name, "kind": s.kind,
                              "start_ns": s.start_ns, "end_ns": s.end_ns} for s in self.segments]}


def windows(job: JobTimeline) -> list:
    """[(name, start_ns, end_ns, (rank, thread index) the walk starts on)]: one per
    ProfilerStep#N over all ranks, else one for the whole trace."""
    steps: dict = {}
    for rank, tl in job.ranks.items():
        for name, start, end, thread in tl.steps:
            s = steps.setdefault(name, [start, end, (rank, thread)])
            s[0] = min(s[0], start)
            if end > s[1]:
                s[1], s[2] = end, (rank, thread)
    if steps:
        return sorted(((name, s, e, at) for name, (s, e, at) in steps.items()), key=lambda w: (w[1], w[2]))
    threads = [th for th in job.threads.values() if th.bounds or th.wait_end]
    if not threads:
        return []
    last = max(threads, key=lambda th: th.last_ns)
    return [(WHOLE_TRACE, min(th.first_ns for th in threads), last.last_ns, (last.rank, last.index))]


def critical_path(job: JobTimeline, edges: frozenset = EDGES) -> list:
    """[:class:`Window`] of the job (:class:`~tracemerge.analysis.job_timeline.JobTimeline`), in time order."""
    out = []
    for name, start, end, at in windows(job):
        segments = walk(job, job.thread(*at), start, end, edges)
        w = Window(window=name, start_ns=start, end_ns=end, segments=segments)
        for s in segments:
            w.by_rank[s.rank] = w.by_rank.get(s.rank, 0) + s.end_ns - s.start_ns
            w.by_kind[s.kind] = w.by_kind.get(s.kind, 0) + s.end_ns - s.start_ns
        out.append(w)
    return out


def walk(job: JobTimeline, th: Thread, wstart: int, wend: int, edges: frozenset = EDGES) -> list:
    """The segments of the path ending on thread ``th`` at ``wend``, back to ``wstart``."""
    back: list = []

    def emit(rank, tid, name, kind, lo, hi):
        lo = max(lo, wstart)
        if hi <= lo:
            return
        if back and back[-1][4] == hi and back[-1][:4] == (rank, tid, name, kind):
            back[-1][4] = lo  # the same thing continues further back
        else:
            back.append([rank, tid, name, kind, lo, hi])

    rpc, queue, cont, coll = ("rpc" in edges), ("queue" in edges), ("continuation" in edges), ("collective" in edges)
    t, last_t, stall = wend, None, 0
    while t > wstart:
        stall = stall + 1 if t == last_t else 0
        last_t = t
        free = stall < _STALL
        rank = th.rank
        starts, ends, callee_of = job.span_start[rank], job.span_end[rank], job.callee_of[rank]
        k = bisect_left(th.bounds, t) - 1
        lower, o = (th.bounds[k], th.owner[k]) if k >= 0 else (_NEG, -1)
        ostart = starts[o] if o >= 0 else _NEG
        # a wait of this thread that ends exactly here, begun inside the running span: the thread resumed
        we = th.wait_end
        if we and free:
            hit = None
            for w in range(bisect_left(we, t), bisect_right(we, t)):
                if ostart < th.wait_start[w] < t:
                    hit = w
                    break
            if hit is not None:
                kind, ref, ws = th.wait_kind[hit], th.wait_ref[hit], th.wait_start[hit]
                if kind == RPC_WAIT:
                    name = job.call_name[ref]
                    where = job.callee_span.get(ref)
                    if rpc and where is not None and job.has[2, ref]:
                        x = job.thread(where[0], int(job.ranks[where[0]].span_thread[where[1]]))
                        nt = min(int(job.t_ref[2, ref]), t)
                        emit(x.rank, x.tid, name, TRANSFER, nt, t)
                        th, t = x, nt
                    else:
                        emit(rank, th.tid, name, TRANSFER, ws, t)
                        t = ws
                    continue
                if kind == COLLECTIVE_WAIT:
                    name = job.coll_op[ref]
                    last = job.coll_last[ref]
                    at = job.coll_thread.get((ref, last[0])) if last is not None else None
                    if coll and at is not None and last[0] != rank:
                        lo = max(min(last[1], t), ws)
                        emit(rank, th.tid, name, COLLECTIVE, lo, t)
                        th, t = job.thread(last[0], at), lo
                    else:
                        emit(rank, th.tid, name, COLLECTIVE, ws, t)
                        t = ws
                    continue
            # an earlier wait begun inside the running span ended within this piece: stop there
            j = bisect_left(we, t) - 1
            for _ in range(64):
                if j < 0 or we[j] <= lower:
                    break
                if th.wait_start[j] > ostart:
                    lower = we[j]
                    break
                j -= 1
        c = callee_of[o] if o >= 0 else -1
        name = job.name_of(rank, o) if o >= 0 else UNTRACED
        kind = EXECUTION if c >= 0 else COMPUTE
        if (cont and free and c == o and c >= 0 and t - lower > CONTINUATION_NS
                and t >= ends[c] - CONTINUATION_NS):
            found = _completer(job, th, t, lower)
            if found is not None:
                y, y_end = found
                emit(rank, th.tid, name, kind, y_end, t)
                th, t = y, y_end
                continue
        at_callee = c >= 0 and starts[c] >= lower and free
        if at_callee:
            lower = starts[c]
        lower = max(lower, wstart)
        emit(rank, th.tid, name, kind, lower, t)
        t = lower
        if not at_callee or t <= wstart:
            continue
        call = job.span_call.get((rank, c))
        if call is None or not rpc or not job.has[0, call]:
            continue
        # the served call started: when its request arrived, unless the thread was still busy
        k = bisect_left(th.bounds, t) - 1
        busy_until = t if k >= 0 and th.owner[k] >= 0 else (th.bounds[k] if k >= 1 else _NEG)
        t1 = int(job.t_ref[0, call])
        arrival = min(max(t1 + int(job.floor[call]), t1), t)
        caller = job.caller_span.get(call)
        if queue and busy_until > arrival:
            emit(rank, th.tid, name, QUEUEING, busy_until, t)
            t = busy_until
        elif caller is not None:
            y = job.thread(caller[0], int(job.ranks[caller[0]].span_thread[caller[1]]))
            emit(rank, th.tid, name, QUEUEING, arrival, t)
            emit(y.rank, y.tid, job.call_name[call], TRANSFER, min(t1, arrival), arrival)
            th, t = y, min(t1, arrival)
    back.reverse()
    return [Segment(*s) for s in back]


def _completer(job, th, t, lower):
    """(thread, time) of the other thread of ``th``'s rank whose last work before ``t``
    ended latest, if within CONTINUATION_NS of ``t`` and after ``lower``; else None."""
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
        if end >= t - CONTINUATION_NS and end > lower and (best is None or end > best[1]):
            best = (y, end)
    return best


def totals(windows_: list) -> tuple:
    """({rank: ns}, {kind: ns}) over all windows."""
    by_rank: dict = {}
    by_kind: dict = {}
    for w in windows_:
        for r, v in w.by_rank.items():
            by_rank[r] = by_rank.get(r, 0) + v
        for k, v in w.by_kind.items():
            by_kind[k] = by_kind.get(k, 0) + v
    return by_rank, by_kind
