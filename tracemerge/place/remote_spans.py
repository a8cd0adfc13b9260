"""Callee spans drawn from the callee sides a caller's file carries (``tracemerge.remote_sides``).

A callee that was not recording when it served a call (a worker that only serves, whose
``profile`` block ended at once) has no ``#remote`` span of its own, but the caller's
capture fetched its side: start and end on the callee's clock and the serving thread.
Those calls get the span the callee would have written — same name plus ``#remote``,
``args.rpc_id`` and ``args.role: "callee"`` — on the callee rank's process group: one more
process in the rank's pid block (the last slot), labelled like the rank's others, or, for
a rank with no file of its own, a process group of its own after the ranks', named like
theirs. Where the callee recorded the call itself, its own span is the one drawn.

An ``async_execution`` side whose end the callee's file could not give (the callee never
profiled: the side has ``end_by_ns``, when the caller's capture saw it done) is drawn
*bounded*: it ended by then and by the caller's completion (the response arrived after it
ended), so its end is the earlier of the two on the callee's clock, and its args say
``bounded: true``.

The spans are events *added* to the output (counted as such), written by the same
per-rank path as the ranks' own events, so flows, selections and both formats treat them
alike.
"""

from dataclasses import dataclass, replace
from typing import Any, Collection, Dict, List, Mapping, Sequence, Set, Tuple

from tracemerge.clocks.clock import ClockModel
from tracemerge.inputs.chrome import build
from tracemerge.inputs.rankinfo import RankInfo
from tracemerge.model import RankTrace
from tracemerge.place.placement import Placement, rank_label
from tracemerge.place.served import callee_span_name

PID = "rpc callee sides (from the caller's file)"
CATEGORY = "user_annotation"   # what record_function spans are, as the callee's own would be


@dataclass
class RemoteSpans:
    """What the callee sides add to one combine."""

    jobs: List[Tuple[RankTrace, Placement]]   # one synthetic trace per callee rank, with its placement
    rpc_ids: Set[str]                         # the calls whose callee span is drawn here
    ranks: Dict[int, int]                     # {callee rank: spans drawn}


def drawn_sides(infos: Sequence[RankInfo], ranks: Collection[int]) -> Dict[int, List[Dict[str, Any]]]:
    """{callee rank: [remote record]} of the calls whose callee did not record them, for callee
    ranks in ``ranks`` (kept ranks) or with no file at all."""
    own = {r["rpc_id"] for info in infos for r in info.rpcs if r["role"] == "callee"}
    present = {info.rank for info in infos}
    out: Dict[int, List[Dict[str, Any]]] = {}
    for info in infos:
        if info.rank not in ranks:
            continue
        for rec in info.remote_rpcs:
            callee = rec["callee"]
            if rec["rpc_id"] in own or "start_ns" not in rec or ("end_ns" not in rec and "end_by_ns" not in rec):
                continue
            if callee in present and callee not in ranks:
                continue
            out.setdefault(callee, []).append(rec)
    return out


def remote_spans(infos: Sequence[RankInfo], sides: Dict[int, List[Dict[str, Any]]],
                 clocks: Mapping[int, ClockModel], places: Mapping[int, Placement]) -> RemoteSpans:
    """The synthetic callee traces of a combine: ``sides`` the :func:`drawn_sides` of its
    kept ranks, ``clocks`` {rank: ClockModel}, ``places`` {rank: Placement} of the ranks
    with files."""
    if not sides:
        return RemoteSpans([], set(), {})
    stride = min(p.pid_base for p in places.values())
    next_base = max(p.pid_base for p in places.values()) + stride
    by_rank = {info.rank: info for info in infos}
    any_place = next(iter(places.values()))
    jobs: List[Tuple[RankTrace, Placement]] = []
    ids: Set[str] = set()
    unended = {r["rpc_id"] for recs in sides.values() for r in recs if "end_ns" not in r}
    completes = {r["rpc_id"]: r["complete_ns"] for info in infos for r in info.rpcs
                 if r["role"] == "caller" and r["rpc_id"] in unended and isinstance(r.get("complete_ns"), int)}
    for callee in sorted(sides):
        recs = sides[callee]
        if callee in places:
            # the last pid slot of the callee's block: one more process of its group
            place = replace(places[callee], pid_base=places[callee].pid_base + stride - 1, pids=())
        else:
            first = recs[0]
            place = Placement(rank=callee, label=rank_label(callee, first.get("callee_name", f"rank{callee}"),
                                                            first.get("hostname") or "unknown host"),
                              pid_base=next_base, clock=_clock_of(callee, first, by_rank, clocks),
                              out_base_ns=any_place.out_base_ns)
            next_base += stride
        jobs.append((_trace(callee, [_ended(r, place.clock, completes, clocks) for r in recs]), place))
        ids.update(r["rpc_id"] for r in recs)
    return RemoteSpans(jobs, ids, {callee: len(recs) for callee, recs in sides.items()})


