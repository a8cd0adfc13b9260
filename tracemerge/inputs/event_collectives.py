"""Collectives from a rank's CPU events where the trace names no group, sequence or size:
gloo's (``c10d::allreduce_`` on the issuing thread, ``gloo:all_reduce`` on a
``pt_gloo_runloop`` thread), as DDP's and FSDP's reducers issue them without any Python
``dist.*`` call.

Every collective torch runs passes through a dispatcher op ``c10d::<op>`` on the thread
that issues it (it only enqueues the work) and, on gloo, an execution span ``gloo:<op>``
on one of the group's runloop threads (from when the work started to when it completed).
The algorithm, per rank:

1. **Issue and execution paired.** The ``c10d::`` ops and the ``gloo:`` spans, each in
   start order, are merged: an execution span belongs to the earliest unpaired issue op
   before it whose op it runs (``allgather_`` and ``_allgather_base_`` both run as
   ``gloo:all_gather``); an issue op passed over has no execution in the window (the
   collective was still running when profiling stopped), an execution span with no issue
   op was issued before the window began. The record starts at the issue (the rank's
   arrival: what the waits and the critical path take) and ends where the execution ended
   (the completion, which is one moment on every rank up to the last message: what the
   ``cpu-collective`` alignment reads, :mod:`tracemerge.clocks.cpu_collective`). An
   execution span still open when the profiler stopped (``finished: false``) runs to the
   stop, not to the collective's end: where the step around its issue ended before the
   stop (a schedule's cycle stops right after a step, often before the runloop thread has
   closed the span of the step's last collective), the collective had completed, and the
   stop is its end (``end_at_stop``: no end the alignment reads); else it gives no end: it
   was never left (a peer never came), as the post-mortem needs.
2. **Group.** The trace names none: a rank whose ``distributedInfo.pg_config`` lists one
   process group puts them in it (its ``pg_name``, as ``_get_process_group_name`` and the
   capture's records name it, and its ranks). A rank in several groups (``new_group``,
   subgroups) runs each group's work on runloop threads of that group's own, which the
   group creates together when it is made, in the order ``pg_config`` lists the groups
   (its creation order): the threads that ran the rank's collectives, in thread-id order,
   are dealt to the listed groups in that order, as many to each (gloo's ``threads``, 2
   by default) — where their count is a multiple of the groups'. Where it is not (a
   thread ran nothing in the window), the capture's records tell the groups of the threads
   they lie on (:func:`merged`); without them the rank's collectives are one order of
   :data:`~tracemerge.inputs.kineto_collectives.DEFAULT_GROUP`, which the cross-rank check
   cuts where the ranks disagree. Execution spans that no
   issue op precedes, on a rank whose others have one, are a group's torch runs from C++
   (RPC's agent at init and shutdown): their own order, :data:`UNISSUED`.
3. **Order.** A group runs its collectives in the order every rank issued them (a rank
   that issued them in another order would hang), so the k-th of a group on one rank is the
   k-th on every other: ``seq`` is that k, ``seq_inferred`` set, with the op, ``nelems`` and
   ``dtype`` kept so the join checks the k-th agree across ranks
   (:func:`tracemerge.correlate.match.inferred_order_cuts` names a mismatch and stops
   matching the group there). Where the rank's capture records of the same group name
   their true sequence numbers (Python ``dist.*`` calls), :func:`merged` numbers the event
   records from them instead and keeps one record of each collective.

Sizes come from ``record_shapes``: the execution span's tensors (a coalesced all_reduce
runs several), else the issue op's; without shapes, none.

Point-to-point ops are no collective (:func:`point_to_point`): ``c10d::send`` and
``c10d::recv_`` on the issuing thread (``dist.send``/``recv``, ``isend``/``irecv``, each op
of ``batch_isend_irecv``), each joined as in step 1 to its ``gloo:send``/``gloo:recv``
span, which gloo ends when the work completed (for a receive: after the data arrived,
whenever the caller waited). The peer and tag are the issue op's arguments (with
``record_shapes``, ``Concrete Inputs``: the peer's rank in the group, the tag), else, in a
group of two, the other member.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypedDict

import numpy as np

from tracemerge.inputs.kineto_collectives import DEFAULT_GROUP, DTYPE_BYTES, span_of
from tracemerge.model import RankTrace

ISSUE_PREFIX = "c10d::"
RUN_PREFIXES = ("gloo:",)
SOURCE = "events"   # a record's ``source``: read from the trace's events (the capture's have none)
# the group of execution spans no dispatcher op issued, on a rank whose others were: torch's
# own groups issue from C++ (RPC's agent: its all_gathers and barrier at init and shutdown)
UNISSUED = "unissued"
# a capture record with no end (a call never left): its issue op is the first after its start within this
OPEN_CALL_NS = 10_000_000
# the c10d dispatcher op of each collective, and the name the capture's records (torch.distributed's API) give it
ISSUE_OPS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced", "broadcast_": "broadcast",
    "reduce_": "reduce", "allgather_": "all_gather", "_allgather_base_": "all_gather_into_tensor",
    "allgather_coalesced_": "all_gather_coalesced", "allgather_into_tensor_coalesced_": "all_gather_into_tensor",
    "gather_": "gather", "scatter_": "scatter", "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor",
    "alltoall_": "all_to_all", "alltoall_base_": "all_to_all_single", "barrier": "barrier",
    "monitored_barrier_": "barrier",
}
# ops whose execution span is gloo's name for another (c10d op -> the gloo spans that may run it;
# gloo runs a tensor reduce_scatter as an all_reduce: seen under FSDP2 on CPU, torch 2.13)
RUNS_AS = {"all_reduce_coalesced": ("all_reduce",), "all_gather_into_tensor": ("all_gather",),
           "all_gather_coalesced": ("all_gather",), "reduce_scatter_tensor": ("reduce_scatter", "all_reduce"),
           "reduce_scatter": ("reduce_scatter", "all_reduce"), "all_to_all_single": ("all_to_all",)}


class EventCollective(TypedDict, total=False):
    """One collective as a rank's events show it, in the rank-file record shape
    (docs/rank-file-format.md) plus the fields the inferred order is checked by."""

    op: str                  # torch.distributed's name: all_reduce, broadcast, all_gather_into_tensor, ...
    group: str               # the process group's name, or DEFAULT_GROUP
    group_ranks: List[int]   # its ranks, where distributedInfo lists them
    seq: int                 # its place in the group's order on this rank (or the true number: merged)
    seq_inferred: bool       # seq is the place in this rank's window, not torch's number
    bytes: int               # this rank's input, where shapes were recorded, else 0
    nelems: Optional[int]
    dtype: str
    start_ns: int            # issued (the c10d op's start), else the execution's start
    end_ns: int              # the execution's end; absent when it had not ended in the window
    end_at_stop: bool        # end_ns is the profiler's stop (the step ended, the span was still open)
    source: str              # SOURCE


def collectives(trace: RankTrace) -> List[Dict[str, Any]]:
    """The rank's collectives from its gloo issue and execution events (module docstring),
    in issue order with their inferred ``seq``, each an :class:`EventCollective` (a plain
    dict, as every record is); [] when the trace has no ``gloo:`` span."""
    return collected(trace)[0]


def collected(trace: RankTrace) -> Tuple[List[Dict[str, Any]], List[Optional[int]]]:
    """(:func:`collectives`, the thread key of each one's execution span, None where it ran
    in no span of the window): a process group's work runs on its own runloop threads, which
    is how :func:`merged` tells the groups of a rank in several apart."""
    run_codes = [i for i, n in enumerate(trace.names) if isinstance(n, str) and n.startswith(RUN_PREFIXES)]
    if not run_codes:
        return [], []
    spans = _spans(trace, _issue_codes(trace, ISSUE_OPS), run_codes, ISSUE_OPS)
    pairs = _paired(trace.ts[spans.issues].tolist(), spans.issue_ops, trace.ts[spans.runs].tolist(), spans.run_ops)
    run_threads = trace.thread_keys(spans.runs).tolist() if len(spans.runs) else []
    groups = _groups_of(trace, pairs, run_threads, bool(len(spans.issues)))
    steps = _ended_steps(trace)
    kept = [n for n, (_, r) in enumerate(pairs) if r is None or spans.run_ops[r] not in ("send", "recv")]  # p2p's apart
    out = [_record(trace, spans, pairs[n], groups[n], steps) for n in kept]
    for made, seq in zip(out, _group_places([made["group"] for made in out])):
        made["seq"] = seq
    return out, [int(run_threads[r]) if r is not None else None for _, r in (pairs[n] for n in kept)]


class _Spans(NamedTuple):
    """A rank's issue ops and execution spans of one kind (collectives or point-to-point),
    each in start order with its op and args: what pairing and the records read."""

    issues: np.ndarray
    runs: np.ndarray
    issue_ops: List[str]
    run_ops: List[str]
    issue_args: List[Any]
    run_args: List[Any]


def _issue_codes(trace: RankTrace, ops: Dict[str, str]) -> List[int]:
    """The name codes of the trace's ``c10d::`` dispatcher ops that ``ops`` names: one table
    per kind (collectives, point-to-point) over one selection."""
    return [i for i, n in enumerate(trace.names) if isinstance(n, str) and n.startswith(ISSUE_PREFIX)
            and n[len(ISSUE_PREFIX):] in ops]


def _spans(trace: RankTrace, issue_codes: List[int], run_codes: List[int], ops: Dict[str, str]) -> _Spans:
    """The timed spans of ``issue_codes`` and ``run_codes`` in start order, with their ops (an
    issue op's through ``ops``) and args: collectives and point-to-point read them alike."""
    ok = trace.timed & (trace.dur >= 0)
    runs = _in_order(trace, np.flatnonzero(np.isin(trace.name, run_codes) & ok))
    issues = _in_order(trace, np.flatnonzero(np.isin(trace.name, issue_codes) & ok)) if issue_codes else runs[:0]
    return _Spans(issues, runs,
                  [ops[trace.names[int(trace.name[i])][len(ISSUE_PREFIX):]] for i in issues.tolist()],
                  [_run_op(trace.names[int(trace.name[i])]) for i in runs.tolist()],
                  trace.args.dicts(issues.tolist()), trace.args.dicts(runs.tolist()))


def _groups_of(trace: RankTrace, pairs: List[Tuple[Optional[int], Optional[int]]], run_threads: List[Any],
               issues_seen: bool) -> List[Tuple[str, List[int]]]:
    """(group name, ranks) of each pair (step 2 of the module docstring): its runloop thread's
    group where the rank is in several, the one listed group else; UNISSUED for an execution
    no dispatcher op issued while others were (a group of torch's own, RPC's)."""
    group = _group(trace.meta)
    # every paired thread deals, a point-to-point op's too: the groups' threads run both
    dealt = _dealt(trace, sorted({run_threads[r] for i, r in pairs if i is not None and r is not None}))
    return [(UNISSUED, []) if issues_seen and i is None else dealt.get(run_threads[r], group) if r is not None
            else group for i, r in pairs]


def _record(trace: RankTrace, spans: _Spans, pair: Tuple[Optional[int], Optional[int]],
            where: Tuple[str, List[int]], steps: List[Tuple[Any, int, int]]) -> Dict[str, Any]:
    """The :class:`EventCollective` of one issue/execution pair (step 1 of the module
    docstring) in group ``where``, ``seq`` still 0 (step 3 numbers it)."""
    i, r = pair
    # the issue op names it more precisely (every pair has one side or both)
    op = spans.issue_ops[i] if i is not None else spans.run_ops[r or 0]
    at = int(spans.issues[i]) if i is not None else int(spans.runs[r or 0])
    nelems, dtype = _either_size(spans.run_args[r] if r is not None else None,
                                 spans.issue_args[i] if i is not None else None)
    rec: EventCollective = {"op": op, "group": where[0], "group_ranks": list(where[1]), "seq": 0, "seq_inferred": True,
                            "bytes": _bytes(nelems, dtype), "nelems": nelems, "dtype": dtype,
                            "start_ns": int(trace.ts[at]), "source": SOURCE}
    out: Dict[str, Any] = dict(rec)
    if r is not None:
        out.update(_end(trace, spans, i, r, steps))
    return out


def _end(trace: RankTrace, spans: _Spans, i: Optional[int], r: int,
         steps: List[Tuple[Any, int, int]]) -> Dict[str, Any]:
    """``end_ns`` (and ``end_at_stop``) of a pair with an execution span: its end where it
    finished; the profiler's stop where it was open but the step around its issue had ended
    (the module docstring); none where it was never left."""
    end = int(trace.ts[spans.runs[r]] + trace.dur[spans.runs[r]])
    args = spans.run_args[r]
    if not (isinstance(args, dict) and args.get("finished") is False):
        return {"end_ns": end}
    if i is not None and _step_ended(steps, trace, int(spans.issues[i])):
        return {"end_ns": end, "end_at_stop": True}
    return {}


def _group_places(groups: List[str]) -> List[int]:
    """Each record's place in its own group's order (step 3 of the module docstring)."""
    count: Dict[str, int] = {}
    out = []
    for g in groups:
        out.append(count.get(g, 0))
        count[g] = out[-1] + 1
    return out


def _either_size(run_args: Optional[dict], issue_args: Optional[dict]) -> Tuple[Optional[int], str]:
    """(elements, dtype) from the execution span's shapes, else the issue op's (the module
    docstring: a coalesced op's execution holds all its tensors)."""
    nelems, dtype = _size(run_args)
    return _size(issue_args) if nelems is None else (nelems, dtype)


def _bytes(nelems: Optional[int], dtype: str) -> int:
    """The bytes of ``nelems`` of ``dtype``; 0 where either is unknown."""
    return (nelems or 0) * DTYPE_BYTES.get(dtype.lower(), 0)


STEP_PREFIX = "ProfilerStep#"


def _ended_steps(trace: RankTrace) -> List[Tuple[Any, int, int]]:
    """[(thread key, start, end)] of the trace's ``ProfilerStep#N`` spans that ended in the window."""
    codes = [i for i, n in enumerate(trace.names) if isinstance(n, str) and n.startswith(STEP_PREFIX)]
    if not codes:
        return []
    idx = np.flatnonzero(np.isin(trace.name, codes) & trace.timed & (trace.dur >= 0))
    keys = trace.thread_keys(idx).tolist()
    return [(k, int(trace.ts[i]), int(trace.ts[i] + trace.dur[i])) for k, i, a in zip(keys, idx.tolist(),
                                                                                       trace.args.dicts(idx.tolist()))
            if not (isinstance(a, dict) and a.get("finished") is False)]


def _step_ended(steps: List[Tuple[Any, int, int]], trace: RankTrace, issue: int) -> bool:
    """The step around the issue op ``issue`` (on its thread) ended before the stop."""
    key, t = int(trace.thread_keys(np.array([issue]))[0]), int(trace.ts[issue])
    return any(k == key and s <= t <= e for k, s, e in steps)


P2P_OPS = {"send": "send", "recv_": "recv"}   # the c10d dispatcher op of each direction


def point_to_point(trace: RankTrace) -> List[Dict[str, Any]]:
    """[{op: "send" | "recv", peer, tag, start_ns, end_ns, bytes, span}] of the rank's gloo sends
    and receives (module docstring) in issue order: ``start_ns`` the issue (the earliest the
    data could leave), ``end_ns`` the work's completion (a receive's data had arrived by
    then: what the one-way link, ``correlate.match.match_p2p``, reads); ``span`` the span
    of the one that counts (kineto_collectives.span_of: a send's issue op, a receive's
    execution span), where its flow arrow's end goes. An op whose peer is
    not known, or whose work did not complete in the window, is left out."""
    issue_codes = _issue_codes(trace, P2P_OPS)
    run_codes = [i for i, n in enumerate(trace.names) if n in ("gloo:send", "gloo:recv")]
    if not issue_codes or not run_codes:
        return []
    spans = _spans(trace, issue_codes, run_codes, P2P_OPS)
    _, ranks = _group(trace.meta)
    me = (trace.meta.get("distributedInfo") or {}).get("rank") if isinstance(trace.meta, dict) else None
    pairs = _paired(trace.ts[spans.issues].tolist(), spans.issue_ops, trace.ts[spans.runs].tolist(), spans.run_ops)
    return [op for op in (_p2p_op(trace, spans, i, r, ranks, me) for i, r in pairs
                          if i is not None and r is not None) if op is not None]


def _p2p_op(trace: RankTrace, spans: _Spans, i: int, r: int, ranks: List[int], me: Any) -> Optional[Dict[str, Any]]:
    """One send or receive of :func:`point_to_point` from its issue op ``i`` and execution
    span ``r``; None where the work did not complete in the window or the peer is not known."""
    done = spans.run_args[r]
    if isinstance(done, dict) and done.get("finished") is False:
        return None
    peer, tag = _peer(spans.issue_args[i], ranks, me)
    if peer is None:
        return None
    nelems, dtype = _either_size(spans.run_args[r], spans.issue_args[i])
    op = spans.issue_ops[i]
    return {"op": op, "peer": peer, "tag": tag, "start_ns": int(trace.ts[spans.issues[i]]),
            "end_ns": int(trace.ts[spans.runs[r]] + trace.dur[spans.runs[r]]), "bytes": _bytes(nelems, dtype),
            "span": span_of(trace, int(spans.issues[i] if op == "send" else spans.runs[r]))}


def _peer(args: Optional[dict], ranks: List[int], me: Any) -> Tuple[Optional[int], Optional[int]]:
    """(the peer's rank in the job, the tag) of a send or receive op: its ``Concrete Inputs``
    (tensors, group, peer, tag; the peer is its rank in the group: mapped through the group's
    ranks where ``distributedInfo`` lists them), else the other member of a group of two."""
    given = args.get("Concrete Inputs") if isinstance(args, dict) else None
    if isinstance(given, list) and len(given) >= 4 and str(given[2]).lstrip("-").isdigit():
        peer = int(given[2])
        tag = int(given[3]) if str(given[3]).lstrip("-").isdigit() else None
        if ranks:
            return (ranks[peer], tag) if 0 <= peer < len(ranks) else (None, tag)
        return peer, tag
    if len(ranks) == 2 and me in ranks:
        return ranks[1 - ranks.index(me)], None
    return None, None


def _in_order(trace: RankTrace, idx: np.ndarray) -> np.ndarray:
    return idx[np.argsort(trace.ts[idx], kind="stable")]


def _run_op(name: str) -> str:
    return name.split(":", 1)[1]


def _paired(issue_ts: List[int], issue_ops: List[str], run_ts: List[int],
            run_ops: List[str]) -> List[Tuple[Optional[int], Optional[int]]]:
    """[(issue index or None, execution index or None)] in issue order: each execution span
    joined to the earliest unpaired issue op at or before its start that it runs (step 1 of
    the module docstring)."""
    out: List[Tuple[Optional[int], Optional[int]]] = []
    i = 0
    for r, (t, op) in enumerate(zip(run_ts, run_ops)):
        j = i
        while j < len(issue_ts) and issue_ts[j] <= t and op not in RUNS_AS.get(issue_ops[j], (issue_ops[j],)):
            j += 1
        if j < len(issue_ts) and issue_ts[j] <= t:
            out.extend((k, None) for k in range(i, j))   # issued, never run in the window
            out.append((j, r))
            i = j + 1
        else:
            out.append((None, r))   # issued before the window began
    out.extend((k, None) for k in range(i, len(issue_ts)))
    out.sort(key=lambda p: issue_ts[p[0]] if p[0] is not None else run_ts[p[1]])   # type: ignore[index]
    return out


def _dealt(trace: RankTrace, threads: List[int]) -> Dict[int, Tuple[str, List[int]]]:
    """{runloop thread key: (group name, ranks)} on a rank that ``distributedInfo`` lists in
    several process groups (step 2 of the module docstring); {} where it cannot tell."""
    dist = trace.meta.get("distributedInfo")
    configs = dist.get("pg_config") if isinstance(dist, dict) else None
    if not isinstance(configs, list) or len(configs) < 2 or not threads or len(threads) % len(configs):
        return {}
    groups = []
    for c in configs:
        name, ranks = (c.get("pg_name"), c.get("ranks")) if isinstance(c, dict) else (None, None)
        if not isinstance(name, (str, int)) or isinstance(name, bool):
            return {}
        ok = isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks)
        groups.append((str(name), list(ranks) if ok else []))   # type: ignore[arg-type]
    tids = []
    for key in threads:
        tid = trace.tids[key % trace.thread_stride]
        if isinstance(tid, bool) or not isinstance(tid, int):
            return {}   # no thread ids to order by
        tids.append(tid)
    each = len(threads) // len(groups)
    ordered = [key for _, key in sorted(zip(tids, threads))]
    return {key: groups[n // each] for n, key in enumerate(ordered)}


def _group(meta: Dict[str, Any]) -> Tuple[str, List[int]]:
    """(group name, ranks) of the collectives: the one process group ``distributedInfo``
    lists, else (DEFAULT_GROUP, [])."""
    dist = meta.get("distributedInfo")
    configs = dist.get("pg_config") if isinstance(dist, dict) else None
    if isinstance(configs, list) and len(configs) == 1 and isinstance(configs[0], dict):
        name, ranks = configs[0].get("pg_name"), configs[0].get("ranks")
        if isinstance(name, (str, int)) and not isinstance(name, bool):
            if isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 31
                                               for r in ranks):
                return str(name), list(ranks)
            return str(name), []
    return DEFAULT_GROUP, []


def _size(args: Optional[dict]) -> Tuple[Optional[int], str]:
    """(elements, dtype) of the tensors an op's recorded shapes name (``Input Dims``, a tensor
    list's included), else (None, "")."""
    if not isinstance(args, dict):
        return None, ""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None, ""
    # the first tensor argument: the rank's input
    first = next(((shapes, t) for shapes, t in ((_shapes(d), t) for d, t in zip(dims, types))
                  if shapes and isinstance(t, str) and t not in ("Scalar", "ScalarList", "")), None)
    total = _elements(first[0]) if first is not None else None
    if first is None or total is None:
        return None, ""
    return total, "" if first[1] == "TensorList" else first[1]   # a list's element type is not recorded


def _shapes(dims: Any) -> List[Any]:
    """The shapes one ``Input Dims`` entry records: a tensor's one, a tensor list's each; []
    where it records none (a scalar, a missing argument)."""
    return dims if dims and all(isinstance(x, list) for x in dims) else [dims] if isinstance(dims, list) and dims else []


def _elements(shapes: List[Any]) -> Optional[int]:
    """The elements of the tensors of ``shapes`` (a shape of no dimension is one element);
    None where a shape is not all non-negative ints (not a recorded size to trust)."""
    total = 0
    for shape in shapes:
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape):
            return None
        total += int(np.prod(shape)) if shape else 1
    return total


