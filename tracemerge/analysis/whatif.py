r"""What if a span ran k× faster? Each window's time predicted by replaying the job's dependency graph.

Graph: points (*) cut every thread's timeline; each point's new time is the latest of its
edges (->), each the source's new time plus the edge's weight::

    thread    *--busy d-->*--blocked-->*--busy d'-->*     thread order: + d (÷ k inside a sped-up span),
                                                          + 0 across a wait, the gap's length if idle
    caller    * t1 send ..........................> * t4  completion: callee span's end + return transfer
                \ delivery - queued       return /
    callee       `--> * span start ==served span==> * span end
    rank A    * arrival --.
    rank B    * arrival ---+--> * completion (each rank): the last arrival + measured time from it

Algorithm: for each window, take its points in measured time order (a cause is measured
before its effect, so every edge's source is replayed first; one that clock error puts
after keeps its measured time) and give each the maximum over its edges, each edge weight
capped at the measured time between its ends; points outside the window keep their
measured times. The window's predicted length runs from its start's new time to its end's;
the edges chosen, followed back from the end, are the new critical path. In detail:

The graph is the one the critical path walks (:mod:`~tracemerge.analysis.critical_path`),
made explicit: every thread's timeline is cut at its *points* — where the innermost span
changes, where a wait (an RPC from send to completion, a collective from arrival to
completion) begins or ends — and each point gets its new time as the latest of what it
waits for:

- **thread order**: the point before it on the thread, plus the time between them if the
  thread was busy then (a span ran, or untraced work of the job's own thread), divided by
  the speed-up where that time lies inside a sped-up span; plus nothing if the thread was
  blocked (in a wait that ends at this point, begun inside the running span) or idle (a
  pool thread running nothing, :func:`~tracemerge.analysis.critical_path.pool_threads`);
- **RPC edges**: a call's completion (t4) waits for its callee span's end plus the measured
  return transfer; a served call's start waits for the caller's send (t1) plus the measured
  delivery, less the time the request queued behind work the thread was busy with (which
  thread order accounts for);
- **collectives**: each rank's completion waits for every rank's arrival plus the measured
  time from the last arrival;
- **continuations**: an ``async_execution`` span ends after the nested RPCs it issued
  completed (their waits are on its thread, so thread order and the RPC edges carry it),
  and a pool thread that wakes from idle waits for the latest completion of an RPC its
  rank called during the gap (the future's callbacks run then).

Every measured edge weight is the measured time difference, so with no speed-up each point
keeps its measured time exactly; a speed-up moves what depends on the sped-up span earlier
by no more than the slack its other dependencies leave. Windows are those of the critical
path; the predicted window runs from its start's new time to its end's.
"""

import difflib
import heapq
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from tracemerge.algorithms.arrays import distinct
from tracemerge.analysis.critical_path import (
    COLLECTIVE,
    COMPUTE,
    CONTINUATION_NS,
    EXECUTION,
    QUEUEING,
    TRANSFER,
    UNTRACED,
    _completer,  # the walk's own rule for who completed a future
    nested_calls,
    open_async_span,
    pool_threads,
    windows,
    wraps_wait,
)
from tracemerge.analysis.job_timeline import COLLECTIVE_WAIT, RPC_WAIT, JobTimeline, Thread
from tracemerge.analysis.timeline import RankTimeline
from tracemerge.errors import UsageError

TOP = 5   # segments of each window's new path shown
MIN_FACTOR = 1e-3   # the slowest a speed-up may make a span: 1000x (the replay's times stay within 2**62 ns)
_NEVER = -(1 << 62)   # the time before a thread's first point


@dataclass(frozen=True)
class Speedup:
    """Spans named ``name`` (on ``rank``; None: every rank) take 1/``factor`` of their time
    (``factor`` inf: none)."""

    name: str
    rank: Optional[int]
    factor: float

    @classmethod
    def parse(cls, text: str) -> "Speedup":
        """``NAME@RANK=K`` or ``NAME=K``; K a positive number, 0 or ``inf`` (the span takes no time)."""
        head, sep, k = text.rpartition("=")
        if not sep or not head:
            raise ValueError(f"{text!r}: expected NAME[@RANK]=K")
        try:
            factor = float(k)
        except ValueError:
            raise ValueError(f"{text!r}: K must be a number, 0 or inf") from None
        if factor == 0:
            factor = math.inf
        if not factor > 0:
            raise ValueError(f"{text!r}: K must be positive (0 or inf: the span takes no time)")
        if factor < MIN_FACTOR:
            # a span K times slower: 5e-324 overflowed the replay, 1e-15 predicted 7e19 ns
            raise ValueError(f"{text!r}: K below {MIN_FACTOR:g} (a span more than {1 / MIN_FACTOR:g} times "
                             "slower) is beyond what the replay holds")
        name, at, rank = head.rpartition("@")
        if at and rank.lstrip("-").isdigit() and name:
            return cls(name=name, rank=int(rank), factor=factor)
        return cls(name=head, rank=None, factor=factor)

    def label(self) -> str:
        k = "inf" if math.isinf(self.factor) else f"{self.factor:g}"
        return f"{self.name}{'' if self.rank is None else f'@{self.rank}'}={k}"


