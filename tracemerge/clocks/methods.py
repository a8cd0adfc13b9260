"""Clock alignment: one :class:`~tracemerge.clocks.clock.ClockModel` per rank, from RankInfo only.

Each method is a function ``(infos_by_rank, reference) -> {rank: ClockModel}`` registered
in :data:`METHODS`; ``combine`` and ``offsets`` look methods up by name, so a new method
plugs in by registering itself here.
"""

from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.correlate import match_collectives, match_rpcs
from tracemerge.errors import TracemergeError, UsageError
from tracemerge.clocks.graph import solve
from tracemerge.clocks.bands import collective_constraints, merge, rpc_constraints

METHODS = {}


def method(name):
    def register(fn):
        METHODS[name] = fn
        return fn
    return register


@method("none")
def align_none(infos, reference):
    """Timestamps exactly as written in each file: Kineto's baseTimeNanoseconds is not applied."""
    return {r: ClockModel(rank=r, method="none", offset_ns=info.base_ns or 0) for r, info in infos.items()}


@method("wall")
def align_wall(infos, reference):
    """Trust each file's wall clock (``baseTimeNanoseconds + ts``)."""
    return {r: ClockModel(rank=r, method="wall") for r in infos}


@method("start")
def align_start(infos, reference):
    """Each rank's profiler start coincides with the reference's (PyTorch's RPC-profiler RFC)."""
    ref_start = infos[reference].start_ns
    return {r: ClockModel(rank=r, method="start", offset_ns=info.start_ns - ref_start,
                          anchor_ns=ref_start, samples=1, peers=[] if r == reference else [reference])
            for r, info in infos.items()}


def exchange_clocks(infos, reference, kinds=("rpc", "collective"), drift=None):
    """Clocks from the causal constraints of the exchanges in ``kinds`` (see ntp, graph).

    ``drift``: None fits it when the data pin it down, True/False force it on/off.
    """
    found = list(infos.values())
    sets = []
    if "rpc" in kinds:
        sets.append(rpc_constraints(match_rpcs(found).calls))
    if "collective" in kinds:
        sets.append(collective_constraints(match_collectives(found)))
    models, _ = solve(infos, reference, merge(*sets), drift)
    return models


@method("rpc")
def align_rpc(infos, reference):
    """NTP quadruples of matched RPCs (caller send/complete, callee start/end), drift fitted."""
    return exchange_clocks(infos, reference, ("rpc",))


@method("collective")
def align_collective(infos, reference):
    """Synchronising collectives matched by (group, seq): nobody leaves before all arrived."""
    return exchange_clocks(infos, reference, ("collective",))


@method("auto")
def align_auto(infos, reference):
    """Every exchange the data has (RPCs and collectives), per rank; ranks with none keep their wall clock."""
    return exchange_clocks(infos, reference)


def align(infos, method="wall", reference=None, offsets=None):
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
    models = METHODS[method](by_rank, reference)
    for rank, offset in (offsets or {}).items():
        if rank not in by_rank:
            raise UsageError(f"--offset {rank}={offset}: no input has rank {rank}")
        models[rank] = ClockModel(rank=rank, method="forced", offset_ns=int(offset), error_bound_ns=None)
    return reference, models