def merged(captured: List[Dict[str, Any]], events: List[Dict[str, Any]], path: str = "",
           threads: Sequence[Optional[int]] = (), shared: Optional[str] = None) -> Tuple[List[Dict[str, Any]], List[str]]:
    """(the capture's records and the event records of the collectives they do not hold,
    one record per collective; a sentence per group whose events could not be numbered).

    A capture record (a Python ``dist.*`` call, with its group and torch's sequence number)
    and the event record of the same call are one collective: the issue op lies inside the
    call on the same rank's clock (the first of the same op that starts within it). Such a
    pair names the group of its execution span's runloop thread (``threads``: each event
    record's, :func:`collected`); a process group runs its work on threads of its own, so
    every event record on that thread is that group's — how a rank in several groups (whose
    trace names the group of none) tells their collectives apart, DDP's beside the script's
    calls on a subgroup. The pairs of a group then give its numbering of the rank's window
    (true number - place among the group's event records), so every event record of the
    group takes its true number and the pairs are kept once (the capture's). A group the
    capture recorded but whose events none of its records lie around keeps only the
    capture's records: numbered by their place alone, the event records would collide with
    its numbers.

    gloo counts a group's sends and receives in its sequence numbers too, and those differ
    between ranks (one sends where another receives twice): the group ``shared`` names, whose
    numbers the rank's sends and receives took (:func:`p2p_group`), has its collectives
    numbered by their place in the window instead (``seq_inferred``, as events alone are)."""
    if not events:
        return _by_place(list(captured), shared), []
    if not captured:
        return list(events), []
    pairs = _pairs(captured, events)
    _regrouped(events, pairs, threads)
    by_group: Dict[str, List[int]] = {}
    for k, rec in enumerate(events):
        by_group.setdefault(rec["group"], []).append(k)
    out: List[Dict[str, Any]] = list(captured)
    said: List[str] = []
    for group, members in by_group.items():
        mine = [c for c in captured if str(c.get("group")) == group]
        if not mine:
            out.extend(events[k] for k in members)
            continue
        place = {k: n for n, k in enumerate(members)}
        used = {k: int(pairs[k]["seq"]) for k in members if k in pairs and str(pairs[k].get("group")) == group}
        shifts = [seq - place[k] for k, seq in used.items()]
        if not shifts:
            said.append(f"{path}: the collectives of process group {group} in its events lie in none of the "
                        f"capture's records of that group; only the capture's {len(mine)} are matched")
            continue
        shift = max(set(shifts), key=shifts.count)
        if len(set(shifts)) > 1:
            said.append(f"{path}: the collectives of process group {group} in its events are numbered from the "
                        f"capture's records, which disagree on {len(shifts) - shifts.count(shift)} of {len(shifts)} "
                        "(the most common numbering is kept)")
        for k in members:
            if k in used:
                continue
            rec = events[k]
            rec["seq"] = place[k] + shift
            for key in ("seq_inferred", "nelems", "dtype"):   # a true number: no order to check
                rec.pop(key, None)
            out.append(rec)
    out.sort(key=lambda r: r["start_ns"])   # one rank's collectives in time order, whichever told of them
    return _by_place(out, shared), said


