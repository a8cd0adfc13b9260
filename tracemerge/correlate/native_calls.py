"""Builtins sent as themselves, paired with the callee ops that served them.

A builtin (``torch.add``) that a capture sent as itself ran on the callee's C++ path: the
callee has no record of it, only its op in its own trace. Its file keeps those ops in its
block (``tracemerge.served_ops``: the outermost ops of the threads that may serve RPCs,
with thread, times and, when recorded, input shapes); the caller's record (``native:
true``) has the call's exact start and its span's end, read off the caller's trace. Here,
once per job, each such call gets the op that served it, from both sides' data. The
algorithm, per callee and function:

1. **Windows on the callee's clock.** A call's ``[send, complete]`` is put on the callee's
   clock through the best :class:`Window` of its link (caller → callee) at its send: the
   same clock when both share one boot; a fit of the two clocks (given by the caller of
   :func:`pair_native`, :mod:`tracemerge.clocks.joint`); else the clock readings the
   callee's answers carried (``native_callees``: the round trip's midpoint, within half of
   it), the admission's reading only a prior: where that reading is loose (a cold pipe:
   tens of ms), the offsets at which the most calls of each piece of the link's calls
   find an op of theirs tighten it there (:func:`_sweeps`). Every window's bound grows with the drift limit away from where
   it was read, so drift never pushes a call's op out of its window.
2. **Candidates, bounded.** An op is a candidate of a call when it has the call's
   function, lies inside the call's window and its input shapes agree (where both sides
   recorded them). Ops are sorted by start once; a call's candidates are a bisection, and a
   call with more than :data:`MAX_CANDIDATES` is not enumerated (it is *wide*: it may
   take any op of its window), so time and memory grow as ``n log n`` in the calls. First,
   a run of overlapping windows that are all one caller's, holding as many ops as calls,
   all of one thread, is given its ops in the order sent (:func:`_served_in_order`): one
   thread serves one caller's requests in that order, however many ops each window holds.
3. **A matching, and only what it forces.** Calls sharing candidates, transitively, form a
   component, matched as a bipartite graph (greedy by window end, then augmenting paths:
   a maximum matching). A call is paired only when its edge is in *every* maximum
   matching (Dulmage–Mendelsohn): no alternating cycle through it (strongly connected
   components of the matching's alternating graph) and no alternating path to it from a
   call or op left free — a wide call counts as a free call next to every op of its
   window. Calls are never ordered by the send times of different callers (two clocks);
   within one caller whose calls one thread served, the order sent is the order served
   (the RPC server takes one pipe's requests in order), which decides what the matching
   leaves open.
4. **A pipe's serve order, across functions.** The callee queues one caller's requests for
   its server threads in the order sent, and a thread takes one at a time, so of two calls
   one thread served the one sent first started first: each caller's calls to a callee, in
   the order sent, let every paired call drop the candidates on its op's thread of the
   others that contradict it, and the groups are matched again until nothing is dropped
   (:func:`_pair_in_serve_order`). Nothing is inferred across threads: a thread may be
   preempted between taking a request and starting its op.
   What stays open is *ambiguous*: counted and said, never guessed.

Each paired call gives a callee-side record like those a caller fetches from a callee that
did not record (``remote_rpcs``: ``source: "paired"``, the op's thread and times), so the
join, the clock model, the reports and the drawn ``#remote`` spans
(:mod:`tracemerge.place.remote_spans`) take it like any other callee side.
"""

import bisect
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tracemerge.algorithms.groups import components

# The profiler's op times and time.time_ns() agree to ±2 µs; a window this much wider
# keeps an op that starts right at the caller's send (same clock) inside it.
SLACK_NS = 20_000
# A call with more candidate ops than this is not enumerated: it may take any of them, so
# it decides nothing, and enumerating every op of every call in flight together is
# quadratic (6,000 calls in flight: ~2 GB, ~20 s).
MAX_CANDIDATES = 48
# The drift two clocks may have (the clock fit's prior, tracemerge.clocks.bands): a
# window's bound grows by this much per ns away from where its offset was read.
DRIFT_PRIOR_PPM = 500.0
# The offset sweep (a loose reading's prior tightened by the calls near each other): pieces
# of a link's calls of at most this span from their first, and this many calls.
SWEEP_SPAN_NS = 200_000_000
SWEEP_CALLS = 64
# Rounds of matching and pruning by a pipe's serve order; each round only drops candidates.
MAX_ORDER_ROUNDS = 16
_HEADER = ("rpc_id", "kind", "func", "name", "caller", "callee", "caller_name", "callee_name")