def parse_all(texts: "list[str]") -> "list[Speedup]":
    """Each ``NAME[@RANK]=K`` of ``texts`` (:meth:`Speedup.parse`), one per span set: two that
    name the same spans (one name twice, or ``NAME=K`` beside ``NAME@R=K2``) are refused,
    since which K a span takes would be a guess (the smallest used to win silently).
    ValueError naming both as given."""
    parsed = [Speedup.parse(t) for t in texts]
    for i, a in enumerate(parsed):
        for j, b in enumerate(parsed[:i]):
            if a.name == b.name and (a.rank is None or b.rank is None or a.rank == b.rank):
                where = "on every rank" if a.rank is None and b.rank is None else \
                    f"on rank {a.rank if a.rank is not None else b.rank}"
                raise ValueError(f"{texts[j]!r} and {texts[i]!r} both name the spans {a.name!r} {where}; "
                                 "give one speed-up per span")
    return parsed


@dataclass
class Prediction:
    window: str
    measured_ns: int
    predicted_ns: int
    top: list = field(default_factory=list)   # [{"rank", "name", "kind", "ns"}] of the new path, largest first

    def as_dict(self) -> dict:
        return {"window": self.window, "measured_ns": self.measured_ns, "predicted_ns": self.predicted_ns,
                "top": self.top}


