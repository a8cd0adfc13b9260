"""Key averages from a trace, computed the way torch's ``EventList.key_averages()`` does.

torch (``torch/autograd/profiler_util.py``) nests the events of each thread by a stack
walk over events sorted by (start, -end): an event is a child of the stack top unless it
starts at or after the top's end or ends after it. Self time is an event's duration minus
its direct children's; ``_remove_dup_nodes`` drops an only child that has its parent's
name (lifting its children to the parent); ``ProfilerStep#N`` is counted as
``ProfilerStep*``; a few utility ops are dropped. The result is grouped by (name, node,
user annotation or not).

Here the same is done over the columns of a :class:`~tracemerge.model.RankTrace` with
numpy: a thread whose events nest properly (the normal case) gets its tree from depths
and a search per depth, checked against the nesting rules; a thread with partially
overlapping events falls back to torch's stack walk itself, so the result is torch's
either way. Asynchronous events (ending on another thread: RPC caller spans of
``rpc_async``/``remote``, ``async_execution`` callee spans, ``gloo:*`` work) are left out
of the nesting with self time 0, as torch leaves them (``tracemerge.algorithms.nesting``).

Device time (:func:`device_times`, :func:`device_rows`) follows torch's
``_parse_kineto_results``: each kernel / memcpy / memset (any device activity linked to a
launch) is a kernel of the dispatcher op that launched it — found here through the runtime
call that has the device event's ``args.correlation``, and the innermost ``cpu_op``
enclosing that call (user annotations get no kernels in torch: their correlation ids go to
a stack of their own) — and every device event is also a row of its own with
``device_time_total`` = ``self_device_time_total`` = its duration.
"""

from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from msgspec import UNSET

from tracemerge import native
from tracemerge.algorithms.arrays import distinct, union
from tracemerge.algorithms.nesting import (
    DEVICE_CATS,
    asynchronous,
    category_codes,
    host_ops,
    lane_origins,
    nest_order,
    thread_runs,
    unfinished,
)
from tracemerge.model import NO_DUR, NO_TS, RankTrace

USER_ANNOTATION = "user_annotation"
STEP_PREFIX = "ProfilerStep#"
STEP_KEY = "ProfilerStep*"
REMOTE_SPAN_SUFFIX = "#remote"
REMOTE_OP = "#remote_op: "
NO_NODE = -1   # torch's node_id when a row has no single node
CPU = "CPU"
# device events torch never appends as kernels of an op: GPU-side copies of user annotations
# carry no launch, and MTIA activity is not among the device types _parse_kineto_results links
UNLINKED_DEVICE_CATS = frozenset(("gpu_user_annotation", "mtia_ccp_events"))
GPU_USER_ANNOTATION = "gpu_user_annotation"
# the host ops torch gives kernels to (dispatcher ops; "operator" in old Kineto)
LAUNCHING_CATS = frozenset(("cpu_op", "operator"))
# the device's name in torch's table columns, by a category only that device's traces have;
# ROCm traces use CUDA's categories and torch (use_device "cuda") calls their columns CUDA too
DEVICE_NAMES = (("mtia_", "MTIA"), ("xpu_", "XPU"), ("hpu_", "HPU"), ("privateuse1_", "PRIVATEUSEONE"))


@dataclass
class KeyAverage:
    """One row: torch's ``FunctionEventAvg`` fields, times in µs."""

    key: str
    count: int
    node_id: int
    cpu_time_total: float
    self_cpu_time_total: float
    is_user_annotation: bool = False
    device_time_total: float = 0.0        # kernels of the op and of every op under it (µs)
    self_device_time_total: float = 0.0   # kernels the op itself launched; a device row's own time
    device_type: str = CPU                # torch's device_type: CPU for host ops, the device's name for device rows
    is_async: bool = False   # every event of the row is asynchronous: torch's table shows its CPU total % as 0

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cpu_time"] = self.cpu_time
        d["device_time"] = self.device_time
        return d


