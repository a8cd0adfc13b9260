"""Checks over all the ranks read, as warnings (or, with ``strict``, refusals):

- :func:`check_job`: files of different jobs mixed together, ranks missing.
- :func:`rpc_peers`: RPC records naming a rank that has no input file.
- :func:`check_windows`: ranks whose profiling windows never meet and that no exchange joins.
"""

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from tracemerge.clocks.graph import components
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
    ended = sorted(i.rank for i in infos if i.ending and i.rank is not None)
    if sides["caller_only"] and ended:
        # a failed job: no older capture to blame, the callees ended before they answered
        warnings.append(
            f"{sides['caller_only']} of {sides['calls']} RPCs have only the caller's side: the job failed "
            f"({_ranks(ended)} ended early: died, or ended by a signal), and calls in flight then, or to a rank that "
            "had died, have no callee side (the report's post-mortem lists them)")
    elif sides["caller_only"]:
        warnings.append(
            f"{sides['caller_only']} of {sides['calls']} RPCs have only the caller's side: their callees "
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