Link = Tuple[int, int]  # (caller rank, callee rank)


@dataclass(frozen=True)
class Window:
    """The callee's clock minus the caller's at the caller's time ``x``:
    ``offset_ns + drift_ppm*1e-6*(x - anchor_ns)``, true within ``bound(x)``: ``bound_ns``
    over ``[low_x, high_x]`` (where it was read or fitted), growing by ``growth_ppm``
    away from it."""

    offset_ns: float
    bound_ns: float
    low_x: int
    high_x: int
    drift_ppm: float = 0.0
    anchor_ns: int = 0
    growth_ppm: float = DRIFT_PRIOR_PPM
    source: str = "reading"   # "shared-clock", "reading", "sweep", "fit"

    def at(self, x: float) -> Tuple[float, float]:
        """(offset, bound) at the caller's time ``x``."""
        away = max(self.low_x - x, x - self.high_x, 0)
        return (self.offset_ns + self.drift_ppm * 1e-6 * (x - self.anchor_ns),
                self.bound_ns + self.growth_ppm * 1e-6 * away)


@dataclass
class Pairing:
    """What :func:`pair_native` found: callee-side records by caller rank, and notes."""

    records: Dict[int, List[Dict[str, Any]]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    by_order: int = 0       # calls told apart by the order they were sent (one caller, one thread)
    ambiguous: int = 0      # calls whose op the data leave open: not paired, said
    unpaired: int = 0       # calls with no op to pair with
    paired: int = 0         # calls given their op
    windows: Dict[Link, List[Window]] = field(default_factory=dict)  # the windows each link's calls had

    @property
    def pairs(self) -> Dict[str, Tuple[Any, int]]:
        """{rpc_id: (the op's thread, its start)} of every paired call."""
        return {r["rpc_id"]: (r["tid"], r["op_start_ns"]) for recs in self.records.values() for r in recs}


class _Call:
    __slots__ = ("rec", "low", "high", "cands", "op", "wide")

    def __init__(self, rec: Dict[str, Any], low: float, high: float) -> None:
        self.rec, self.low, self.high = rec, low, high
        self.cands: List[int] = []
        self.op: Optional[int] = None
        self.wide = False


def native_links(infos: Sequence[Any]) -> Dict[Link, List[Dict[str, Any]]]:
    """{(caller, callee): [caller records]} of every builtin sent as itself with no callee
    record anywhere, to a callee that kept its served ops."""
    own = {r["rpc_id"] for info in infos for r in info.rpcs if r["role"] == "callee"}
    own.update(r["rpc_id"] for info in infos for r in info.remote_rpcs)
    served = {info.rank for info in infos if info.served_ops}
    out: Dict[Link, List[Dict[str, Any]]] = {}
    for info in infos:
        for rec in info.rpcs:
            # a null send_ns is an absent one (the schema check lets *_ns fields be null)
            if rec["role"] == "caller" and rec.get("native") and rec["rpc_id"] not in own \
                    and isinstance(rec.get("send_ns"), int) and rec["callee"] in served:
                out.setdefault((info.rank, rec["callee"]), []).append(rec)
    return out


def same_boot(caller: Any, callee: Any) -> bool:
    return bool(caller.boot_id) and caller.boot_id == callee.boot_id


def readings(caller: Any, callee: Any, growth_ppm: float = DRIFT_PRIOR_PPM) -> List[Window]:
    """The windows of the clock readings ``callee``'s answers to ``caller`` carried (the
    round trip's midpoint, within half of it, read between its ends)."""
    out = []
    for sample in caller.native_callees:
        answer = sample.get("answer")
        read = answer.get("read_ns") if isinstance(answer, dict) else None
        if sample["callee"] != callee.rank or not isinstance(read, int) or isinstance(read, bool):
            continue
        asked, answered = sample["asked_ns"], sample["answered_ns"]
        if answered >= asked:
            out.append(Window(read - (asked + answered) / 2, (answered - asked) / 2 + SLACK_NS, asked, answered,
                              growth_ppm=growth_ppm))
    return out


def pair_native(infos: Sequence[Any], fitted: Optional[Mapping[Link, Sequence[Window]]] = None,
                growth_ppm: float = DRIFT_PRIOR_PPM) -> Pairing:
    """Pair every builtin call sent as itself (a caller record with ``native: true`` and no
    callee record anywhere) with its op in its callee's ``served_ops`` (see the module's
    doc). ``infos``: RankInfo-like (rank, path, boot_id, stop_ns, rpcs, remote_rpcs,
    served_ops, native_callees); ``fitted``: {(caller, callee): [Window]} from a fit of
    the clocks, used beside the readings (each call takes its tightest window)."""
    out = Pairing()
    for info in infos:
        if any(r["role"] == "callee" and r.get("native") for r in info.rpcs):
            out.notes.append(
                f"{info.path} was written by an older capture: the callee spans of builtins sent as themselves "
                "were appended to its events by the capture (they are read as they are, and may make time go "
                "backwards on a thread); capture again with this version to have them paired by combine")
    by_rank = {info.rank: info for info in infos}
    ops_of: Dict[Tuple[int, str], List[Dict[str, Any]]] = {}
    for info in infos:
        for op in sorted(info.served_ops, key=lambda op: op["start_ns"]):
            ops_of.setdefault((info.rank, op["name"]), []).append(op)
    groups: Dict[Tuple[int, str], List[_Call]] = {}
    unplaced: Dict[int, int] = {}
    for (caller, callee), recs in sorted(native_links(infos).items()):
        a, b = by_rank[caller], by_rank[callee]
        windows = link_windows(a, b, recs, ops_of, (fitted or {}).get((caller, callee), ()), growth_ppm)
        if not windows:
            unplaced[callee] = unplaced.get(callee, 0) + len(recs)
            continue
        out.windows[(caller, callee)] = windows
        for rec in recs:
            low, high = call_window(rec, windows, b.stop_ns)
            groups.setdefault((callee, rec.get("func", "")), []).append(_Call(rec, low, high))
    for rank, n in sorted(unplaced.items()):
        out.notes.append(f"{n} builtin calls sent as themselves to rank {rank} are not paired with its ops: the caller "
                         "and the callee do not share a clock and the caller's file has no clock reading of the callee "
                         "(native_callees)")
    ambiguous: Dict[int, int] = {}
    unpaired: Dict[int, int] = {}
    out.by_order += _pair_in_serve_order(groups, ops_of)
    for (rank, func), calls in sorted(groups.items(), key=lambda kv: kv[0]):
        callee = by_rank[rank]
        ops = ops_of.get((rank, func), [])
        for call in calls:
            if call.op is not None:
                out.paired += 1
                rec = _record(call.rec, ops[call.op], callee, same_clock=same_boot(by_rank[call.rec["caller"]], callee))
                out.records.setdefault(call.rec["caller"], []).append(rec)
            elif call.cands or call.wide:
                ambiguous[rank] = ambiguous.get(rank, 0) + 1
            else:
                unpaired[rank] = unpaired.get(rank, 0) + 1
    for rank, n in sorted(ambiguous.items()):
        out.ambiguous += n
        out.notes.append(
            f"{n} builtin calls sent as themselves to rank {rank} were in flight together with calls of the same "
            "function that neither time nor input shapes tell apart: they are left without a callee side rather "
            "than given a guessed op (record input shapes on both sides, profile(record_shapes=True), to tell "
            "calls of different shapes apart, or profile(wrap_builtins=True) to give every call its own side)")
    for rank, n in sorted(unpaired.items()):
        out.unpaired += n
        out.notes.append(f"{n} builtin calls sent as themselves to rank {rank} have no op of theirs in its trace "
                         "(served while its profiler was not recording, or on a thread it did not record): their "
                         "callee side is unknown")
    return out


def link_windows(caller: Any, callee: Any, recs: Sequence[Dict[str, Any]],
                 ops_of: Mapping[Tuple[int, str], List[Dict[str, Any]]], fitted: Sequence[Window],
                 growth_ppm: float = DRIFT_PRIOR_PPM) -> List[Window]:
    """The windows the calls ``recs`` of one link may take: the shared clock; else the
    fitted ones and the readings, with the sweep's where the readings are loose."""
    if same_boot(caller, callee):
        return [Window(0.0, SLACK_NS, -(1 << 62), 1 << 62, growth_ppm=0.0, source="shared-clock")]
    windows = list(fitted) + readings(caller, callee, growth_ppm)
    if not windows:
        return []
    return windows + _sweeps(recs, windows, ops_of, callee.rank, growth_ppm)


def _sweeps(recs: Sequence[Dict[str, Any]], windows: Sequence[Window],
            ops_of: Mapping[Tuple[int, str], List[Dict[str, Any]]], callee: int,
            growth_ppm: float) -> List[Window]:
    """The :func:`_sweep` windows of the link's calls, piece by piece (each of at most
    :data:`SWEEP_CALLS` calls within :data:`SWEEP_SPAN_NS`), so that drift and a loose
    reading far from most calls never spoil what the calls near each other tell."""
    timed = sorted((r for r in recs if isinstance(r.get("complete_ns"), int)), key=lambda r: r["send_ns"])
    out, start = [], 0
    while start < len(timed):
        stop = start
        while stop < len(timed) and stop - start < SWEEP_CALLS and \
                timed[stop]["send_ns"] - timed[start]["send_ns"] <= SWEEP_SPAN_NS:
            stop += 1
        swept = _sweep(timed[start:stop], windows, ops_of, callee, growth_ppm)
        if swept is not None:
            out.append(swept)
        start = stop
    return out


def call_window(rec: Dict[str, Any], windows: Sequence[Window], stop_ns: int) -> Tuple[float, float]:
    """[low, high] of the call ``rec`` on the callee's clock, through its tightest window at
    its send (``stop_ns``: the callee's stop, the end of a call that never completed)."""
    send = rec["send_ns"]
    best = min(windows, key=lambda w: w.at(send)[1])
    offset, bound = best.at(send)
    end = rec.get("complete_ns", rec.get("complete_by_ns"))
    if end is None:
        return send + offset - bound, stop_ns + SLACK_NS
    end_offset, end_bound = best.at(end)
    return send + offset - bound, end + end_offset + end_bound


def _sweep(use: Sequence[Dict[str, Any]], windows: Sequence[Window],
           ops_of: Mapping[Tuple[int, str], List[Dict[str, Any]]], callee: int,
           growth_ppm: float) -> Optional[Window]:
    """A window from the offsets at which the most of the completed calls ``use`` (by send,
    one piece of a link's) find an op of theirs inside their call, searched within what the
    other windows allow: each (call, op) admits the offsets ``[op end - complete, op start -
    send]``, widened by the drift limit away from the first call; the hull of the offsets
    that most calls admit is the window. None where it would not be tighter than the
    windows it searched in, or no call finds an op."""
    if not use:
        return None
    x0 = use[0]["send_ns"]
    x1 = max(r["complete_ns"] for r in use)
    prior = min(windows, key=lambda w: w.at(x0)[1])
    offset, bound = prior.at(x0)
    if bound <= 4 * SLACK_NS:
        return None
    drift_room = growth_ppm * 1e-6 * (x1 - x0)
    low_limit, high_limit = offset - bound - drift_room, offset + bound + drift_room
    points: List[Tuple[float, int]] = []
    for rec in use:
        ops = ops_of.get((callee, rec.get("func", "")), [])
        starts = [op["start_ns"] for op in ops]  # sorted by start (ops_of)
        send, complete = rec["send_ns"], rec["complete_ns"]
        room = growth_ppm * 1e-6 * (send - x0) + SLACK_NS
        i, stop = bisect.bisect_left(starts, send + low_limit), bisect.bisect_right(starts, complete + high_limit)
        spans = []
        for op in ops[i:min(stop, i + 8 * MAX_CANDIDATES)]:
            if not _shapes_agree(rec.get("shapes"), op.get("shapes")):
                continue
            lo, hi = max(op["end_ns"] - complete - room, low_limit), min(op["start_ns"] - send + room, high_limit)
            if lo <= hi:
                spans.append((lo, hi))
        for lo, hi in _union(spans):
            points += [(lo, 1), (hi, -1)]
    if not points:
        return None
    points.sort(key=lambda p: (p[0], -p[1]))  # an interval's start before another's end at one offset
    best, depth = 0, 0
    regions: List[Tuple[float, float]] = []
    for i, (at, step) in enumerate(points):
        depth += step
        if step > 0 and depth >= best:
            if depth > best:
                best, regions = depth, []
            regions.append((at, points[i + 1][0]))
    low, high = min(r[0] for r in regions), max(r[1] for r in regions)
    if high - low >= 2 * bound:
        return None
    return Window((low + high) / 2, (high - low) / 2 + SLACK_NS, x0, x1, growth_ppm=growth_ppm, source="sweep")


def _union(spans: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """The union of ``spans`` as disjoint intervals (a call counted once per offset)."""
    out: List[List[float]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _pair_in_serve_order(groups: Mapping[Tuple[int, str], List[_Call]],
                         ops_of: Mapping[Tuple[int, str], List[Dict[str, Any]]]) -> int:
    """Pair the calls of ``groups`` ({(callee, function): calls}) with the ops of
    ``ops_of``: each group matched (:func:`_pair`), then every caller's calls to one callee,
    of any function, taken in the order sent (one clock: the caller's) to prune what the
    pairs found rule out (:func:`_prune_by_serve_order`), and the groups matched again
    until nothing is pruned; the number told apart by the order sent."""
    contested = {key: _candidates(calls, ops_of.get(key, [])) for key, calls in groups.items()}
    chains: Dict[Tuple[int, int], List[Tuple[_Call, List[Dict[str, Any]]]]] = {}
    for (callee, func), calls in groups.items():
        for call in calls:
            chains.setdefault((call.rec["caller"], callee), []).append((call, ops_of.get((callee, func), [])))
    for chain in chains.values():
        chain.sort(key=lambda c: c[0].rec["send_ns"])
    told = 0
    for _ in range(MAX_ORDER_ROUNDS):
        told = 0
        for key, calls in groups.items():
            for call in calls:
                call.op = None
            told += _pair(calls, ops_of.get(key, []), contested[key])
        pruned = sum(_prune_by_serve_order(chain) for chain in chains.values())
        if not pruned:
            break
    return told


def _prune_by_serve_order(chain: Sequence[Tuple[_Call, List[Dict[str, Any]]]]) -> int:
    """Drop the candidates the paired calls of one pipe rule out; ``chain``: one caller's
    calls to one callee by send, each with its function's ops. The callee reads a pipe's
    requests in order and queues each for its server threads in that order, and a thread
    takes one request at a time: of two calls one thread served, the one sent first
    started first. So a paired call bounds the ops *on its op's thread* of the calls sent
    before it (none starting after its op's end) and of those sent after it (none ending
    before its op's start). Across threads there is no such bound: a thread that took a
    request may be preempted before its op starts, for longer than another thread takes to
    serve a later one (measured under load: a call's op started 37 µs after the op of a
    call sent 156 µs later ended, on another thread; the bound across threads paired two
    calls of two callers the wrong way round). The number of candidates dropped."""
    dropped = 0
    # per thread, the latest op start among the paired calls sent before each call
    floor: Dict[Any, float] = {}
    for call, ops in chain:
        if call.op is None and call.cands and floor:
            kept = [j for j in call.cands if ops[j]["end_ns"] + SLACK_NS >= floor.get(ops[j]["tid"], -float("inf"))]
            dropped += len(call.cands) - len(kept)
            call.cands = kept
        if call.op is not None:
            tid = ops[call.op]["tid"]
            floor[tid] = max(floor.get(tid, -float("inf")), ops[call.op]["start_ns"])
    ceiling: Dict[Any, float] = {}
    for call, ops in reversed(chain):
        if call.op is None and call.cands and ceiling:
            kept = [j for j in call.cands if ops[j]["start_ns"] - SLACK_NS <= ceiling.get(ops[j]["tid"], float("inf"))]
            dropped += len(call.cands) - len(kept)
            call.cands = kept
        if call.op is not None:
            tid = ops[call.op]["tid"]
            ceiling[tid] = min(ceiling.get(tid, float("inf")), ops[call.op]["end_ns"])
    return dropped


def _candidates(calls: List[_Call], ops: List[Dict[str, Any]]) -> List[bool]:
    """Set each call's candidates (``cands``: indices into ``ops``, by start) or mark it
    ``wide``; which ops a wide call may take (they are contested)."""
    starts = [op["start_ns"] for op in ops]
    wide: List[Tuple[int, int]] = []  # op index ranges a wide call may take
    shaped = _by_shapes(calls, ops)
    _served_in_order(calls, ops, starts)
    for call in calls:
        if call.cands:  # decided by its order
            continue
        i, stop = bisect.bisect_left(starts, call.low), bisect.bisect_right(starts, call.high)
        shapes = call.rec.get("shapes")
        # the ops its shapes agree with, by start (ops of unknown shapes among them): fifty
        # calls in flight together, each of its own size, are told apart by them
        agree = shaped.get(repr(shapes)) if isinstance(shapes, list) else None
        found = range(i, stop) if agree is None else agree[1][bisect.bisect_left(agree[0], call.low):
                                                               bisect.bisect_right(agree[0], call.high)]
        if len(found) > MAX_CANDIDATES:
            call.wide = True
            wide.append((i, stop))
            continue
        call.cands = [j for j in found if ops[j]["end_ns"] <= call.high]
    return _covered(wide, len(ops))


def _served_in_order(calls: List[_Call], ops: List[Dict[str, Any]], starts: List[int]) -> None:
    """Set the one candidate of each call whose op its order alone decides, however many
    ops its window holds: calls whose windows overlap, transitively (a run), where the ops
    starting within the run's span are :func:`_sent_order`'s (one caller, one thread, as
    many ops as calls), each inside its call's window, shapes agreeing (else the run is
    left to the matching). It is :func:`_in_order` before the candidates are enumerated: a
    loaded callee serving fifty calls in flight together puts more than MAX_CANDIDATES ops
    in the last ones' windows, which the enumeration would leave wide and so undecided."""
    by_low = sorted(calls, key=lambda c: c.low)
    k = 0
    while k < len(by_low):
        run, high = [by_low[k]], by_low[k].high
        k += 1
        while k < len(by_low) and by_low[k].low <= high:
            run.append(by_low[k])
            high = max(high, by_low[k].high)
            k += 1
        pool = range(bisect.bisect_left(starts, run[0].low), bisect.bisect_right(starts, high))
        pairs = _sent_order(run, list(pool), ops)
        if pairs and all(c.low <= ops[j]["start_ns"] and ops[j]["end_ns"] <= c.high
                         and _shapes_agree(c.rec.get("shapes"), ops[j].get("shapes")) for c, j in pairs):
            for c, j in pairs:
                c.cands = [j]


def _sent_order(calls: List[_Call], pool: List[int], ops: List[Dict[str, Any]]) -> Optional[List[Tuple[_Call, int]]]:
    """The k-th of ``calls`` sent with the k-th op of ``pool`` (indices into ``ops``, by
    start), where that is the only order-keeping way to give every call an op: one caller's
    calls, as many as the ops, all of which one thread served (it serves one caller's
    requests in the order sent). None where that does not hold."""
    if len(pool) != len(calls) or len({c.rec["caller"] for c in calls}) != 1 or len({ops[i]["tid"] for i in pool}) != 1:
        return None
    return list(zip(sorted(calls, key=lambda c: (c.rec["send_ns"], c.high)), pool))  # one caller: one clock


def _pair(calls: List[_Call], ops: List[Dict[str, Any]], contested: List[bool]) -> int:
    """Give each of ``calls`` (one callee, one function, candidates set) the op of ``ops``
    (by start) that every maximum matching gives it; the number told apart by the order
    sent."""
    told = 0
    for component in _components([c for c in calls if c.cands]):
        if all(len(c.cands) == 1 for c in component) and len({c.cands[0] for c in component}) == len(component) \
                and not any(contested[c.cands[0]] for c in component):
            for c in component:
                c.op = c.cands[0]
            continue
        if _in_order(component, ops, contested):
            told += len(component)
            continue
        _forced(component, contested)
    return told


def _covered(ranges: Iterable[Tuple[int, int]], n: int) -> List[bool]:
    """Which of ``n`` ops lie in any of ``ranges`` ([start, stop) of op indices)."""
    step = [0] * (n + 1)
    for i, stop in ranges:
        step[i] += 1
        step[stop] -= 1
    out, depth = [], 0
    for k in range(n):
        depth += step[k]
        out.append(depth > 0)
    return out


def _in_order(component: List[_Call], ops: List[Dict[str, Any]], contested: List[bool]) -> bool:
    """Pair one caller's calls that one thread served in the order they were sent
    (:func:`_sent_order`), where that is the only order the windows allow for exactly as
    many ops, none contested: True when done."""
    pool = sorted({i for c in component for i in c.cands})
    pairs = None if any(contested[i] for i in pool) else _sent_order(component, pool, ops)
    if pairs is None or any(op not in c.cands for c, op in pairs):
        return False
    for c, op in pairs:
        c.op = op
    return True


def _forced(component: List[_Call], contested: List[bool]) -> None:
    """Set ``op`` of the calls of ``component`` whose edge is in every maximum matching.

    A maximum matching first (greedy by window end, then augmenting paths). In the
    alternating graph (call → op on an unmatched edge, op → call on a matched one) a
    matched edge can be swapped for another when an alternating path from a free call
    reaches its op (the free call takes it), when one from its call reaches a free op
    (read backwards), or when a cycle runs through it (one strongly connected component);
    ops a wide call may take are reached from a free call. What is left is forced.
    """
    ops = sorted({i for c in component for i in c.cands})
    at = {op: k for k, op in enumerate(ops)}
    adj = [[at[i] for i in c.cands] for c in component]        # call -> local ops
    mate_call, mate_op = _matching(component, adj)
    forward = _reached_from_free(adj, mate_call, mate_op, [contested[op] for op in ops])
    backward = _reaching_free(_holders(adj, len(ops)), mate_call, mate_op)
    cycle = _on_cycles(adj, mate_call, mate_op)
    for n, c in enumerate(component):
        if mate_call[n] >= 0 and not forward[n] and not backward[n] and not cycle[n]:
            c.op = ops[mate_call[n]]


def _holders(adj: List[List[int]], n_ops: int) -> List[List[int]]:
    """op -> the calls that may take it: ``adj`` inverted, for the backward walk."""
    holders: List[List[int]] = [[] for _ in range(n_ops)]
    for n, nbrs in enumerate(adj):
        for o in nbrs:
            holders[o].append(n)
    return holders


def _reached_from_free(adj: List[List[int]], mate_call: List[int], mate_op: List[int],
                       contested: List[bool]) -> List[bool]:
    """Per call: its matched op is reached by an alternating path from a free call or from
    an op a wide call may take (``contested``, by local op), so another call could take it."""
    swap = [False] * len(adj)
    seen_op = list(contested)
    queue = [o for o in range(len(seen_op)) if seen_op[o]]
    for n in range(len(adj)):
        if mate_call[n] < 0:
            for o in adj[n]:
                if not seen_op[o]:
                    seen_op[o] = True
                    queue.append(o)
    while queue:
        n = mate_op[queue.pop()]
        if n < 0 or swap[n]:
            continue
        swap[n] = True
        for o2 in adj[n]:
            if not seen_op[o2]:
                seen_op[o2] = True
                queue.append(o2)
    return swap


def _reaching_free(holders: List[List[int]], mate_call: List[int], mate_op: List[int]) -> List[bool]:
    """Per call: an alternating path from it reaches a free op (walked backwards: free op <-
    call, call's op <- the calls that may take it), so it could give its op up."""
    seen_call = [False] * len(mate_call)
    stack = [n for o in range(len(holders)) if mate_op[o] < 0 for n in holders[o]]
    while stack:
        n = stack.pop()
        if seen_call[n]:
            continue
        seen_call[n] = True
        o = mate_call[n]
        if o >= 0:
            stack.extend(m for m in holders[o] if not seen_call[m])
    return seen_call


def _matching(component: List[_Call], adj: List[List[int]]) -> Tuple[List[int], List[int]]:
    """(op of each call, call of each op; -1: free): a maximum matching, greedy by window
    end (earliest first, each taking its earliest free op), then augmenting paths."""
    nc, no = len(adj), 1 + max((o for nbrs in adj for o in nbrs), default=-1)
    mate_call, mate_op = [-1] * nc, [-1] * no
    for n in sorted(range(nc), key=lambda n: (component[n].high, component[n].low)):
        for o in adj[n]:
            if mate_op[o] < 0:
                mate_call[n], mate_op[o] = o, n
                break
    for root in range(nc):
        if mate_call[root] >= 0:
            continue
        # iterative depth-first search for an augmenting path from the free call
        parent_op: Dict[int, int] = {}      # op -> call it was reached from
        stack, visited = [root], {root}
        found = -1
        while stack and found < 0:
            n = stack.pop()
            for o in adj[n]:
                if o in parent_op:
                    continue
                parent_op[o] = n
                m = mate_op[o]
                if m < 0:
                    found = o
                    break
                if m not in visited:
                    visited.add(m)
                    stack.append(m)
        while found >= 0:  # flip the path
            n = parent_op[found]
            previous = mate_call[n]
            mate_call[n], mate_op[found] = found, n
            found = previous if n != root else -1
    return mate_call, mate_op


def _on_cycles(adj: List[List[int]], mate_call: List[int], mate_op: List[int]) -> List[bool]:
    """Per call: its matched edge lies on an alternating cycle (its call and op are in one
    strongly connected component of call → unmatched op, op → its matched call;
    Tarjan's algorithm, iterative)."""
    nc = len(adj)
    # nodes: calls 0..nc-1, ops nc..; an op's only edge goes to its matched call
    def succ(v: int) -> List[int]:
        if v < nc:
            return [nc + o for o in adj[v] if o != mate_call[v]]
        m = mate_op[v - nc]
        return [m] if m >= 0 else []

    total = nc + len(mate_op)
    index = [-1] * total
    low = [0] * total
    comp = [-1] * total
    on_stack = [False] * total
    order: List[int] = []
    counter = 0
    ncomp = 0
    for start in range(total):
        if index[start] >= 0:
            continue
        work = [(start, iter(succ(start)))]
        index[start] = low[start] = counter
        counter += 1
        order.append(start)
        on_stack[start] = True
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    order.append(w)
                    on_stack[w] = True
                    work.append((w, iter(succ(w))))
                    advanced = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = order.pop()
                    on_stack[w] = False
                    comp[w] = ncomp
                    if w == v:
                        break
                ncomp += 1
    return [mate_call[n] >= 0 and comp[n] == comp[nc + mate_call[n]] for n in range(nc)]


def _components(calls: List[_Call]) -> List[List[_Call]]:
    """The calls grouped by shared candidate ops (the ops they may take link them)."""
    holder: Dict[int, int] = {}
    links = [(n, holder.setdefault(op, n)) for n, call in enumerate(calls) for op in call.cands]
    return [[calls[n] for n in group] for group in components(range(len(calls)), links)]


def _by_shapes(calls: List[_Call], ops: List[Dict[str, Any]]) -> Dict[str, Tuple[List[int], List[int]]]:
    """{the shapes a call sent (repr): (starts, indices) of the ops they agree with, by start}:
    one pass over the ops for each number of shapes the calls send (ops of unknown shapes
    agree with every call), so a call's candidates are found by bisection in its own."""
    if not any(isinstance(op.get("shapes"), list) for op in ops):
        return {}  # the callee recorded no shapes: they tell nothing apart
    sent: Dict[int, Dict[str, Any]] = {}
    for call in calls:
        shapes = call.rec.get("shapes")
        if isinstance(shapes, list):
            sent.setdefault(len(shapes), {})[repr(shapes)] = shapes
    out: Dict[str, Tuple[List[int], List[int]]] = {}
    for k, kinds in sent.items():
        held: Dict[str, List[int]] = {key: [] for key in kinds}
        for j, op in enumerate(ops):
            served = op.get("shapes")
            if not isinstance(served, list):
                for found in held.values():
                    found.append(j)
            else:
                bucket = held.get(repr(served[:k]))
                if bucket is not None:
                    bucket.append(j)
        out.update({key: ([ops[j]["start_ns"] for j in found], found) for key, found in held.items()})
    return out


def _shapes_agree(sent: Any, served: Any) -> bool:
    """The caller's argument shapes are the op's first input dims (the op's schema may add
    defaulted arguments after them); unknown on either side: no say."""
    if not isinstance(sent, list) or not isinstance(served, list):
        return True
    return served[:len(sent)] == sent


def _record(call: Dict[str, Any], op: Dict[str, Any], callee: Any, same_clock: bool) -> Dict[str, Any]:
    """The callee-side record of ``call`` served by ``op`` (times on the callee's clock)."""
    start, end = op["start_ns"], op["end_ns"]
    if same_clock:
        # The profiler's clock and time.time_ns() differ by up to ±2 µs: on one clock the op
        # surely ran inside the call, and the record says so (the op keeps its own times).
        start = max(start, call["send_ns"])
        end = max(start, min(end, call.get("complete_ns") or end))   # a null completion: none known
    rec = {k: call[k] for k in _HEADER if k in call}
    # the op ran, so it ended; an error is known to the caller (a remote()'s never is)
    rec.update(role="callee", native=True, source="paired", tid=op["tid"], start_ns=start, end_ns=end,
               op_start_ns=op["start_ns"], status="error" if call.get("status") == "error" else "ok",
               hostname=callee.hostname, boot_id=callee.boot_id)
    return rec

