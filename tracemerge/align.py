"""Clock alignment: one :class:`~tracemerge.clock.ClockModel` per rank, from RankInfo only.

Each method is a function ``(infos_by_rank, reference) -> {rank: ClockModel}`` registered
in :data:`METHODS`; ``combine`` and ``offsets`` look methods up by name, so a new method
plugs in by registering itself here.
"""

from tracemerge.clock import ClockModel
from tracemerge.errors import TracemergeError

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


def align(infos, method="wall", reference=None, offsets=None):
    """{rank: ClockModel} for ``infos`` (a list of RankInfo with ranks assigned).

    ``offsets`` ({rank: ns}) forces known offsets over whatever the method found.
    """
    by_rank = {info.rank: info for info in infos}
    if reference is None:
        reference = min(by_rank)
    if reference not in by_rank:
        raise TracemergeError(f"--reference {reference}: no input has that rank (ranks: {sorted(by_rank)})")
    if method not in METHODS:
        raise TracemergeError(f"unknown alignment method {method!r} (choose from {', '.join(METHODS)})")
    models = METHODS[method](by_rank, reference)
    for rank, offset in (offsets or {}).items():
        if rank not in by_rank:
            raise TracemergeError(f"--offset {rank}={offset}: no input has rank {rank}")
        models[rank] = ClockModel(rank=rank, method="forced", offset_ns=int(offset), error_bound_ns=0)
    return reference, models
