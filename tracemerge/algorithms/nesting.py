"""Which spans of a thread nest: the slice order shared by everything that nests slices per
thread, torch's asynchronous spans, and the lanes of spans that cannot nest.

Slices sorted by (thread, start, -end) come with every slice after the slices that
enclose it, so one walk per thread finds parents, lanes or enclosing slices (key
averages' op tree, Perfetto's tracks and lanes, the binding of input flows to their
enclosing slices); ties keep their given order (the sort is stable), as torch keeps its own.

Which spans of a thread cannot nest: torch's asynchronous spans, and spans that cross.

torch's ``key_averages()`` treats an event that ends on another thread than it began on as
*asynchronous*: it is never a parent or a child, its self CPU time is 0, and it is counted
once with its whole duration (``FunctionEvent.is_async``). Kineto's JSON does not say which
events those are, so they are recognised here by what is known about them:

- RPC spans carrying ``args.async`` (the capture wrapper notes whether the span ended on
  its own thread; docs/rank-file-format.md);
- RPC caller spans without it (rank files of older captures): ``rpc_async``/``remote``
  calls end when their future completes, on an RPC agent thread;
- ``gloo:*`` collectives, which c10d records as asynchronous work.

The JSON output uses the same notion to keep Perfetto's importer from nesting concurrent
calls into each other (:func:`lanes`); the report uses it to compute key averages as torch
does (``report.keyavg``).
"""

import heapq
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from tracemerge.model import NO_DUR, NO_TS, RankTrace


