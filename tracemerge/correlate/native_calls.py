"""Builtins sent as themselves, paired with the callee ops that served them.

A builtin (``torch.add``) that a capture sent as itself ran on the callee's C++ path: the
callee has no record of it, only its op in its own trace. Its file keeps those ops in its
block (``tracemerge.served_ops``: the outermost ops of the threads that may serve RPCs,
with thread, times and, when recorded, input shapes); the caller's record (``native:
true``) has the call's exact start and its span's end, read off the caller's trace. Here,
once per job, each such call gets the op that served it, from both sides' data:

- the op has the call's function and lies inside the call's window ([send, complete] put
  on the callee's clock: the same clock when both share one boot, else by the clock
  reading the callee's admission answer carried, within half that round trip);
- input shapes, where both sides recorded them (``profile(record_shapes=True)``), must
  agree;
- calls that time and shapes cannot tell apart (in flight together) are paired in the
  order they were sent, which is exact when one caller's calls were served by one
  thread (the RPC server takes requests in the order they arrive); otherwise the pairing
  of those calls is said to be ambiguous (a note), with how many calls it concerns.

Each paired call gives a callee-side record like those a caller fetches from a callee that
did not record (``remote_rpcs``: ``source: "paired"``, the op's thread and times), so the
join, the clock model, the reports and the drawn ``#remote`` spans
(:mod:`tracemerge.place.remote_spans`) take it like any other callee side.
"""

import bisect
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracemerge.groups import components

# The profiler's op times and time.time_ns() agree to ±2 µs; a window this much wider
# keeps an op that starts right at the caller's send (same clock) inside it.
SLACK_NS = 20_000
_HEADER = ("rpc_id", "kind", "func", "name", "caller", "callee", "caller_name", "callee_name")


