"""What each thread of one rank was doing at every moment, on the reference clock.

A rank's host spans (the events torch's key averages count, :func:`tracemerge.algorithms.nesting.host_ops`)
are nested per thread by torch's rule and cut into *pieces*: the times where the
innermost open span stays the same. A piece's owner is that span, or -1 where the thread
ran no span (untraced or idle). Caller spans of RPCs are not work — the thread is waiting
on the call, or ran on while it was in flight — so they are kept out of the pieces and
handed back separately (:attr:`RankTimeline.rpc_spans`) for the waits built from the
records. Callee spans (``...#remote``) are work, and every span knows the innermost callee
span it runs in (``callee_of``), so time inside a served call is told apart.

Everything is numpy columns; one worker builds a rank's timeline from its file and the
result (a few arrays per thread) is all the analyses need of the events.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

import numpy as np

from tracemerge import native
from tracemerge.algorithms.nesting import host_ops
from tracemerge.clocks.clock import ClockModel
from tracemerge.inputs import chrome, reader_for
from tracemerge.inputs.chrome import read_data, read_trace, read_typed
from tracemerge.model import RankTrace
from tracemerge.place.served import ServedOps, served_events

if TYPE_CHECKING:
    from tracemerge.place.rank_pass import RankView

STEP_PREFIX = "ProfilerStep#"
REMOTE_SUFFIX = "#remote"


@dataclass
class ThreadTimeline:
    """One thread: piece k is [bounds[k], bounds[k+1]) (the last one has no end: the thread
    ran nothing after it), run by span ``owner[k]`` (-1: none)."""

    tid: Any                    # the thread id as the trace spells it (a JSON scalar)
    bounds: np.ndarray          # int64 reference ns, strictly increasing
    owner: np.ndarray           # int64 span index, -1 for none
    first_ns: int               # first start of any host span on the thread, caller spans included
    last_ns: int                # last end of any host span on the thread, caller spans included
    main: bool = False          # the process's main thread (its tid is the pid, as Linux numbers them)


@dataclass
class RankTimeline:
    rank: int
    threads: List[ThreadTimeline]
    names: List[str]            # span name strings, by code
    span_start: np.ndarray      # int64 reference ns, per span
    span_end: np.ndarray
    span_name: np.ndarray       # int32 code into names
    span_thread: np.ndarray     # int32 index into threads
    callee_of: np.ndarray       # int64: the innermost callee span (``...#remote``) the span runs in, itself included; -1
    rpc_spans: list = field(default_factory=list)   # [(rpc_id, role, span index)]; caller spans are not in the pieces
    steps: list = field(default_factory=list)       # [(name, start_ns, end_ns, thread index)] of ProfilerStep#N spans
    # callee spans whose args say they ended on another thread than they began on: an
    # async_execution function's span, open until the future it returned completed
    async_spans: frozenset = frozenset()
    # {span index: ``<call>#remote``} of the ops that served paired builtins: each op keeps
    # its own name in ``span_name`` and is also its call's callee span, named so (whatif)
    callee_names: dict = field(default_factory=dict)


def rank_timeline(source: "str | RankTrace", rank: int, clock: ClockModel, rpc_names: Iterable[str] = (),
                  served: Optional[ServedOps] = None) -> RankTimeline:
    """The :class:`RankTimeline` of ``source`` (a path or a RankTrace) under ``clock``
    (its :class:`~tracemerge.clock.ClockModel`); ``rpc_names`` are the caller span names
    of the RPC records of the rank (callee spans are those plus ``#remote``); ``served``
    ({(tid, start ns): Served}, :func:`~tracemerge.place.served.served_spans`): ops that are the callee spans of
    paired builtins."""
    trace = _read(source) if isinstance(source, str) else source
    idx = host_ops(trace)
    names = trace.names
    role, ended_elsewhere = _rpc_roles(trace, idx, set(rpc_names))
    paired = served_events(trace, idx, served or {})
    for i, call in paired.items():
        role.setdefault(i, (call.rpc_id, "callee"))
    ntids = max(len(trace.tids), 1)
    thread_key = trace.pid[idx].astype(np.int64) * ntids + trace.tid[idx]
    start_local = trace.ts[idx]
    end_local = start_local + trace.dur[idx]
    start = np.asarray(clock.to_reference(start_local), dtype=np.int64)
    end = np.maximum(np.asarray(clock.to_reference(end_local), dtype=np.int64), start)
    order = np.lexsort((-end, start, thread_key))
    idx, thread_key, start, end = idx[order], thread_key[order], start[order], end[order]
    keys, thread = np.unique(thread_key, return_inverse=True)
    thread = thread.astype(np.int32)
    is_caller = np.zeros(len(idx), dtype=bool)
    is_callee = np.zeros(len(idx), dtype=bool)
    rpc_spans: List[Tuple[str, str, int]] = []
    position = {int(i): p for p, i in enumerate(idx.tolist())} if role else {}
    for i, (rpc_id, r) in role.items():
        p = position[i]
        (is_caller if r == "caller" else is_callee)[p] = True
        rpc_spans.append((rpc_id, r, p))
    parent, threads = _threads(trace, keys, thread, start, end, ~is_caller)
    span_name = trace.name[idx]
    step_codes = [i for i, n in enumerate(names) if isinstance(n, str) and n.startswith(STEP_PREFIX)]
    steps = [(names[span_name[p]], int(start[p]), int(end[p]), int(thread[p]))
             for p in np.flatnonzero(np.isin(span_name, step_codes)).tolist()]
    return RankTimeline(rank=rank, threads=threads, names=list(names), span_start=start, span_end=end,
                        span_name=span_name, span_thread=thread,
                        callee_of=_nearest(np.where(is_callee, np.arange(len(idx)), -1), parent), rpc_spans=rpc_spans,
                        steps=steps, async_spans=frozenset(position[i] for i in ended_elsewhere),
                        callee_names={position[i]: call.span for i, call in paired.items()
                                      if role[i] == (call.rpc_id, "callee")})


def _rpc_roles(trace: RankTrace, idx: np.ndarray, rpc_names: Set[str]) -> Tuple[Dict[int, Tuple[str, str]], Set[int]]:
    """({event: (rpc_id, role)} of the host ops ``idx`` that are RPC spans — named as the
    records' calls are, or those plus ``#remote``, their args naming the call —, the callee
    spans among them that end elsewhere (``async``))."""
    names = trace.names
    rpc_codes = np.array([i for i, n in enumerate(names) if isinstance(n, str) and
                          (n in rpc_names or (n.endswith(REMOTE_SUFFIX) and n[:-len(REMOTE_SUFFIX)] in rpc_names))],
                         dtype=np.int32)
    candidates = idx[np.isin(trace.name[idx], rpc_codes)]
    role: Dict[int, Tuple[str, str]] = {}
    ended_elsewhere: Set[int] = set()
    if len(candidates):
        for i, args in zip(candidates.tolist(), trace.args.dicts(candidates.tolist())):
            if args and isinstance(args.get("rpc_id"), str) and args.get("role") in ("caller", "callee"):
                role[i] = (args["rpc_id"], args["role"])
                if args["role"] == "callee" and args.get("async") is True:
                    ended_elsewhere.add(i)
    return role, ended_elsewhere


def _threads(trace: RankTrace, keys: np.ndarray, thread: np.ndarray, start: np.ndarray, end: np.ndarray,
             work: np.ndarray) -> Tuple[np.ndarray, List[ThreadTimeline]]:
    """(each span's parent among the ``work`` spans of its thread, -1: none; each thread's
    pieces), the spans sorted by thread (``thread``: their index in ``keys``), then start."""
    ntids = max(len(trace.tids), 1)
    n = len(thread)
    parent = np.full(n, -1, dtype=np.int64)
    bounds_of = np.concatenate(([0], np.flatnonzero(np.diff(thread)) + 1, [n])) if n else np.zeros(1, int)
    threads: List[ThreadTimeline] = []
    for t, (lo, hi) in enumerate(zip(bounds_of[:-1].tolist(), bounds_of[1:].tolist())):
        sel = np.arange(lo, hi)[work[lo:hi]]
        s, e = start[sel], end[sel]
        local = native.walk(s, e)[0]
        parent[sel] = np.where(local >= 0, sel[np.maximum(local, 0)], -1)
        bounds, owner = _pieces(s, e, local, sel, end)
        key = int(keys[t])
        tid = trace.tids[key % ntids]
        threads.append(ThreadTimeline(tid=tid, bounds=bounds, owner=owner, first_ns=int(start[lo]),
                                      last_ns=int(end[lo:hi].max()), main=tid == trace.pids[key // ntids]))
    return parent, threads


def _nearest(value: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each span's ``value`` where it is >= 0, else its nearest ancestor's that is (-1: none):
    by pointer jumping, log(depth) passes (one level per pass was quadratic in the depth)."""
    value, jump = value.copy(), parent.copy()
    while True:
        need = np.flatnonzero((value < 0) & (jump >= 0))
        if not len(need):
            return value
        up = jump[need]
        value[need], jump[need] = value[up], jump[up]


def _depth(parent: np.ndarray) -> np.ndarray:
    """Each span's number of ancestors (``parent``: index, -1 for none), by pointer jumping."""
    depth = (parent >= 0).astype(np.int64)
    jump = parent.copy()
    while True:
        need = np.flatnonzero(jump >= 0)
        if not len(need):
            return depth
        up = jump[need]
        # both from before this pass: each span adds the edges its jump target had counted
        depth[need], jump[need] = depth[need] + depth[up], jump[up]


def _read(path: str) -> RankTrace:
    """The trace at ``path`` without the extra keys the writers need (the typed reader's
    light form, as a rank is described); a file it does not take goes through read_trace."""
    if reader_for(path).name != chrome.FORMAT.name:  # another input format: its own reader
        return read_trace(path)
    data, cut = read_data(path)
    trace = None if cut else read_typed(path, data, extra=False)
    del data
    return trace if trace is not None else read_trace(path)


def _pieces(s: np.ndarray, e: np.ndarray, parent: np.ndarray, sel: np.ndarray,
            end_of: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(bounds, owner) of one thread's work spans ``sel`` (sorted by start, -end) with their
    ``parent`` positions: after a start the span itself runs, after an end its parent. At
    one instant ends come before starts, deeper ends first and deeper starts last, so the
    owner after the last point there is the innermost span open from then on."""
    n = len(sel)
    if not n:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    depth = _depth(parent)
    times = np.concatenate((s, e))
    kind = np.concatenate((np.ones(n, np.int64), np.zeros(n, np.int64)))
    rank = np.concatenate((depth, -depth))
    owner = np.concatenate((sel, np.where(parent >= 0, sel[np.maximum(parent, 0)], -1)))
    order = np.lexsort((rank, kind, times))
    times, owner = times[order], owner[order]
    last = np.ones(len(times), dtype=bool)
    last[:-1] = times[1:] != times[:-1]
    times, owner = times[last], owner[last]
    # a stack-walk parent of overlapping spans may have ended already: nothing runs then
    open_ = owner >= 0
    open_[open_] = end_of[owner[open_]] > times[open_]
    return times.astype(np.int64), np.where(open_, owner, -1).astype(np.int64)


def timeline_of(view: "RankView") -> Optional[RankTimeline]:
    """The per-rank product ``timeline`` (:mod:`tracemerge.place.rank_pass`): the rank's
    timeline on the reference clock when the analyses are asked for, else None."""
    if not view.options.timelines:
        return None
    return rank_timeline(view.trace, view.rank, view.clock, view.ask.rpc_names, view.ask.served)
