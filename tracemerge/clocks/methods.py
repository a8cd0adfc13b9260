"""Clock alignment: one :class:`~tracemerge.clocks.clock.ClockModel` per rank, from RankInfo only.

Each method is a function ``(infos_by_rank, reference) -> {rank: ClockModel}`` listed in
:data:`tracemerge.clocks.METHODS` with the line ``--align``'s help gives it; ``combine``,
``offsets`` and ``report`` look methods up by name and the CLI's choices and help come from
the list, so a new method is one function and one line there (naming the function by its
module: the list is read for ``--help`` without importing this one).
"""

from dataclasses import replace
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from tracemerge.clocks import METHODS  # the registry, read without this module (clocks/__init__.py)
from tracemerge.clocks.bands import collective_constraints, merge, merge_one_way, p2p_constraints, rpc_constraints
from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.consistent import within_exchanges
from tracemerge.clocks.cpu_collective import auto_with_ends, ends_linked
from tracemerge.clocks.graph import solve
from tracemerge.clocks.nccl_kernel import auto_with_kernels, kernel_linked
from tracemerge.correlate.match import Correlation, correlate
from tracemerge.errors import TracemergeError, UsageError


def align_none(infos: Mapping[int, Any], reference: int, links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """Timestamps exactly as written in each file: Kineto's baseTimeNanoseconds is not applied."""
    return {r: ClockModel(rank=r, method="none", offset_ns=info.base_ns or 0) for r, info in infos.items()}


def align_wall(infos: Mapping[int, Any], reference: int, links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """Trust each file's wall clock (``baseTimeNanoseconds + ts``)."""
    return {r: ClockModel(rank=r, method="wall") for r in infos}


def align_start(infos: Mapping[int, Any], reference: int, links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """Each rank's profiler start coincides with the reference's (PyTorch's RPC-profiler RFC)."""
    ref_start = infos[reference].start_ns
    return {r: ClockModel(rank=r, method="start", offset_ns=info.start_ns - ref_start,
                          anchor_ns=ref_start, samples=1, peers=[] if r == reference else [reference])
            for r, info in infos.items()}


def exchange_clocks(infos: Mapping[int, Any], reference: int, kinds: Iterable[str] = ("rpc", "collective", "p2p"),
                    drift: Optional[bool] = None, links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """Clocks from the causal constraints of the exchanges in ``kinds`` (see bands, graph);
    ``p2p``: sends matched with their receives, one-way bounds.

    ``drift``: None fits it where no constant offset fits the exchanges, True/False force it on/off. ``links``:
    the job's :class:`~tracemerge.correlate.match.Correlation` (joined here when not given).
    """
    links = links or correlate(list(infos.values()))
    sets = []
    if "rpc" in kinds:
        sets.append(rpc_constraints(links.rpcs.calls))
    if "collective" in kinds:
        sets.append(collective_constraints(links.collectives))
    one_way = p2p_constraints(links.p2p) if "p2p" in kinds else {}
    models, _ = solve(infos, reference, merge_one_way(merge(*sets), one_way), drift)
    return models


def align_rpc(infos: Mapping[int, Any], reference: int, links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """NTP quadruples of matched RPCs (caller send/complete, callee start/end), drift fitted."""
    return exchange_clocks(infos, reference, ("rpc",), links=links)


def align_collective(infos: Mapping[int, Any], reference: int, links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """Synchronising collectives matched by (group, seq): nobody leaves before all arrived;
    and sends matched with their receives (a receive cannot end before its send started)."""
    return exchange_clocks(infos, reference, ("collective", "p2p"), links=links)


def align_auto(infos: Mapping[int, Any], reference: int, links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """Every exchange the data has (RPCs, collectives, sends and receives), per machine; ranks with none keep
    their wall clock. Ranks with one boot id read one wall clock (:func:`machines`): those
    of the reference's machine are exact (``shared-clock``), and every other machine gets
    one model, fitted from all exchanges between its ranks and the others'. Where NCCL
    kernels of matched collectives join ranks, their ends win (``nccl-kernel``,
    :func:`~tracemerge.clocks.nccl_kernel.auto_with_kernels`); before them, the ends of gloo
    collectives' execution spans where they bound a clock tighter (``cpu-collective``).
    Each estimate is made rank by rank; last, every clock is moved where needed into what
    its exchanges allow (:func:`~tracemerge.clocks.consistent.within_exchanges`), so no
    call, drawn span or collective is out of order."""
    links = links or correlate(list(infos.values()))
    rep, contradicted = split_contradicted(machines(infos, reference), links.rpcs.calls)
    models = _auto_exchanges(infos, reference, links, rep, contradicted)
    if ends_linked(links):   # CPU completions: gloo collectives' ends, where they are tighter
        models = auto_with_ends(infos, reference, links, models)
    if kernel_linked(links):
        models = auto_with_kernels(infos, reference, links, models)
    return within_exchanges(list(infos.values()), models, rep, links)


def _auto_exchanges(infos: Mapping[int, Any], reference: int, links: Correlation, rep: Dict[int, int],
                    contradicted: Dict[int, str]) -> Dict[int, ClockModel]:
    """:func:`align_auto` from the RPCs and collective records; ``rep``: {rank: the rank
    that speaks for its clock}, ``contradicted``: {rank: why it is not its machine's}."""
    calls = links.rpcs.calls
    if all(r == m for r, m in rep.items()):
        return _noted(exchange_clocks(infos, reference, links=links), contradicted)
    pooled = replace(calls, caller=_remapped(calls.caller, rep), callee=_remapped(calls.callee, rep))
    heads = set(rep.values())
    collectives = collective_constraints(links.collectives, heads)  # machines meet through their heads
    p2p = replace(links.p2p, sender=_remapped(links.p2p.sender, rep), receiver=_remapped(links.p2p.receiver, rep))
    models, _ = solve({r: infos[r] for r in sorted(heads)}, reference,
                      merge_one_way(merge(rpc_constraints(pooled), collectives), p2p_constraints(p2p)))
    out = {}
    for r in infos:
        head = rep[r]
        if r == head:
            out[r] = models[r]
        elif head == reference:
            out[r] = ClockModel(rank=r, method="shared-clock", error_bound_ns=0, peers=[reference])
        else:
            out[r] = replace(models[head], rank=r, peers=list(models[head].peers), corrections=[], note=" ".join(
                filter(None, (f"shares rank {head}'s clock (same boot_id).", models[head].note))))
    return _noted(out, contradicted)


# a callee's start before its caller's send, or its end after the caller's completion, by
# more than this is a contradiction of one clock: time.time_ns() on both sides, ns apart
# at most by the resolution of the clock and the order of the two reads
SHARED_CLOCK_SLACK_NS = 1_000


def split_contradicted(rep: Dict[int, int], calls: Any) -> Tuple[Dict[int, int], Dict[int, str]]:
    """(``rep`` with the ranks whose RPCs contradict their machine's one clock on a machine
    of their own, {rank: why}).

    An RPC between two ranks of one machine contradicts the shared clock when its callee
    side lies outside the caller's call by more than SHARED_CLOCK_SLACK_NS. The rank with
    the most such RPCs (never the one speaking for the machine) leaves it, and so on until
    none is left: one rank off its machine's clock contradicts every peer, its peers only it.
    """
    if not len(calls):
        return rep, {}
    t1, t2, t3, t4 = calls.times
    has = calls.has
    early = has[0] & has[1] & (t2 < t1 - SHARED_CLOCK_SLACK_NS)   # served before it was sent
    late = has[2] & has[3] & (t3 > t4 + SHARED_CLOCK_SLACK_NS)    # served after it completed
    by = np.maximum(np.where(early, t1 - t2, 0), np.where(late, t3 - t4, 0))
    bad = [(a, b, int(d)) for a, b, d in zip(calls.caller[early | late].tolist(), calls.callee[early | late].tolist(),
                                            by[early | late].tolist())
           if a != b and a in rep and b in rep and rep[a] == rep[b]]
    out, why = dict(rep), {}
    while bad:
        counts: Dict[int, int] = {}
        for a, b, _ in bad:
            for r in (a, b):
                if r != rep[r]:
                    counts[r] = counts.get(r, 0) + 1
        moved = max(counts, key=lambda r: (counts[r], r))
        mine = [(a, b, d) for a, b, d in bad if moved in (a, b)]
        why[moved] = (f"shares a boot_id with rank {rep[moved]}, but {len(mine)} RPC{'s' if len(mine) > 1 else ''} "
                      f"with ranks of its machine contradict one clock (by up to {max(d for *_, d in mine) / 1000:.1f} "
                      "µs): estimated from its exchanges instead")
        out[moved] = moved
        bad = [(a, b, d) for a, b, d in bad if moved not in (a, b)]
    return out, why


def _noted(models: Dict[int, ClockModel], notes: Mapping[int, str]) -> Dict[int, ClockModel]:
    """``models`` with ``notes`` ({rank: text}) added to their ranks' notes."""
    for r, text in notes.items():
        if r in models:
            models[r] = replace(models[r], note=" ".join(filter(None, (text, models[r].note))))
    return models


def machine_of(info: Any) -> Any:
    """The key of a rank's machine: its boot id (ranks with the same non-empty one share one
    wall clock); a rank without one is a machine of its own."""
    return info.boot_id or ("", info.rank)


def machines(infos: Mapping[int, Any], reference: int) -> Dict[int, int]:
    """{rank: the rank that speaks for its machine} (:func:`machine_of`): the reference
    speaks for its machine, the lowest rank for others."""
    heads: Dict[Any, int] = {}
    for r in sorted(infos, key=lambda r: (r != reference, r)):
        heads.setdefault(machine_of(infos[r]), r)
    return {r: heads[machine_of(infos[r])] for r in infos}


def _remapped(ranks: np.ndarray, rep: Dict[int, int]) -> np.ndarray:
    """A rank column with every rank replaced by its machine's (ranks of no input kept):
    one lookup for the whole column, not a pass per rank."""
    known = np.array(sorted(rep), np.int64)
    heads = np.array([rep[r] for r in known.tolist()], np.int64)
    at = np.minimum(np.searchsorted(known, ranks), max(len(known) - 1, 0))
    hit = known[at] == ranks if len(known) else np.zeros(len(ranks), bool)
    return np.where(hit, heads[at] if len(known) else ranks, ranks)


def align(infos: Sequence[Any], method: str = "wall", reference: Optional[int] = None,
          offsets: Optional[Mapping[int, int]] = None,
          links: Optional[Correlation] = None) -> Tuple[int, Dict[int, ClockModel]]:
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
    models = METHODS[method].align(by_rank, reference, links or correlate(infos))
    for rank, offset in (offsets or {}).items():
        if rank not in by_rank:
            raise UsageError(f"--offset {rank}={offset}: no input has rank {rank}")
        if rank == reference:
            # the reference's clock is the one every rank is placed on: an offset for it once
            # moved it away from the ranks sharing its clock, which stayed where they were
            raise UsageError(f"--offset {rank}={offset}: rank {rank} is the reference, whose clock the others are "
                             "placed on (offset 0 by definition); give the offsets of the other ranks, or pick "
                             "another --reference")
        models[rank] = ClockModel(rank=rank, method="forced", offset_ns=int(offset), error_bound_ns=None)
    return reference, models