class Replay:
    """The job's points and edges, and their new times under some speed-ups."""

    def __init__(self, job: JobTimeline, speedups: list):
        self.job = job
        self.pool = pool_threads(job)
        self.keys = sorted(job.threads)
        self.times: dict = {}          # {thread key: sorted point times}
        self.base: dict = {}           # {thread key: id of its first point}
        extra = self._arrivals()
        n = 0
        for key in self.keys:
            th = job.threads[key]
            ts = sorted(set(th.bounds) | set(th.wait_start) | set(th.wait_end) | extra.get(key, set()))
            self.times[key], self.base[key] = ts, n
            n += len(ts)
        self._sped_by_key = self._sped_spans(job, speedups)
        self.sped = {key: self._factors(key) for key in self._sped_by_key}
        self.measured: list = [t for key in self.keys for t in self.times[key]]   # by point id
        self.new: list = list(self.measured)
        self.pred: list = [None] * n   # (source id, (rank, name, kind)) of the edge that set each point
        self.order = sorted((t, self.base[key] + i, key, i) for key in self.keys for i, t in enumerate(self.times[key]))
        self.order_t = [o[0] for o in self.order]

    # -- points -------------------------------------------------------------------------------
    def point(self, key: tuple, t: int) -> Optional[int]:
        """The id of the point of thread ``key`` at ``t`` (the first at or after it)."""
        ts = self.times.get(key)
        if not ts:
            return None
        i = bisect_left(ts, t)
        return self.base[key] + min(i, len(ts) - 1)

    def _arrivals(self) -> dict:
        """Collective arrivals as points on the threads they were issued on (a rank whose
        collective never completed has no wait there, but others wait for its arrival)."""
        out: dict = {}
        for (coll, rank), index in self.job.coll_thread.items():
            at = self.job.coll_arrive.get((coll, rank))
            if at is not None:
                out.setdefault((rank, index), set()).add(at)
        return out

    @staticmethod
    def _sped_spans(job: JobTimeline, speedups: list) -> dict:
        """{thread key: [(start, end, factor)]} of the spans ``speedups`` name."""
        found: dict = {}
        for s in speedups:
            for rank, tl in job.ranks.items():
                if s.rank is not None and s.rank != rank:
                    continue
                for span in named_spans(tl, s.name):
                    key = (rank, int(tl.span_thread[span]))
                    found.setdefault(key, []).append((job.span_start[rank][span], job.span_end[rank][span], s.factor))
        return found

    def _factors(self, key: tuple) -> list:
        """The speed-up of each of thread ``key``'s intervals [point i, point i + 1): that of
        the innermost sped-up span open over it (the open one that started last), None
        outside any. One sweep over the points with a heap of the open spans, n log n."""
        found = self._sped_by_key.get(key)
        ts = self.times[key]
        if not found:
            return []
        found = sorted(found)
        out: list = [None] * len(ts)
        heap: list = []   # (-start, end, factor) of spans begun so far
        j = 0
        for i, t in enumerate(ts):
            while j < len(found) and found[j][0] <= t:
                heapq.heappush(heap, (-found[j][0], found[j][1], found[j][2]))
                j += 1
            while heap and heap[0][1] <= t:   # ended by t: not open over [t, next)
                heapq.heappop(heap)
            if heap:
                out[i] = heap[0][2]
        return out

    def _scaled(self, key: tuple, i: int, a: int, b: int) -> int:
        """The time [a, b) (thread ``key``'s interval from its point ``i``) takes with the
        speed-ups (inside a sped-up span: divided)."""
        factors = self.sped.get(key)
        f = factors[i] if factors else None
        if f is None:
            return b - a
        return 0 if math.isinf(f) else round((b - a) / f)

    # -- edges into one point ------------------------------------------------------------------
    def _interval(self, key: tuple, th: Thread, i: int, a: int, b: int) -> tuple:
        """(weight, label, busy) of thread ``key``'s time [a, b): its duration if it was busy
        (scaled), 0 if it was blocked in a wait ending at b or idle."""
        job = self.job
        k = bisect_right(th.bounds, a) - 1
        o = th.owner[k] if k >= 0 else -1
        ostart = job.span_start[th.rank][o] if o >= 0 else -(1 << 62)
        for w in range(bisect_left(th.wait_end, b), bisect_right(th.wait_end, b)):
            # blocked: in a wait ending here, begun inside the running span or wrapped by it
            if th.wait_start[w] <= a and (ostart <= th.wait_start[w] or wraps_wait(job, th, o, b)):
                return 0, None, False
        if o < 0:
            if key in self.pool:
                return 0, None, False
            return b - a, (th.rank, UNTRACED, COMPUTE), True
        kind = EXECUTION if job.callee_of[th.rank][o] >= 0 else COMPUTE
        return self._scaled(key, i, a, b), (th.rank, job.name_of(th.rank, o), kind), True

    def _deps(self, key: tuple, th: Thread, b: int, prev: Optional[int], busy: bool) -> list:
        """[(source id, weight, label)] of the cross-thread edges into thread ``key``'s point at ``b``."""
        out = []
        for w in range(bisect_left(th.wait_end, b), bisect_right(th.wait_end, b)):
            ref = th.wait_ref[w]
            if th.wait_kind[w] == RPC_WAIT:
                out.extend(self._completion(ref, b, th.wait_start[w], key))
            elif th.wait_kind[w] == COLLECTIVE_WAIT:
                out.extend(self._collective(ref, b, th.rank))
        c = self._served_start(th, b)
        if c is not None:
            out.extend(self._request(th, c, b, prev))
        elif not busy and prev is not None and key in self.pool and not out:
            out.extend(self._wake(th, prev, b) or self._handoff(key, prev, b))
        return out

    def _handoff(self, key: tuple, a: int, b: int) -> list:
        """An idle pool thread woken by nothing the records name (an untraced callback, such as
        an RRef's type lookup): the latest point of another thread of its rank during the gap
        handed the work over."""
        job = self.job
        opened = open_async_span(job, key[0], b)
        if opened is not None:
            # an untraced step of an async_execution function in progress handed it over
            c, y = opened
            src = self.point((y.rank, y.index), job.span_start[y.rank][c])
            ts = self.times[(y.rank, y.index)]
            i = bisect_right(ts, b) - 1
            if src is not None and i >= 0:
                at = max(ts[i], job.span_start[y.rank][c])
                return [(self.point((y.rank, y.index), at) or src, b - at, (y.rank, job.name_of(y.rank, c), EXECUTION))]
        best: Optional[tuple] = None
        for other in self.keys:
            if other[0] != key[0] or other == key:
                continue
            ts = self.times[other]
            i = bisect_right(ts, b) - 1
            if i >= 0 and ts[i] > a and (best is None or ts[i] > best[1]):
                best = (self.base[other] + i, ts[i])
        if best is None:
            return []
        return [(best[0], b - best[1], (key[0], UNTRACED, COMPUTE))]

    def _completion(self, call: int, b: int, ws: int, key: tuple) -> list:
        job = self.job
        where = job.callee_span.get(call)
        label = (job.call_callee[call], job.call_name[call], TRANSFER)
        if where is not None:
            rank, span = where
            src = self.point((rank, int(job.ranks[rank].span_thread[span])), job.span_end[rank][span])
            if src is not None:
                return [(src, b - min(job.span_end[rank][span], b), label)]
        src = self.point(key, ws)
        return [(src, b - ws, label)] if src is not None else []

    def _collective(self, coll: int, b: int, rank: int) -> list:
        job = self.job
        last = job.coll_last[coll]
        if last is None:
            return []
        out = []
        for q in job.coll_ranks[coll]:
            index = job.coll_thread.get((coll, q))
            at = job.coll_arrive.get((coll, q))
            if index is None or at is None:
                continue
            src = self.point((q, index), at)
            if src is not None:
                # every arrival plus the time the collective took after the last one
                out.append((src, max(b - last[1], 0), (rank, job.coll_op[coll], COLLECTIVE)))
        return out

    def _continuation(self, th: Thread, a: int, b: int) -> list:
        """Edges into the end ``b`` of an ``async_execution`` span whose own time [a, b) ends it:
        from the completion of each RPC it issued, plus the measured time after the last."""
        job = self.job
        k = bisect_right(th.bounds, a) - 1
        o = th.owner[k] if k >= 0 else -1
        rank = th.rank
        if o < 0 or job.callee_of[rank][o] != o or o not in job.ranks[rank].async_spans or job.span_end[rank][o] != b:
            return []
        found = nested_calls(job, th, o, b)
        if not found:
            # its future was completed by other work of the rank (a batching server's last
            # caller sets every waiting future): the thread whose work ended last, within
            # CONTINUATION_NS, as the critical path takes it
            got = _completer(job, th, b, a, window=CONTINUATION_NS) if b - a > CONTINUATION_NS else None
            if got is None:
                return []
            y, y_end = got
            src = self.point((y.rank, y.index), y_end)
            return [] if src is None else [(src, b - y_end, (rank, job.name_of(rank, o), EXECUTION))]
        last = max(done for _, done in found)
        out = []
        for call, _ in found:
            src = self._completion_point(call)
            if src is not None:
                out.append((src, b - last, (rank, job.name_of(rank, o), EXECUTION)))
        return out

    def _served_start(self, th: Thread, b: int) -> Optional[int]:
        """The served call whose callee span starts at ``b`` on ``th``, or None."""
        k = bisect_right(th.bounds, b) - 1
        if k < 0 or th.bounds[k] != b:
            return None
        c = self.job.callee_of[th.rank][th.owner[k]] if th.owner[k] >= 0 else -1
        if c < 0 or self.job.span_start[th.rank][c] != b:
            return None
        return self.job.span_call.get((th.rank, c))

    def _request(self, th: Thread, call: int, b: int, prev: Optional[int]) -> list:
        job = self.job
        caller = job.caller_span.get(call)
        if caller is None or not (job.has[0, call] and job.has[3, call]):
            return []
        rank, span = caller
        t1 = int(job.t_ref[0, call])
        src = self.point((rank, int(job.ranks[rank].span_thread[span])), t1)
        if src is None:
            return []
        # the part of the delivery spent queued behind the thread's earlier work is thread
        # order's — also when the thread went idle for a moment between that work and this
        # call (one server thread serving calls that all arrived at once)
        queued = max(0, (t1 if prev is None else prev) - (t1 + int(job.floor[call])))
        out = [(src, max(b - t1 - queued, 0), (th.rank, job.call_name[call], TRANSFER))]
        if queued and prev is not None and prev < b:
            # the request was waiting when that work ended: the thread's moment before it
            # took the call is its dispatch, which follows the work as measured
            last = self.point((th.rank, th.index), prev)
            if last is not None:
                out.append((last, b - prev, (th.rank, job.call_name[call], QUEUEING)))
        return out

    def _wake(self, th: Thread, a: int, b: int) -> list:
        ends, calls = self.job.rank_completions(th.rank)
        i = bisect_right(ends, b) - 1
        if i < 0 or ends[i] <= a:
            return []
        call = calls[i]
        src = self._completion_point(call)
        return [(src, b - ends[i], (th.rank, self.job.call_name[call], TRANSFER))] if src is not None else []

    def _completion_point(self, call: int) -> Optional[int]:
        job = self.job
        where = job.caller_span.get(call)
        if where is None:
            return None
        rank, span = where
        return self.point((rank, int(job.ranks[rank].span_thread[span])), int(job.t_ref[3, call]))

    # -- the replay ----------------------------------------------------------------------------
    def run(self, lo: int, hi: int) -> None:
        """The new time of every point of [``lo``, ``hi``] (a window), in measured time order;
        every point outside keeps its measured time. So a window is predicted from the job as
        measured up to its start — as a rerun of that step alone would run — and an edge from a
        point not yet replayed (clock error can order a cause after its effect) starts from
        its measured time."""
        order, at = self.order, self.order_t
        new, pred, measured = self.new, self.pred, self.measured
        for _, pid, key, i in order[bisect_left(at, lo):bisect_right(at, hi)]:
            th = self.job.threads[key]
            ts = self.times[key]
            t = ts[i]
            best, via = None, None
            busy = True
            cont: list = []
            if i > 0:
                w, label, busy = self._interval(key, th, i - 1, ts[i - 1], t)
                cont = self._continuation(th, ts[i - 1], t)
                if cont:   # the async span's tail waited for its nested calls, not its thread
                    w, label, busy = 0, None, False
                best, via = new[pid - 1] + w, (pid - 1, label)
            if i > 0:
                # an async span's tail is not a pool thread woken from idle
                deps = self._deps(key, th, t, ts[i - 1], busy or bool(cont)) + cont
            else:
                # a pool thread's first work ever was handed to it as any later work is
                deps = self._deps(key, th, t, _NEVER if key in self.pool else None, key not in self.pool)
            if i > 0 and not busy and not deps:
                # waiting for nothing known: the gap keeps its length
                best, via = new[pid - 1] + (t - ts[i - 1]), (pid - 1, (th.rank, UNTRACED, COMPUTE))
            for src, w, label in deps:
                # no edge takes longer than the measured time between its ends: with no
                # speed-up every point keeps its measured time, whatever the model adds
                w = min(w, t - measured[src])
                if best is None or new[src] + w > best:
                    best, via = new[src] + w, (src, label)
            new[pid] = t if best is None else best
            pred[pid] = via

    def reset(self, lo: int, hi: int) -> None:
        """Every point of [``lo``, ``hi``] back at its measured time."""
        order, at = self.order, self.order_t
        for _, pid, _, _ in order[bisect_left(at, lo):bisect_right(at, hi)]:
            self.new[pid] = self.measured[pid]
            self.pred[pid] = None

    def path(self, end: int, start_new: int) -> list:
        """The new critical path into point ``end``, back to ``start_new``: [(label, ns)]."""
        out = []
        p = end
        seen = 0
        while p is not None and self.pred[p] is not None and self.new[p] > start_new and seen < 1_000_000:
            src, label = self.pred[p]
            d = self.new[p] - max(self.new[src], start_new)
            if label is not None and d > 0:
                out.append((label, d))
            p = src
            seen += 1
        return out