@dataclass
class OpTree:
    """The host events of one trace as torch nests them, in (thread, start, -end) order."""

    index: np.ndarray    # event index in the trace
    start: np.ndarray    # ns
    end: np.ndarray      # ns
    parent: np.ndarray   # position of the direct parent in these arrays, -1 at top level
    kept: np.ndarray     # False for only children merged into a same-named parent
    self_ns: np.ndarray  # duration minus direct children (after merging), 0 where not kept
    name: np.ndarray     # key codes into ``keys``
    keys: list           # key strings (ProfilerStep#N already made ProfilerStep*)
    is_async: np.ndarray  # torch's asynchronous events: outside the nesting, self 0
    thread: np.ndarray   # thread of each event (these arrays are sorted by thread, then start)


def _key_table(names: List[Any]) -> Tuple[np.ndarray, List[Any]]:
    """(key of each name code, key strings): ProfilerStep#N names share one key."""
    keys: List[Any] = []
    seen: Dict[Any, int] = {}
    code_of = np.empty(len(names), dtype=np.int32)
    for i, n in enumerate(names):
        k = STEP_KEY if isinstance(n, str) and n.startswith(STEP_PREFIX) else n
        code_of[i] = seen.setdefault(k, len(keys))
        if code_of[i] == len(keys):
            keys.append(k)
    return code_of, keys