@dataclass
class Pairing:
    """What :func:`pair_native` found: callee-side records by caller rank, and notes."""

    records: Dict[int, List[Dict[str, Any]]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    by_order: int = 0       # calls told apart by the order they were sent (one caller, one thread)
    ambiguous: int = 0      # calls paired in the order sent where that order may not be the served one
    unpaired: int = 0       # calls with no op to pair with


class _Call:
    __slots__ = ("rec", "low", "high", "cands", "op")

    def __init__(self, rec: Dict[str, Any], low: int, high: float) -> None:
        self.rec, self.low, self.high = rec, low, high
        self.cands: List[int] = []
        self.op: Optional[int] = None


def pair_native(infos: Sequence[Any]) -> Pairing:
    """Pair every builtin call sent as itself (a caller record with ``native: true`` and no
    callee record anywhere) with its op in its callee's ``served_ops``. ``infos``:
    RankInfo-like (rank, path, boot_id, stop_ns, rpcs, remote_rpcs, served_ops,
    native_callees)."""
    out = Pairing()
    older = [info for info in infos if any(r["role"] == "callee" and r.get("native") for r in info.rpcs)]
    for info in older:
        out.notes.append(
            f"{info.path} was written by an older capture: the callee spans of builtins sent as themselves "
            "were appended to its events by the capture (they are read as they are, and may make time go "
            "backwards on a thread); capture again with this version to have them paired by combine")
    own = {r["rpc_id"] for info in infos for r in info.rpcs if r["role"] == "callee"}
    own.update(r["rpc_id"] for info in infos for r in info.remote_rpcs)
    by_rank = {info.rank: info for info in infos}
    groups: Dict[Tuple[int, str], List[_Call]] = {}
    unplaced: Dict[int, int] = {}
    for info in infos:
        for rec in info.rpcs:
            if rec["role"] != "caller" or not rec.get("native") or rec["rpc_id"] in own or "send_ns" not in rec:
                continue
            callee = by_rank.get(rec["callee"])
            if callee is None or not callee.served_ops:
                continue
            clock = _clock(info, callee)
            if clock is None:
                unplaced[callee.rank] = unplaced.get(callee.rank, 0) + 1
                continue
            offset, slack = clock
            end = rec.get("complete_ns", rec.get("complete_by_ns"))
            high = callee.stop_ns + SLACK_NS if end is None else end + offset + slack
            groups.setdefault((callee.rank, rec.get("func", "")), []).append(
                _Call(rec, rec["send_ns"] + offset - slack, high))
    for rank, n in sorted(unplaced.items()):
        out.notes.append(f"{n} builtin calls sent as themselves to rank {rank} are not paired with its ops: the caller "
                         "and the callee do not share a clock and the caller's file has no clock reading of the callee "
                         "(native_callees)")
    ambiguous: Dict[int, int] = {}
    unpaired: Dict[int, int] = {}
    for (rank, func), calls in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        callee = by_rank[rank]
        ops = sorted((op for op in callee.served_ops if op["name"] == func), key=lambda op: op["start_ns"])
        _pair(calls, ops, out, ambiguous, rank)
        for call in calls:
            if call.op is None:
                unpaired[rank] = unpaired.get(rank, 0) + 1
                continue
            rec = _record(call.rec, ops[call.op], callee, same_clock=_same_boot(by_rank[call.rec["caller"]], callee))
            out.records.setdefault(call.rec["caller"], []).append(rec)
    for rank, n in sorted(ambiguous.items()):
        out.ambiguous += n
        out.notes.append(
            f"{n} builtin calls sent as themselves to rank {rank} were in flight together with calls of the same "
            "function that neither time nor input shapes tell apart, served by several threads or for several "
            "callers: they are paired in the order they were sent, which the callee need not have kept (record "
            "input shapes on both sides, profile(record_shapes=True), to tell calls of different shapes apart, "
            "or profile(wrap_builtins=True) to give every call its own side)")
    for rank, n in sorted(unpaired.items()):
        out.unpaired += n
        out.notes.append(f"{n} builtin calls sent as themselves to rank {rank} have no op of theirs in its trace "
                         "(served while its profiler was not recording, or on a thread it did not record): their "
                         "callee side is unknown")
    return out


def _pair(calls: List[_Call], ops: List[Dict[str, Any]], out: Pairing, ambiguous: Dict[int, int], rank: int) -> None:
    """Give each of ``calls`` (one callee, one function) an op of ``ops`` (by start), each op once."""
    starts = [op["start_ns"] for op in ops]
    for call in calls:
        shapes = call.rec.get("shapes")
        i = bisect.bisect_left(starts, call.low)
        while i < len(ops) and starts[i] <= call.high:
            op = ops[i]
            if op["end_ns"] <= call.high and _shapes_agree(shapes, op.get("shapes")):
                call.cands.append(i)
            i += 1
    # calls that share a candidate op, transitively, are decided together
    for component in _components(calls):
        if all(len(c.cands) == 1 for c in component) and len({c.cands[0] for c in component}) == len(component):
            for c in component:
                c.op = c.cands[0]
            continue
        _by_order(component, ops)
        told = len({c.rec["caller"] for c in component}) == 1 and len(
            {ops[c.op]["tid"] for c in component if c.op is not None}) <= 1
        if told:
            out.by_order += sum(c.op is not None for c in component)
        else:
            ambiguous[rank] = ambiguous.get(rank, 0) + sum(c.op is not None for c in component)


def _by_order(component: List["_Call"], ops: List[Dict[str, Any]]) -> None:
    """The k-th call sent takes the k-th op started among their candidates, where it lies in
    the call's window; a call whose turn falls on an op outside its window takes the
    earliest free op of its own (the windows decide where order cannot)."""
    pool = sorted({i for c in component for i in c.cands})
    taken: set = set()
    ordered = sorted(component, key=lambda c: (c.rec["send_ns"], c.high))
    for k, c in enumerate(ordered):
        if k < len(pool) and pool[k] in c.cands and pool[k] not in taken:
            c.op = pool[k]
            taken.add(pool[k])
    for c in sorted(ordered, key=lambda c: (c.high, c.low)):
        if c.op is None:
            free = [i for i in c.cands if i not in taken]
            if free:
                c.op = free[0]
                taken.add(free[0])


def _components(calls: List[_Call]) -> List[List[_Call]]:
    """The calls grouped by shared candidate ops (the ops they may take link them)."""
    holder: Dict[int, int] = {}
    links = [(n, holder.setdefault(op, n)) for n, call in enumerate(calls) for op in call.cands]
    return [[calls[n] for n in group] for group in components(range(len(calls)), links)]


def _shapes_agree(sent: Any, served: Any) -> bool:
    """The caller's argument shapes are the op's first input dims (the op's schema may add
    defaulted arguments after them); unknown on either side: no say."""
    if not isinstance(sent, list) or not isinstance(served, list):
        return True
    return served[:len(sent)] == sent


def _same_boot(caller: Any, callee: Any) -> bool:
    return bool(caller.boot_id) and caller.boot_id == callee.boot_id


def _clock(caller: Any, callee: Any) -> Optional[Tuple[int, int]]:
    """(callee's clock minus the caller's, slack) in ns: 0 on one machine's clock, else the
    reading the callee's admission answer carried (the round trip's midpoint, within half
    of it; the shortest round trip when it answered several times); None without one."""
    if _same_boot(caller, callee):
        return 0, SLACK_NS
    best: Optional[Tuple[int, int]] = None
    for sample in caller.native_callees:
        answer = sample.get("answer")
        read = answer.get("read_ns") if isinstance(answer, dict) else None
        if sample["callee"] != callee.rank or not isinstance(read, int):
            continue
        rtt = sample["answered_ns"] - sample["asked_ns"]
        if rtt >= 0 and (best is None or rtt < best[1]):
            best = (read - (sample["asked_ns"] + sample["answered_ns"]) // 2, rtt)
    return None if best is None else (best[0], SLACK_NS + best[1] // 2)


def _record(call: Dict[str, Any], op: Dict[str, Any], callee: Any, same_clock: bool) -> Dict[str, Any]:
    """The callee-side record of ``call`` served by ``op`` (times on the callee's clock)."""
    start, end = op["start_ns"], op["end_ns"]
    if same_clock:
        # The profiler's clock and time.time_ns() differ by up to ±2 µs: on one clock the op
        # surely ran inside the call, and the record says so (the op keeps its own times).
        start = max(start, call["send_ns"])
        end = max(start, min(end, call.get("complete_ns", end)))
    rec = {k: call[k] for k in _HEADER if k in call}
    # the op ran, so it ended; an error is known to the caller (a remote()'s never is)
    rec.update(role="callee", native=True, source="paired", tid=op["tid"], start_ns=start, end_ns=end,
               status="error" if call.get("status") == "error" else "ok",
               hostname=callee.hostname, boot_id=callee.boot_id)
    return rec