def whatif(job: JobTimeline, speedups: list) -> list:
    """[:class:`Prediction`] per window of ``job``: measured and predicted time with ``speedups``
    ([:class:`Speedup`]), and the new critical path's largest segments. Each window is replayed
    from its measured start (what came before it is as measured), so a speed-up never makes a
    window longer, and the prediction of a step is what a rerun of that step would take."""
    replay = Replay(job, speedups)
    out = []
    for name, start, end, at, skey in windows(job):
        e = replay.point(at, end)
        if replay.point(skey, start) is None or e is None:
            continue
        replay.run(start, end)
        end_new = replay.new[e] + (end - replay.measured[e])
        totals: dict = {}
        for label, ns in replay.path(e, start):
            totals[label] = totals.get(label, 0) + ns
        replay.reset(start, end)
        top = sorted(totals.items(), key=lambda kv: -kv[1])[:TOP]
        out.append(Prediction(window=name, measured_ns=end - start, predicted_ns=end_new - start,
                              top=[{"rank": r, "name": n, "kind": k, "ns": ns} for (r, n, k), ns in top]))
    return out


def named_spans(tl: RankTimeline, name: str) -> list:
    """The spans of a rank's timeline that ``name`` names: by their own name, or as the
    ``<call>#remote`` callee span a paired builtin's op is (named as a wrapped call's is)."""
    codes = [i for i, n in enumerate(tl.names) if n == name]
    own = np.flatnonzero(np.isin(tl.span_name, codes)).tolist()
    return sorted(set(own).union(span for span, n in tl.callee_names.items() if n == name))