def nest_order(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The order that sorts slices by (``thread``, ``start``, -``end``)."""
    return np.lexsort((-end, start, thread))


def thread_runs(thread: np.ndarray) -> list[tuple[int, int]]:
    """[(first row, end row)] of the runs of equal keys of sorted ``thread`` keys."""
    cuts = np.flatnonzero(np.diff(thread)) + 1
    firsts = np.concatenate(([0], cuts)).tolist()
    ends = np.concatenate((cuts, [len(thread)])).tolist()
    return [(a, b) for a, b in zip(firsts, ends) if b > a]


ASYNC_ARG = "async"
ASYNC_CALLER_PREFIXES = ("rpc_async#", "remote#")
ASYNC_NAME_PREFIXES = ("gloo:",)


def asynchronous(trace: RankTrace) -> np.ndarray:
    """A bool mask over the events of ``trace``: the spans torch counts as asynchronous."""
    out = np.zeros(len(trace), dtype=bool)
    names = trace.names
    by_name = np.array([isinstance(n, str) and n.startswith(ASYNC_NAME_PREFIXES) for n in names] + [False], bool)
    if by_name.any():
        out |= by_name[trace.name]
    if trace.args is None:
        return out
    candidates = [i for i in trace.args.with_key("rpc_id") if trace.ph[i] == ord("X")]
    for i, a in zip(candidates, trace.args.dicts(candidates)):
        if a is None or "rpc_id" not in a:
            continue
        flag = a.get(ASYNC_ARG)
        if isinstance(flag, bool):
            out[i] = flag
        else:
            name = names[trace.name[i]] if trace.name[i] >= 0 else None
            out[i] = a.get("role") == "caller" and isinstance(name, str) and name.startswith(ASYNC_CALLER_PREFIXES)
    return out


LANE_OF = "lane_of"   # thread_name args key of a lane: the tid of the thread it belongs to


def lane_origins(trace: RankTrace) -> np.ndarray:
    """An int array over tid codes: the code of the thread each tid is a lane of (the JSON
    output names a lane by a ``thread_name`` event whose args carry ``lane_of``), else itself."""
    out = np.arange(len(trace.tids), dtype=np.int64)
    code = trace.code_of("thread_name")
    if code is None or trace.args is None:
        return out
    meta = np.flatnonzero((trace.ph == ord("M")) & (trace.name == code))
    code_of_tid = None
    for i, a in zip(meta.tolist(), trace.args.dicts(meta.tolist())):
        if a is not None and LANE_OF in a:
            if code_of_tid is None:
                code_of_tid = {_hashable(v): c for c, v in enumerate(trace.tids)}
            origin = code_of_tid.get(_hashable(a[LANE_OF]))
            if origin is not None:
                out[trace.tid[i]] = origin
    return out


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, type(None))) else repr(v)


# (start, end) of one thread's slices in nest order -> (parents, whether they form a proper tree)
Walk = Callable[[np.ndarray, np.ndarray], "tuple[np.ndarray, bool]"]


def walk(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, bool]:
    """(parents, proper) of one thread's events sorted by (start, -end): their tree when they
    form one (:func:`parents_nested`), else torch's own walk (:func:`parents_stack_walk`),
    and whether they formed one. The reference of the compiled core's ``walk``
    (``native.walk``: the same in one pass, where this takes a dozen array passes)."""
    nested = parents_nested(s, e)
    return (nested, True) if nested is not None else (parents_stack_walk(s, e), False)


def lanes(trace: RankTrace, start: np.ndarray, end: np.ndarray,
          is_async: Optional[np.ndarray] = None, walk: Walk = walk) -> dict[int, int]:
    """{event index: lane} of the ``X`` spans that must leave their thread for Perfetto's
    JSON importer to show every span of it (it drops or moves a span that partly overlaps
    another of its thread, and would nest concurrent calls into each other).

    A span leaves its thread when it is asynchronous and another span of the thread starts
    inside it (torch never makes it a parent, and concurrent calls must not nest), or when
    it partly overlaps a synchronous span that stays (the later of the two leaves). The
    spans that leave a thread are dealt into lanes 1, 2, … where none overlaps another,
    first fit in start order. ``start``/``end`` are the events' ns on any one clock;
    ``walk`` is :func:`walk` or the compiled core's (``native.walk``), which mirrors it.
    """
    is_async = asynchronous(trace) if is_async is None else is_async
    spans = np.flatnonzero((trace.ph == ord("X")) & (trace.ts != NO_TS) & (trace.dur != NO_DUR) & (end >= start))
    if not len(spans):
        return {}
    thread = trace.pid[spans].astype(np.int64) * max(len(trace.tids), 1) + trace.tid[spans]
    s, e = start[spans], end[spans]
    order = nest_order(thread, s, e)
    spans, thread, s, e = spans[order], thread[order], s[order], e[order]
    a = is_async[spans]
    bounds = np.flatnonzero(np.diff(thread)) + 1
    out: dict[int, int] = {}
    for lo, hi in zip(np.concatenate(([0], bounds)).tolist(), np.concatenate((bounds, [len(spans)])).tolist()):
        ts, te, ta = s[lo:hi], e[lo:hi], a[lo:hi]
        if _nests(ts, te, ta, walk):
            continue
        moved = _leaving(ts.tolist(), te.tolist(), ta.tolist())
        for k, lane in zip(moved, first_fit(ts[moved].tolist(), te[moved].tolist())):
            out[int(spans[lo + k])] = lane + 1
    return out


def first_fit(starts: Sequence[int], ends: Sequence[int]) -> list[int]:
    """The lane (0, 1, …) of each span, in start order: the lowest lane whose last span ended
    at or before it starts, else a new one. Starts only grow, so a lane once free stays free:
    two heaps (busy lanes by end, free lanes by number) make it n log n where a scan of the
    lanes per span was quadratic (10k spans open at once: 11 s)."""
    busy: list[tuple[int, int]] = []   # (last end, lane)
    free: list[int] = []
    out = []
    for start, end in zip(starts, ends):
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (end, lane))
        out.append(lane)
    return out


def _nests(s: np.ndarray, e: np.ndarray, is_async: np.ndarray, walk: Walk) -> bool:
    """True when a thread's spans (sorted by start, then end descending) need no lane: they
    form a proper tree and no asynchronous span encloses another (the next span in this
    order starts at or after its end)."""
    if len(s) < 2:
        return True
    at = np.flatnonzero(is_async[:-1])
    if len(at) and np.any(s[at + 1] < e[at]):
        return False
    return walk(s, e)[1]


def _leaving(s: Sequence[int], e: Sequence[int], is_async: Sequence[bool]) -> list[int]:
    """Positions (in this sorted order) of the spans that leave the thread: a walk like
    torch's over a stack of the spans that stay."""
    moved: list[int] = []
    stack: list[int] = []       # stack: positions of staying spans, each inside the one below
    for i, (start, end) in enumerate(zip(s, e)):
        while stack and start >= e[stack[-1]]:
            stack.pop()
        leaves = False
        while stack:
            top = stack[-1]
            if is_async[top]:       # i starts inside it: it would enclose or cross i
                moved.append(stack.pop())
                continue
            leaves = end > e[top]   # i crosses a synchronous span that stays
            break
        if leaves:
            moved.append(i)
        else:
            stack.append(i)
    return sorted(moved)


# ---- torch's nesting of one thread's events (EventList._populate_cpu_children) -------------

def parents_nested(s: np.ndarray, e: np.ndarray) -> Optional[np.ndarray]:
    """Parents of one thread's events (sorted by start, -end), or None if they do not nest.

    Depth of i = earlier events still open at its start (end > start_i); its parent is the
    last earlier event one level up. The result is accepted only if every parent contains
    its child and every previous sibling ended before it starts: then the events form a
    proper tree and torch's stack walk finds exactly this one.
    """
    n = len(s)
    pos = np.arange(n, dtype=np.int64)
    ended = np.searchsorted(np.sort(e), s, side="right")          # events with end <= start_i
    first = np.searchsorted(s, s, side="left")
    past = np.searchsorted(s, s, side="right")
    zero = e == s
    zeros = np.concatenate(([0], np.cumsum(zero)))
    # zero-length events at start_i sort last in its start group; those at/after i are not "earlier"
    later_ended = np.where(zero, past - pos, zeros[past] - zeros[first])
    depth = pos - (ended - later_ended)
    stride = n + 1
    order_key = np.sort(depth * stride + pos)

    def last_before(level: np.ndarray) -> np.ndarray:
        k = np.searchsorted(order_key, level * stride + pos) - 1
        found = k >= 0
        hit = order_key[np.maximum(k, 0)]
        found &= hit // stride == level
        return np.where(found, hit % stride, -1)

    parent = np.where(depth > 0, last_before(depth - 1), -1)
    if np.any((depth > 0) & (parent < 0)):
        return None
    has = parent >= 0
    p = parent[has]
    if np.any(s[has] >= e[p]) or np.any(e[has] > e[p]):
        return None
    sib = last_before(depth)
    check = (sib >= 0) & (sib > parent)
    if np.any(e[sib[check]] > s[check]):
        return None
    return parent


def parents_stack_walk(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """torch's own walk (``EventList._populate_cpu_children``), for threads that do not nest."""
    parent = np.full(len(s), -1, dtype=np.int64)
    stack: list[int] = []
    for i, (start, end) in enumerate(zip(s.tolist(), e.tolist())):
        while stack:
            top = stack[-1]
            if start >= e[top] or end > e[top]:
                stack.pop()
            else:
                parent[i] = top
                break
        stack.append(i)
    return parent


# ---- the ops torch counts: what key averages (report/) and the analyses' timelines (analysis/) read

# torch's _filter_name: utility ops that never reach key_averages()
DROPPED_NAMES = frozenset((
    "[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
    "profiler::_record_function_enter_new", "profiler::_record_function_exit",
    "aten::is_leaf", "aten::output_nr", "aten::_version"))
# Kineto categories that are profiler bookkeeping or device activity, not host events
NOT_HOST_OPS = frozenset((
    "Trace", "kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g", "fwdbwd",
    "overhead", "cuda_profiler_range",
    "critical_path"))  # combine --critical-path's drawing (tracemerge.analysis.drawing)
NOT_HOST_LOWER = frozenset(c.lower() for c in NOT_HOST_OPS)
# Kineto categories of device activity, those torch's deviceTypeFromActivity makes device
# events (older Kineto wrote "Kernel", "Memcpy", "Memset": categories are compared lowercased)
DEVICE_CATS = frozenset(("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation",
                         "cuda_profiler_range", "mtia_ccp_events", "memcpy", "memset"))


def category_codes(trace: RankTrace, test: Callable[[str], bool]) -> np.ndarray:
    """Codes of the names of ``trace`` (categories among them) whose lowercased text passes ``test``."""
    return np.array([i for i, s in enumerate(trace.names) if isinstance(s, str) and test(s.lower())], dtype=np.int32)


def _codes_in(table: Iterable[Any], wanted: frozenset) -> np.ndarray:
    return np.array([i for i, s in enumerate(table) if s in wanted], dtype=np.int32)


def host_ops(trace: RankTrace) -> np.ndarray:
    """Indices of the events torch's key_averages() would count."""
    mask = (trace.ph == ord("X")) & (trace.ts != NO_TS) & (trace.dur != NO_DUR)
    mask &= ~np.isin(trace.name, _codes_in(trace.names, DROPPED_NAMES))
    mask &= ~np.isin(trace.cat, category_codes(trace, lambda c: c in NOT_HOST_LOWER or c in DEVICE_CATS))
    return np.flatnonzero(mask)


def unfinished(trace: RankTrace) -> np.ndarray:
    """Which events are spans still open when the profiler stopped: Kineto writes them with
    ``args.finished`` false and a duration that runs to the stop, which is no duration of
    the span's own (torch's key averages take another end for them, one the trace does not
    hold). They nest as written; they are no row of the key averages."""
    mask = np.zeros(len(trace), dtype=bool)
    for i in trace.args.with_key("finished"):  # args are decoded for these events only
        a = trace.args[i]
        if isinstance(a, dict) and a.get("finished") is False:
            mask[i] = True
    return mask
