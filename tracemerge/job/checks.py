"""Checks over all the ranks read, as warnings (or, with ``strict``, refusals):

- :func:`check_job`: files of different jobs mixed together, ranks missing.
- :func:`rpc_peers`: RPC records naming a rank that has no input file.
- :func:`check_windows`: ranks whose profiling windows never meet and that no exchange joins.
- :func:`check_links`: ranks that nothing links to another rank, whose clocks are taken on trust.
"""

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from tracemerge.algorithms.groups import components
from tracemerge.correlate.match import Correlation, RpcMatch
from tracemerge.errors import RankConflict
from tracemerge.inputs.rankchecks import JOB_KEYS
from tracemerge.inputs.rankinfo import RankInfo, rank_of


def check_job(infos: Sequence[RankInfo], strict: bool = False) -> List[str]:
    """Warnings when the files look like they come from different jobs, or ranks are missing.

    Disagreeing job_id, world_size or backend (``RankInfo.job``) is refused with
    ``strict`` (:class:`RankConflict`).
    """
    conflicts = []
    for key in JOB_KEYS:
        seen: Dict[Any, List[str]] = {}
        for info in infos:
            if info.job.get(key) is not None:
                seen.setdefault(info.job[key], []).append(info.path)
        if len(seen) > 1:
            parts = "; ".join(f"{value!r} in {', '.join(paths)}" for value, paths in seen.items())
            conflicts.append(f"the files come from different jobs: {key} differs ({parts})")
    if conflicts and strict:
        raise RankConflict(conflicts[0] + " (refused by --strict)")
    sizes = {size for i in infos if isinstance(size := i.job.get("world_size"), int)}
    if len(sizes) == 1:
        size = sizes.pop()
        have = {rank_of(info) for info in infos}
        absent = sorted(set(range(size)) - have)
        if absent:
            conflicts.append(f"world_size is {size} but {_ranks(absent)} {'has' if len(absent) == 1 else 'have'} "
                             "no input file")
        beyond = sorted(r for r in have if r >= size)
        if beyond:
            conflicts.append(f"{_ranks(beyond)} {'is' if len(beyond) == 1 else 'are'} not below world_size {size}")
    return conflicts


def _ranks(ranks: List[int]) -> str:
    listed = ", ".join(map(str, ranks[:20])) + (f" … ({len(ranks)} in all)" if len(ranks) > 20 else "")
    return f"rank {listed}" if len(ranks) == 1 else f"ranks {listed}"