def p2p_group(trace: RankTrace, p2p: List[Dict[str, Any]]) -> Optional[str]:
    """The group whose sequence numbers the rank's gloo sends and receives (``p2p``, from
    :func:`point_to_point`) took: ``dist.send``'s default, the world (``distributedInfo``'s
    ``default_pg``, else its first group); None without any."""
    if not p2p:
        return None
    dist = trace.meta.get("distributedInfo")
    configs = [c for c in (dist.get("pg_config") if isinstance(dist, dict) else None) or [] if isinstance(c, dict)]
    world = next((c for c in configs if c.get("pg_desc") == "default_pg"), configs[0] if configs else None)
    return str(world.get("pg_name")) if world is not None and world.get("pg_name") is not None else None


def _by_place(records: List[Dict[str, Any]], group: Optional[str]) -> List[Dict[str, Any]]:
    """``records`` with those of ``group`` numbered by their place among them (in time order)."""
    if group is None:
        return records
    place = 0
    for rec in sorted((r for r in records if str(r.get("group")) == group), key=lambda r: r["start_ns"]):
        rec["seq"], rec["seq_inferred"] = place, True
        place += 1
    return records


def _pairs(captured: List[Dict[str, Any]], events: List[Dict[str, Any]]) -> Dict[int, Dict[str, Any]]:
    """{event record index: the capture record of the same call}: the first unpaired event
    record of the call's op whose issue lies in the call (``events`` in issue order)."""
    starts = [r["start_ns"] for r in events]
    out: Dict[int, Dict[str, Any]] = {}
    for c in sorted(captured, key=lambda c: c["start_ns"]):
        end = c.get("end_ns")
        if not isinstance(end, int):  # absent or null (the schema lets *_ns fields be null): still open
            end = c["start_ns"] + OPEN_CALL_NS
        k = int(np.searchsorted(starts, c["start_ns"], side="left"))
        while k < len(events) and starts[k] <= end and (k in out or events[k]["op"] != c.get("op", events[k]["op"])):
            k += 1
        if k < len(events) and starts[k] <= end:
            out[k] = c
    return out


def _regrouped(events: List[Dict[str, Any]], pairs: Dict[int, Dict[str, Any]],
               threads: Sequence[Optional[int]]) -> None:
    """Each event record on a runloop thread that some pair names the group of (the group
    most of its pairs name) put in that group, with the capture's ranks of it."""
    named: Dict[int, List[Dict[str, Any]]] = {}
    for k, c in pairs.items():
        thread = threads[k] if k < len(threads) else None
        if thread is not None:
            named.setdefault(thread, []).append(c)
    if not named:
        return
    group_of: Dict[int, Dict[str, Any]] = {}
    for thread, recs in named.items():
        groups = [str(c.get("group")) for c in recs]
        top = max(set(groups), key=groups.count)
        group_of[thread] = next(c for c in recs if str(c.get("group")) == top)
    for k, rec in enumerate(events):
        thread = threads[k] if k < len(threads) else None
        named_by = group_of.get(thread) if thread is not None else None
        if named_by is not None and rec["group"] != UNISSUED:
            rec["group"] = str(named_by.get("group"))
            rec["group_ranks"] = list(named_by.get("group_ranks") or rec.get("group_ranks") or [])