def span_names(job: JobTimeline) -> dict:
    """{rank: set of the names of its host spans} (what a speed-up can name), the callee
    span names of paired builtins' ops among them."""
    return {rank: {tl.names[c] for c in distinct(tl.span_name).tolist()} | set(tl.callee_names.values())
            for rank, tl in job.ranks.items()}


def check(job: JobTimeline, speedups: list, path: Optional[list] = None) -> list:
    """Raise :class:`~tracemerge.errors.UsageError` (exit 2) for a speed-up that names no span
    of the job — an unknown rank (naming the ranks there are) or a name no span of its ranks
    has (naming the closest names, difflib's); return a note for each whose spans all lie off
    every window's critical path (``path``: the critical path's windows; None: not checked):
    no work of the path runs inside any of them, so no window changes."""
    names = span_names(job)
    notes = []
    for s in speedups:
        if s.rank is not None and s.rank not in names:
            raise UsageError(f"--speedup {s.label()!r}: no rank {s.rank}; the ranks are "
                             f"{', '.join(map(str, sorted(names)))}")
        ranks = [s.rank] if s.rank is not None else sorted(names)
        if not any(s.name in names[r] for r in ranks):
            pool = sorted(set().union(*(names[r] for r in ranks)))
            # names holding what was typed (an RPC's span is named after its function), then
            # the closest by difflib's ratio
            close = [n for n in pool if s.name in n][:3]
            close += [n for n in difflib.get_close_matches(s.name, pool, n=3, cutoff=0.5) if n not in close]
            where = f"on rank {s.rank}" if s.rank is not None else "on any rank"
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            elsewhere = [r for r in sorted(names) if r not in ranks and s.name in names[r]]
            if elsewhere:
                hint += f" (spans of that name are on rank {', '.join(map(str, elsewhere))})"
            raise UsageError(f"--speedup {s.label()!r}: no span named {s.name!r} {where}{hint}")
        if path is not None and not _meets_path(job, s, path):
            notes.append(f"--speedup {s.label()!r}: no span it names lies on a window's critical path, "
                         f"so no window changes")
    return notes