def nearest_ancestor(parent: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """For each node, its nearest proper ancestor (following ``parent``, -1 at a root) where
    ``stop`` holds, else -1. By pointer doubling: log(depth) whole-array steps, where a step
    up per iteration was quadratic on a deep chain (N identical spans nest N deep)."""
    n = len(parent)
    up = np.where(parent >= 0, parent, n)          # n: past the root
    hop = np.append(np.where(stop, np.arange(n), up), n)   # where the climb from each node goes next
    while True:
        nxt = hop[hop]
        if np.array_equal(nxt, hop):
            break
        hop = nxt
    found = hop[up]
    return np.where(found < n, found, -1)


def op_tree(trace: RankTrace) -> OpTree:
    """The :class:`OpTree` of ``trace``.

    Asynchronous events (:func:`tracemerge.algorithms.nesting.asynchronous`) stay out of the nesting,
    as torch leaves them: never a parent or a child, self time 0. Spans a merged trace moved
    to a lane of their thread (:func:`tracemerge.algorithms.nesting.lane_origins`) count on the thread
    they came from.
    """
    idx = host_ops(trace)
    # spans a merged trace moved to a lane count on the thread they came from
    thread = trace.pid[idx].astype(np.int64) * trace.thread_stride + lane_origins(trace)[trace.tid[idx]]
    start = trace.ts[idx]
    end = start + trace.dur[idx]
    order = nest_order(thread, start, end)
    idx, thread, start, end = idx[order], thread[order], start[order], end[order]
    is_async = asynchronous(trace)[idx]
    parent = np.full(len(idx), -1, dtype=np.int64)
    for lo, hi in thread_runs(thread):
        at = lo + np.flatnonzero(~is_async[lo:hi])
        s, e = start[at], end[at]
        local = native.walk(s, e)[0]
        parent[at] = np.where(local >= 0, at[np.maximum(local, 0)], -1)

    code_of, keys = _key_table(trace.names)
    name = code_of[trace.name[idx]]
    has = parent >= 0
    children = np.bincount(parent[has], minlength=len(idx))
    # _remove_dup_nodes: decided on the original tree, since merging never changes whether
    # another child qualifies (a merged parent inherits its child's children and name)
    dup = np.zeros(len(idx), dtype=bool)
    dup[has] = (name[parent[has]] == name[has]) & (children[parent[has]] == 1)
    # each event's nearest ancestor that is not merged away: the parent, or for a merged
    # parent its own nearest such ancestor
    eff = nearest_ancestor(parent, ~dup)
    kept = ~dup
    dur = end - start
    counted = kept & (eff >= 0)
    child_ns = np.zeros(len(idx), dtype=np.int64)
    np.add.at(child_ns, eff[counted], dur[counted])
    self_ns = np.where(kept & ~is_async, dur - child_ns, 0)
    return OpTree(index=idx, start=start, end=end, parent=eff, kept=kept, self_ns=self_ns,
                  name=name, keys=keys, is_async=is_async, thread=thread)


def served_positions(tree: OpTree, keys: List[Any], callee_spans: Mapping[int, str]) -> Tuple[np.ndarray, np.ndarray]:
    """(tree positions, span key codes) of the ops ``callee_spans`` names ({event index: the
    ``<rpc>#remote`` name of the call it served}); a name not in ``keys`` yet is appended."""
    if not callee_spans or not len(tree.index):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    events = np.fromiter(callee_spans, dtype=np.int64, count=len(callee_spans))
    sorter = np.argsort(tree.index, kind="stable")
    at = np.minimum(np.searchsorted(tree.index, events, sorter=sorter), len(sorter) - 1)
    found = tree.index[sorter[at]] == events
    code_of = {k: c for c, k in enumerate(keys)}
    codes = []
    for e in events[found].tolist():
        name = callee_spans[e]
        if name not in code_of:
            code_of[name] = len(keys)
            keys.append(name)
        codes.append(code_of[name])
    return sorter[at[found]].astype(np.int64), np.array(codes, dtype=np.int64)


def remote_op_names(tree: OpTree, keys: Optional[List[Any]] = None,
                    served: Tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0, np.int64)),
                    ) -> Tuple[np.ndarray, List[Any]]:
    """Key codes with ops under a callee span ``<rpc>#remote`` renamed ``<rpc>#remote_op: <op>``.

    As the legacy RPC profiler named them: the RPC key, then the op without ``aten::``.
    Returns (codes, keys); the span itself keeps its name. ``keys``: the key strings
    (default the tree's); ``served``: (positions, span key codes) of the ops that served
    paired builtins (:func:`served_positions`): each is its call's callee span and also an
    op under it, so it and the ops under it are renamed as a wrapped call's ops are.
    """
    keys = list(tree.keys if keys is None else keys)
    is_span = np.array([isinstance(k, str) and k.endswith(REMOTE_SPAN_SUFFIX) for k in keys], dtype=bool)
    at, span_code = served
    if not is_span.any():
        return tree.name, keys
    # the key code of the callee span each op runs in (-1: none), first where the span is
    owner = np.where(is_span[tree.name], tree.name.astype(np.int64), -1)
    parent = tree.parent
    # an asynchronous callee span (async_execution) is no parent: the top-level ops of its
    # thread that run inside it, and not in a span of their own, are its ops
    for span in np.flatnonzero(is_span[tree.name] & tree.is_async).tolist():
        t_lo, t_hi = np.searchsorted(tree.thread, tree.thread[span], side="left"), \
            np.searchsorted(tree.thread, tree.thread[span], side="right")
        lo = t_lo + np.searchsorted(tree.start[t_lo:t_hi], tree.start[span], side="left")
        hi = t_lo + np.searchsorted(tree.start[t_lo:t_hi], tree.end[span], side="left")
        inside = lo + np.flatnonzero((parent[lo:hi] < 0) & ~tree.is_async[lo:hi] & (tree.end[lo:hi] <= tree.end[span]))
        owner[inside[owner[inside] < 0]] = tree.name[span]
    owner[at] = span_code   # a served op runs in its own call's span, innermost
    # an op without a span of its own takes its nearest owned ancestor's
    up = nearest_ancestor(parent, owner >= 0)
    owner = np.where(owner >= 0, owner, np.where(up >= 0, owner[np.maximum(up, 0)], -1))
    renamed = (owner >= 0) & ~is_span[tree.name]
    codes = tree.name.copy()
    made: Dict[Tuple[int, int], int] = {}
    for i in np.flatnonzero(renamed):
        pair = (int(owner[i]), int(tree.name[i]))
        code = made.get(pair)
        if code is None:
            rpc = keys[pair[0]][:-len(REMOTE_SPAN_SUFFIX)]
            op = keys[pair[1]]
            code = made[pair] = len(keys)
            keys.append(f"{rpc}{REMOTE_OP}{op.removeprefix('aten::')}")
        codes[i] = code
    return codes, keys