def rpc_peers(infos: Sequence[RankInfo], links: Correlation) -> List[str]:
    """Warnings for RPC records whose peer rank has no input file, with counts per rank, and
    one for calls with a side missing: why, and what to do."""
    match = links.rpcs
    warnings = [f"{n} RPC records name rank {rank} as their peer, but no input file has rank {rank}"
                for rank, n in sorted(match.missing_peer.items())]
    sides = rpc_sides(match)
    # a call whose callee rank has no input file has no callee side to find: the file was not given
    has = match.calls.has
    caller_only = has[0] & ~has[1]  # as RpcMatch.caller_only counts them: a send, no start
    absent = int((caller_only & ~np.isin(match.calls.callee, [rank_of(i) for i in infos])).sum())
    # builtins sent as themselves that the pairing left without a side: its own note says why
    native = np.fromiter((bool(rec.get("native")) for rec in match.calls.first), bool, len(match.calls))
    said = int((caller_only & native & np.isin(match.calls.callee, [rank_of(i) for i in infos if i.served_ops])).sum())
    if absent:
        warnings.append(f"{absent} of {sides['calls']} RPCs have only the caller's side because their callee "
                        "ranks have no input file: give every rank's file")
    # a Flight Recorder dump's group status says nothing of how its rank ended
    ended = sorted(i.rank for i in infos if i.rank is not None and set(i.ending) - {"flight_recorder"})
    if sides["caller_only"] - absent - said and ended:
        # a failed job: no older capture to blame, the callees ended before they answered
        warnings.append(
            f"{sides['caller_only'] - absent - said} of {sides['calls']} RPCs have only the caller's side: the job failed "
            f"({_ranks(ended)} ended early: died, or ended by a signal), and calls in flight then, or to a rank that "
            "had died, have no callee side (the report's post-mortem lists them)")
    elif sides["caller_only"] - absent - said:
        warnings.append(
            f"{sides['caller_only'] - absent - said} of {sides['calls']} RPCs have only the caller's side: their callees "
            "recorded none and the callers' files carry no callee sides for them (captured by an older "
            "tracemerge, or a callee did not answer when the caller wrote its file: see the file's "
            "tracemerge.remote_sides); capture again with this version, or keep the callees inside profile")
    if sides["callee_only"]:
        outside, absent = _callee_only_why(infos, match)
        why = []
        if absent:
            why.append(f"{absent} {_were(absent)} made by ranks that have no input file: give every rank's file")
        if outside:
            why.append(f"{outside} {_were(outside)} made while their caller was not recording, outside its profiling window (a "
                       "worker that enters profile after rpc.init_rpc issues or serves calls before its window "
                       "opens): enter profile before rpc.init_rpc in every worker, as the README's first block does")
        rest = sides["callee_only"] - outside - absent
        if rest:
            why.append(f"{rest} have no caller record although they fall inside their caller's window (the caller's "
                       "file was cut, or its capture did not record them)")
        warnings.append(f"{sides['callee_only']} of {sides['calls']} RPCs have only the callee's side: "
                        + "; ".join(why))
    return warnings


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


def _callee_only_why(infos: Sequence[RankInfo], match: RpcMatch) -> Tuple[int, int]:
    """(callee-only calls whose callee side lies outside the caller's profiling window, those
    whose caller has no input file). Windows and sides are compared on the files' own
    clocks: exact for ranks of one machine, and off by no more than the clocks' skew
    (milliseconds) elsewhere, against calls made seconds before a window opened."""
    window = {info.rank: (info.start_ns, info.stop_ns) for info in infos}
    calls = match.calls
    has = calls.has   # rows t1..t4
    only = has[1] & ~has[0]  # as RpcMatch.callee_only counts them: a start, no send
    outside = absent = 0
    for n in np.flatnonzero(only).tolist():
        caller = int(calls.caller[n])
        if caller not in window:
            absent += 1
            continue
        lo, hi = window[caller]
        t = int(calls.times[1, n])
        outside += not lo <= t <= hi
    return outside, absent


def rpc_sides(match: RpcMatch) -> Dict[str, int]:
    """{"calls", "both_sides", "caller_only", "callee_only"} of an RPC join (correlate.RpcMatch)."""
    calls = len(match.calls)
    return {"calls": calls, "both_sides": calls - match.caller_only - match.callee_only,
            "caller_only": match.caller_only, "callee_only": match.callee_only}


def check_windows(infos: Sequence[RankInfo], links: Correlation, strict: bool = False) -> List[str]:
    """A warning when the ranks fall into groups that nothing ties together: no group's
    profiling window overlaps another's (on the files' own clocks) and no RPC or
    collective of both sides joins them: most likely files of different runs, which no
    alignment can place on one timeline. Refused with ``strict`` (:class:`RankConflict`)."""
    if len(infos) < 2:
        return []
    edges = []
    # windows that overlap, in one sweep by start: each window meets the running end
    ordered = sorted(infos, key=lambda i: (min(i.start_ns, i.first_ns), i.rank))
    reach, last = None, None
    for info in ordered:
        start, end = min(info.start_ns, info.first_ns), max(info.stop_ns, info.last_ns)
        if reach is not None and start <= reach:
            edges.append((info.rank, last))
        if reach is None or end > reach:
            reach, last = end, info.rank
    calls = links.rpcs.calls
    if len(calls):
        has = calls.has  # rows t1..t4: the caller's send and complete, the callee's start and end
        both = (has[0] | has[3]) & (has[1] | has[2])
        edges += zip(calls.caller[both].tolist(), calls.callee[both].tolist())
    coll = links.collectives  # each member joined to its collective's first member (entries, not a dense grid)
    ranks = np.array(coll.ranks, np.int64)
    head = coll.member_col[np.searchsorted(coll.member_row, coll.member_row)]
    edges += zip(ranks[coll.member_col].tolist(), ranks[head].tolist())
    groups = components([info.rank for info in infos], edges)
    if len(groups) < 2:
        return []
    listed = " / ".join(_ranks(g) for g in sorted(groups))
    problem = (f"the profiling windows of {listed} do not overlap (on the files' own clocks) and no RPC or "
               "collective joins them: files of different runs? They are placed by their clocks alone")
    if strict:
        raise RankConflict(problem + " (refused by --strict)")
    return [problem]