def _meets_path(job: JobTimeline, s: Speedup, path: list) -> bool:
    """Whether work on ``path`` (compute or callee execution) runs inside a span ``s`` names."""
    work: dict = {}
    for w in path:
        for seg in w.segments:
            if seg.kind in (COMPUTE, EXECUTION):
                work.setdefault((seg.rank, seg.tid), []).append((seg.start_ns, seg.end_ns))
    found = Replay._sped_spans(job, [s])
    for (rank, index), spans in found.items():
        segs = sorted(work.get((rank, job.ranks[rank].threads[index].tid), ()))
        ends = [e for _, e in segs]
        for a, b, _ in spans:
            i = bisect_right(ends, a)
            if i < len(segs) and segs[i][0] < b:
                return True
    return False


def as_json(predictions: list, speedups: list) -> dict:
    """``{"speedups": [labels], "windows": [{window, measured_ns, predicted_ns, top}]}``."""
    return {"speedups": [s.label() for s in speedups], "windows": [p.as_dict() for p in predictions]}


def table(predictions: list, speedups: list) -> str:
    """One row per window (measured, predicted, change, in ms), then each window's new path's largest segments."""
    lines = ["what if: " + ", ".join(s.label() for s in speedups), "",
             f"{'window':<24} {'measured ms':>12} {'predicted ms':>13} {'change':>8}"]
    for p in predictions:
        change = (p.predicted_ns - p.measured_ns) / p.measured_ns if p.measured_ns else 0.0
        lines.append(f"{p.window:<24} {p.measured_ns / 1e6:>12.3f} {p.predicted_ns / 1e6:>13.3f} {change:>+8.1%}")
    for p in predictions:
        lines += ["", f"{p.window}: the new critical path's largest segments"]
        lines += [f"  {s['ns'] / 1e6:>10.3f} ms  rank {s['rank']}  {s['kind']:<24} {s['name']}" for s in p.top]
    return "\n".join(lines) + "\n"