def key_averages(trace: RankTrace, node_of_pid: np.ndarray, remote_ops: bool = False,
                 tree: Optional[OpTree] = None, links: Optional["Correlations"] = None,
                 callee_spans: Optional[Mapping[int, str]] = None) -> List[KeyAverage]:
    """[KeyAverage] of one trace, one row per (key, node, user annotation), in first-seen
    order, then the device rows (:func:`device_rows`).

    ``node_of_pid`` maps the trace's pid codes to node ids (ranks): an int array, so a
    merged trace's processes map back to the ranks they came from. ``tree``: the trace's
    :func:`op_tree` when the caller has built it already (the report needs it for the busy
    timeline too, and building it is a quarter of a report's time); ``links``: its
    :func:`correlations`, likewise (the GPU section reads them too).

    ``callee_spans``: {event index: ``<rpc>#remote``} of the ops that served paired builtins
    (:mod:`tracemerge.place.served`). Each counts as a wrapped call's callee side does: its
    span is a row of the callee's node (a user annotation, as the capture's spans are) with
    the op's time, its self time 0 (the op fills it) and the op's device time; the op keeps
    its own row, or with ``remote_ops`` is renamed ``<rpc>#remote_op: <op>`` as the ops
    under a wrapped call's span are.
    """
    tree = op_tree(trace) if tree is None else tree
    keys = list(tree.keys)
    at, span_code = served_positions(tree, keys, callee_spans or {})
    codes, keys = remote_op_names(tree, keys, (at, span_code)) if remote_ops else (tree.name, keys)
    # a span still open at the stop nests as written (its children are its children), but
    # its duration runs to the stop: it is no row (report says how many, nesting.unfinished)
    keep = tree.kept & ~unfinished(trace)[tree.index]
    spans = keep[at]
    at, span_code = at[spans], span_code[spans]
    dur_all = tree.end - tree.start
    own_dev, total_dev = device_times(trace, tree, links)
    # the served ops' callee spans first, then every kept op: a span's row is seen before its op's
    pos = np.concatenate((at, np.flatnonzero(keep)))
    n_spans = len(at)
    is_span = np.arange(len(pos)) < n_spans
    idx = tree.index[pos]
    order = np.argsort(idx, kind="stable")   # rows appear in the order of their first event
    idx, pos, is_span = idx[order], pos[order], is_span[order]
    code = np.concatenate((span_code, codes[keep].astype(np.int64)))[order]
    node = np.asarray(node_of_pid, dtype=np.int64)[trace.pid[idx]]
    ua_code = trace.code_of(USER_ANNOTATION)
    ua = (trace.cat[idx] == (ua_code if ua_code is not None else -2)) | is_span
    group = (code << 32) | ((node + 1) << 1) | ua
    uniq, first, inv = np.unique(group, return_index=True, return_inverse=True)
    dur = dur_all[pos]
    count = np.bincount(inv, minlength=len(uniq))
    total = np.bincount(inv, weights=dur, minlength=len(uniq))
    self_ = np.bincount(inv, weights=np.where(is_span, 0, tree.self_ns[pos]), minlength=len(uniq))
    dev_total = np.bincount(inv, weights=total_dev[pos], minlength=len(uniq))
    dev_self = np.bincount(inv, weights=np.where(is_span, 0, own_dev[pos]), minlength=len(uniq))
    asynchronous = np.bincount(inv, weights=tree.is_async[pos], minlength=len(uniq)) == count
    rows = []
    for g in np.argsort(first, kind="stable"):
        key = int(uniq[g])
        rows.append(KeyAverage(key=keys[key >> 32], count=int(count[g]), node_id=((key >> 1) & 0x7FFFFFFF) - 1,
                               cpu_time_total=float(total[g]) / 1000.0, self_cpu_time_total=float(self_[g]) / 1000.0,
                               is_user_annotation=bool(key & 1), device_time_total=float(dev_total[g]) / 1000.0,
                               self_device_time_total=float(dev_self[g]) / 1000.0,
                               is_async=bool(asynchronous[g])))
    return rows + device_rows(trace, node_of_pid)