def check_links(infos: Sequence[RankInfo], links: Correlation, strict: bool = False) -> List[str]:
    """A warning for each rank that nothing links to another rank — no RPC with both sides,
    no collective matched with another rank, no send or receive matched with another rank's,
    no other rank on its machine (boot_id) — so
    that no alignment can place it and its clock is taken on trust; what would link it.
    Refused with ``strict`` (:class:`RankConflict`)."""
    if len(infos) < 2:
        return []
    linked: set = set()
    calls = links.rpcs.calls
    if len(calls):
        has = calls.has  # rows t1..t4: the caller's send and complete, the callee's start and end
        both = (has[0] | has[3]) & (has[1] | has[2]) & (calls.caller != calls.callee)
        linked.update(calls.caller[both].tolist(), calls.callee[both].tolist())
    coll = links.collectives
    members = np.bincount(coll.member_row, minlength=len(coll)) if len(coll) else np.zeros(0, np.int64)
    shared = members[coll.member_row] >= 2 if len(coll) else np.zeros(0, bool)
    linked.update(np.array(coll.ranks, np.int64)[coll.member_col[shared]].tolist())
    # sends one way bound a clock on one side only: a pair links where they go both ways
    ways = set(zip(links.p2p.sender.tolist(), links.p2p.receiver.tolist()))
    linked.update(r for s, q in ways if (q, s) in ways for r in (s, q))
    machines: Dict[str, List[int]] = {}
    for info in infos:
        if info.boot_id:
            machines.setdefault(info.boot_id, []).append(rank_of(info))
    linked.update(r for ranks in machines.values() if len(ranks) > 1 for r in ranks)
    alone = [info for info in infos if info.rank not in linked]
    out = []
    for info in alone:
        own = len(info.collectives)
        why = (f"its {own} collective record{'s' if own != 1 else ''} match no other rank's (another group, or an "
               "order the others do not share)" if own else "it has no collective record (no NCCL kernel, no c10d "
               "group fields)")
        # the sentence is kept as the golden outputs have it; matched sends and receives link too
        out.append(f"rank {info.rank} ({info.path}) is linked to no other rank: {why}, no RPC with both sides, no "
                   f"other rank on its machine (boot_id); its clock is taken on trust. What would link it: "
                   f"{_collective_advice(info)}, RPCs captured by tracemerge on both sides, or a rank file with its "
                   "machine's boot_id")
    if out and strict:
        raise RankConflict(out[0] + " (refused by --strict)")
    return out


def _collective_advice(info: RankInfo) -> str:
    """What collectives would link a rank, by its backend: a gloo job's are its own events,
    an NCCL job's its kernels (a CPU-only trace of a gloo job has no NCCL or CUDA activity)."""
    if str(info.job.get("backend") or "").lower() == "gloo":
        return ("the gloo collectives of the groups it shares with the others, as its trace records them "
                "(c10d::allreduce_ and gloo:all_reduce spans: profile the steps that run them)")
    return ("the NCCL kernels or c10d collective records of the groups it shares with the others (torch.profiler "
            "with CUDA activity)")
