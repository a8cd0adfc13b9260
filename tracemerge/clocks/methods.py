"""Clock alignment: one :class:`~tracemerge.clocks.clock.ClockModel` per rank, from RankInfo only.

Each method is a function ``(infos_by_rank, reference) -> {rank: ClockModel}`` listed in
:data:`METHODS` with the line ``--align``'s help gives it; ``combine``, ``offsets`` and
``report`` look methods up by name and the CLI's choices and help come from the list, so
a new method is one function and one line there.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict

from tracemerge.clocks.bands import collective_constraints, merge, rpc_constraints
from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.correlate import match_collectives, match_rpcs
from tracemerge.clocks.graph import solve
from tracemerge.errors import TracemergeError, UsageError


@dataclass(frozen=True)
class Method:
    """One alignment method: ``--align NAME``, its function, and what ``--help`` says of it."""

    name: str
    align: Callable[[Dict[int, Any], int, Any], Dict[int, ClockModel]]   # (infos by rank, reference, memo)
    summary: str


def align_none(infos, reference, memo=None):
    """Timestamps exactly as written in each file: Kineto's baseTimeNanoseconds is not applied."""
    return {r: ClockModel(rank=r, method="none", offset_ns=info.base_ns or 0) for r, info in infos.items()}


def align_wall(infos, reference, memo=None):
    """Trust each file's wall clock (``baseTimeNanoseconds + ts``)."""
    return {r: ClockModel(rank=r, method="wall") for r in infos}


def align_start(infos, reference, memo=None):
    """Each rank's profiler start coincides with the reference's (PyTorch's RPC-profiler RFC)."""
    ref_start = infos[reference].start_ns
    return {r: ClockModel(rank=r, method="start", offset_ns=info.start_ns - ref_start,
                          anchor_ns=ref_start, samples=1, peers=[] if r == reference else [reference])
            for r, info in infos.items()}


def exchange_clocks(infos, reference, kinds=("rpc", "collective"), drift=None, memo=None):
    """Clocks from the causal constraints of the exchanges in ``kinds`` (see bands, graph).

    ``drift``: None fits it when the data pin it down, True/False force it on/off. ``memo``:
    the session's :class:`~tracemerge.clocks.correlate.RpcMemo`.
    """
    found = list(infos.values())
    sets = []
    if "rpc" in kinds:
        sets.append(rpc_constraints(match_rpcs(found, memo).calls))
    if "collective" in kinds:
        sets.append(collective_constraints(match_collectives(found)))
    models, _ = solve(infos, reference, merge(*sets), drift)
    return models


def align_rpc(infos, reference, memo=None):
    """NTP quadruples of matched RPCs (caller send/complete, callee start/end), drift fitted."""
    return exchange_clocks(infos, reference, ("rpc",), memo=memo)


def align_collective(infos, reference, memo=None):
    """Synchronising collectives matched by (group, seq): nobody leaves before all arrived."""
    return exchange_clocks(infos, reference, ("collective",), memo=memo)


def align_auto(infos, reference, memo=None):
    """Every exchange the data has (RPCs and collectives), per rank; ranks with none keep their wall clock."""
    return exchange_clocks(infos, reference, memo=memo)


METHODS: Dict[str, Method] = {m.name: m for m in (
    Method("none", align_none, "timestamps as written"),
    Method("wall", align_wall, "each file's wall clock"),
    Method("start", align_start, "profiler starts coincide"),
    Method("rpc", align_rpc, "NTP-style offsets and drift from matched RPCs"),
    Method("collective", align_collective, "from matched collectives"),
    Method("auto", align_auto, "every exchange the data has, per rank, wall clock for ranks with none"),
)}


def align(infos, method="wall", reference=None, offsets=None, memo=None):
    """{rank: ClockModel} for ``infos`` (a list of RankInfo with ranks assigned).

    ``offsets`` ({rank: ns}) forces known offsets over whatever the method found.
    """
    by_rank = {info.rank: info for info in infos}
    if reference is None:
        reference = min(by_rank)
    if reference not in by_rank:
        raise UsageError(f"--reference {reference}: no input has that rank (ranks: {sorted(by_rank)})")
    if method not in METHODS:
        raise TracemergeError(f"unknown alignment method {method!r} (choose from {', '.join(METHODS)})")
    models = METHODS[method].align(by_rank, reference, memo)
    for rank, offset in (offsets or {}).items():
        if rank not in by_rank:
            raise UsageError(f"--offset {rank}={offset}: no input has rank {rank}")
        models[rank] = ClockModel(rank=rank, method="forced", offset_ns=int(offset), error_bound_ns=None)
    return reference, models