def device_events(trace: RankTrace) -> np.ndarray:
    """Indices of the complete device events of ``trace`` (:data:`DEVICE_CATS`)."""
    mask = (trace.ph == ord("X")) & (trace.ts != NO_TS) & (trace.dur != NO_DUR)
    return np.flatnonzero(mask & np.isin(trace.cat, category_codes(trace, DEVICE_CATS.__contains__)))


def device_name(trace: RankTrace) -> str:
    """The device's name for torch's columns (``Self CUDA``, ``Self MTIA``, ...)."""
    present = {trace.names[c].lower() for c in distinct(trace.cat).tolist() if c >= 0 and isinstance(trace.names[c], str)}
    for prefix, name in DEVICE_NAMES:
        if any(c.startswith(prefix) for c in present):
            return name
    return "CUDA"


def is_runtime(cat: str) -> bool:
    return cat.endswith("_runtime") or cat.endswith("_driver") or cat == "runtime"


# a key_values value: the args are an object without "correlation" (UNSET: no object at all)
NO_CORRELATION = object()


@dataclass(frozen=True)
class Correlations:
    """``args.correlation`` of every runtime call and device event of a rank, decoded once:
    the key averages (which op launched each kernel) and the GPU section (each kernel's
    launch delay) both join kernels to their calls by it, and decoding it was most of a
    report's per-rank time, twice over."""

    runtime: np.ndarray  # the runtime calls' event indices
    index: np.ndarray    # sorted event indices: the runtime calls' and the device events'
    values: list         # each one's correlation; NO_CORRELATION where its args lack the key,
    #                      UNSET where its args are no object

    def of(self, idx: List[int], missing: object = UNSET) -> list:
        """The correlations of the events ``idx`` (each in :attr:`index`), ``missing`` where
        their args have none, as ``Args.key_values`` gives them."""
        at = np.searchsorted(self.index, np.asarray(idx, np.int64)).tolist()
        return [missing if v is NO_CORRELATION else v for v in map(self.values.__getitem__, at)]


def correlations(trace: RankTrace) -> Correlations:
    """The :class:`Correlations` of a rank's runtime calls and device events."""
    runtime = np.flatnonzero(np.isin(trace.cat, category_codes(trace, is_runtime)))
    index = union(runtime, device_events(trace))
    return Correlations(runtime, index,
                        list(trace.args.key_values(index.tolist(), "correlation", missing=NO_CORRELATION)))