def drawn_pids(own: Mapping[int, Collection[int]]) -> Dict[int, int]:
    """{output pid: rank} of the process each rank's drawn callee spans go in, from the
    output pids of every rank's own processes (``own``: {rank: pids}, a merged trace's
    summary ``pids``): the last slot of the rank's pid block, as :func:`remote_spans` puts
    them. The first rank's block starts at the stride (plan.py: base = (n + 1) × stride)."""
    bases = {rank: min(pids) for rank, pids in own.items() if pids}
    if not bases:
        return {}
    stride = min(bases.values())
    return {base + stride - 1: rank for rank, base in bases.items()}


def _clock_of(callee: int, rec: Dict[str, Any], by_rank: Mapping[Any, RankInfo],
              clocks: Mapping[int, ClockModel]) -> ClockModel:
    """The clock of a callee rank with no file: a rank of its machine's (same boot id), else
    its caller's — the best there is, and exact when they share a machine."""
    boot = rec.get("boot_id")
    same = sorted(r for r, info in by_rank.items() if boot and info.boot_id == boot)
    model = clocks[same[0] if same else rec["caller"]]
    return replace(model, rank=callee, peers=list(model.peers), corrections=list(model.corrections))


def _ended(rec: Dict[str, Any], clock: ClockModel, completes: Mapping[str, int],
           clocks: Mapping[int, ClockModel]) -> Dict[str, Any]:
    """``rec`` with an end: its own, else bounded (see the module's doc): the earlier of
    ``end_by_ns`` and the caller's completion (``completes``: {rpc_id: complete_ns} on the
    caller's clock) on the callee's ``clock``, never before its start."""
    if "end_ns" in rec:
        return rec
    end = rec["end_by_ns"]
    complete = completes.get(rec["rpc_id"])
    if complete is not None and rec["caller"] in clocks:
        end = min(end, int(clock.to_local(clocks[rec["caller"]].to_reference(complete))))
    return dict(rec, end_ns=max(end, rec["start_ns"]), bounded=True)


def _trace(callee: int, recs: List[Dict[str, Any]]) -> RankTrace:
    """The callee spans of ``recs`` as a RankTrace on the callee's clock."""
    base = min(r["start_ns"] for r in recs)
    base -= base % 1000
    events: List[Dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": PID}}]
    # a served op's tid is an int or a string, as Kineto writes either (both in one file
    # ended the write): ints first, then strings, each in their order
    for tid in sorted({r.get("tid", 0) for r in recs}, key=lambda t: (1, 0, t) if isinstance(t, str) else (0, t, "")):
        events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid,
                       "args": {"name": f"thread {tid} (RPC server)"}})
    for r in recs:
        events.append({"ph": "X", "cat": CATEGORY, "name": callee_span_name(r), "pid": PID, "tid": r.get("tid", 0),
                       "ts": (r["start_ns"] - base) / 1000, "dur": max(0, r["end_ns"] - r["start_ns"]) / 1000,
                       "args": {"rpc_id": r["rpc_id"], "role": "callee", "status": r.get("status", "ok"),
                                **({"bounded": True} if r.get("bounded") else {})}})
    return build(f"rank {callee}: callee sides from the callers' files", events, {"baseTimeNanoseconds": base}, None)