def launches(trace: RankTrace, tree: OpTree, links: Optional[Correlations] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(device event indices, tree position of the op each was launched by, -1 for none).

    A device event's ``args.correlation`` names its runtime call (``cudaLaunchKernel``,
    ``cudaMemcpyAsync``, ``hipLaunchKernel``...); the op is the innermost ``cpu_op``
    enclosing that call, after torch's merging of same-named only children (whose kernels
    torch lifts to the parent). Calls outside any op, and device events with no call in
    the trace, launch from no op: they count on their own rows only.
    """
    dev = device_events(trace)
    dev = dev[~np.isin(trace.cat[dev], category_codes(trace, UNLINKED_DEVICE_CATS.__contains__))]
    owner = np.full(len(dev), -1, dtype=np.int64)
    if not len(dev):
        return dev, owner
    runtime = np.flatnonzero(np.isin(trace.cat[tree.index], category_codes(trace, is_runtime)))
    links = correlations(trace) if links is None else links
    call_of: Dict[object, int] = {}
    for pos, v in zip(runtime.tolist(), links.of(tree.index[runtime].tolist())):
        if v is not UNSET:
            call_of[v] = pos
    if not call_of:
        return dev, owner
    calls = np.array([call_of.get(v, -1) if v is not UNSET else -1
                      for v in links.of(dev.tolist(), missing=None)], dtype=np.int64)
    launching = np.isin(trace.cat[tree.index], category_codes(trace, LAUNCHING_CATS.__contains__))
    # up past user annotations (and other non-dispatcher spans) to the launching op
    up = nearest_ancestor(tree.parent, launching)
    owner[:] = np.where(calls >= 0, up[np.maximum(calls, 0)], -1)
    return dev, owner


def device_times(trace: RankTrace, tree: OpTree, links: Optional[Correlations] = None,
                 ) -> Tuple[np.ndarray, np.ndarray]:
    """(self, total) device ns per position of ``tree``: torch's ``self_device_time_total``
    (the durations of the kernels the op launched) and ``device_time_total`` (its own and
    those of every op nested under it)."""
    own = np.zeros(len(tree.index), dtype=np.int64)
    dev, owner = launches(trace, tree, links)
    linked = owner >= 0
    if not linked.any():
        return own, own.copy()
    np.add.at(own, owner[linked], trace.dur[dev[linked]])
    total = own.copy()
    at, dur = tree.parent[owner[linked]], trace.dur[dev[linked]]
    while len(at):  # each kernel's time climbs to every ancestor of its op
        up = at >= 0
        at, dur = at[up], dur[up]
        np.add.at(total, at, dur)
        at = tree.parent[at]
    return own, total


def device_rows(trace: RankTrace, node_of_pid: np.ndarray) -> List[KeyAverage]:
    """One row per (device event name, node, user annotation or not): torch's device
    ``FunctionEvent`` rows — no CPU time, device time (total and self) their durations;
    ``gpu_user_annotation`` spans are user annotations, as torch marks them."""
    dev = device_events(trace)
    if not len(dev):
        return []
    name = device_name(trace)
    node = np.asarray(node_of_pid, dtype=np.int64)[trace.pid[dev]]
    ua_code = trace.code_of(GPU_USER_ANNOTATION)
    ua = trace.cat[dev] == (ua_code if ua_code is not None else -2)
    code_of, keys = _key_table(trace.names)   # torch's _rewrite_name: ProfilerStep#N on a stream too
    group = (code_of[trace.name[dev]].astype(np.int64) << 32) | ((node + 1) << 1) | ua
    uniq, first, inv = np.unique(group, return_index=True, return_inverse=True)
    count = np.bincount(inv, minlength=len(uniq))
    total = np.bincount(inv, weights=trace.dur[dev], minlength=len(uniq))
    rows = []
    for g in np.argsort(first, kind="stable"):
        key = int(uniq[g])
        us = float(total[g]) / 1000.0
        rows.append(KeyAverage(key=keys[key >> 32], count=int(count[g]), node_id=((key >> 1) & 0x7FFFFFFF) - 1,
                               cpu_time_total=0.0, self_cpu_time_total=0.0, is_user_annotation=bool(key & 1),
                               device_time_total=us, self_device_time_total=us, device_type=name))
    return rows


def has_device_time(rows: List[KeyAverage]) -> bool:
    """Whether torch's table would show device columns: some row has self device time."""
    return any(r.self_device_time_total > 0 for r in rows)


def self_device_total(rows: List[KeyAverage]) -> float:
    """torch's ``Self CUDA time total``: the self device time of the device rows, user
    annotations' GPU copies left out (they overlap the kernels they enclose)."""
    return sum(r.self_device_time_total for r in rows if r.device_type != CPU and not r.is_user_annotation)


def device_label(rows: List[KeyAverage]) -> str:
    """The device's name in the columns: that of the device rows (CUDA when there are none)."""
    return next((r.device_type for r in rows if r.device_type != CPU), "CUDA")


def group_rows(rows: List[KeyAverage], by_rank: bool) -> List[KeyAverage]:
    """Rows merged by (key, device type, user annotation), and also by node when ``by_rank``.

    A row merged over several nodes gets node_id -1, torch's "no node".
    """
    out: Dict[tuple, KeyAverage] = {}
    for r in rows:
        k = (r.key, r.device_type, r.is_user_annotation, r.node_id if by_rank else None)
        acc = out.get(k)
        if acc is None:
            out[k] = KeyAverage(**asdict(r))
            continue
        acc.count += r.count
        acc.cpu_time_total += r.cpu_time_total
        acc.self_cpu_time_total += r.self_cpu_time_total
        acc.device_time_total += r.device_time_total
        acc.self_device_time_total += r.self_device_time_total
        acc.is_async = acc.is_async and r.is_async
        if acc.node_id != r.node_id:
            acc.node_id = NO_NODE
    return list(out.values())
