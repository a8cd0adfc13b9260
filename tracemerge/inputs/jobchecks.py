"""Checks over all the ranks read, as warnings (or, with ``strict``, refusals):

- :func:`check_job`: files of different jobs mixed together, ranks missing.
- :func:`rpc_peers`: RPC records naming a rank that has no input file.
"""

from tracemerge.clocks.correlate import match_rpcs
from tracemerge.errors import RankConflict
from tracemerge.inputs.rankchecks import JOB_KEYS


def check_job(infos, strict=False):
    """Warnings when the files look like they come from different jobs, or ranks are missing.

    Disagreeing job_id, world_size or backend (``RankInfo.job``) is refused with
    ``strict`` (:class:`RankConflict`).
    """
    conflicts = []
    for key in JOB_KEYS:
        seen = {}
        for info in infos:
            if info.job.get(key) is not None:
                seen.setdefault(info.job[key], []).append(info.path)
        if len(seen) > 1:
            parts = "; ".join(f"{value!r} in {', '.join(paths)}" for value, paths in seen.items())
            conflicts.append(f"the files come from different jobs: {key} differs ({parts})")
    if conflicts and strict:
        raise RankConflict(conflicts[0] + " (refused by --strict)")
    sizes = {i.job.get("world_size") for i in infos if isinstance(i.job.get("world_size"), int)}
    if len(sizes) == 1:
        size = sizes.pop()
        have = {info.rank for info in infos}
        absent = sorted(set(range(size)) - have)
        if absent:
            conflicts.append(f"world_size is {size} but {_ranks(absent)} {'has' if len(absent) == 1 else 'have'} "
                             "no input file")
        beyond = sorted(r for r in have if r >= size)
        if beyond:
            conflicts.append(f"{_ranks(beyond)} {'is' if len(beyond) == 1 else 'are'} not below world_size {size}")
    return conflicts


def _ranks(ranks):
    listed = ", ".join(map(str, ranks[:20])) + (f" … ({len(ranks)} in all)" if len(ranks) > 20 else "")
    return f"rank {listed}" if len(ranks) == 1 else f"ranks {listed}"


def rpc_peers(infos, memo=None):
    """Warnings for RPC records whose peer rank has no input file, with counts per rank, and
    one for calls with a side missing: why, and what to do."""
    match = match_rpcs(infos, memo)
    warnings = [f"{n} RPC records name rank {rank} as their peer, but no input file has rank {rank}"
                for rank, n in sorted(match.missing_peer.items())]
    sides = rpc_sides(match)
    if sides["caller_only"]:
        warnings.append(
            f"{sides['caller_only']} of {sides['calls']} RPCs have only the caller's side: their callees "
            "recorded none and the callers' files carry no callee sides for them (captured by an older "
            "tracemerge, or a callee did not answer when the caller wrote its file: see the file's "
            "tracemerge.remote_sides); capture again with this version, or keep the callees inside profile")
    if sides["callee_only"]:
        warnings.append(
            f"{sides['callee_only']} of {sides['calls']} RPCs have only the callee's side: their callers' files "
            "were not given or stopped recording before the call; give every rank's file")
    return warnings


def rpc_sides(match):
    """{"calls", "both_sides", "caller_only", "callee_only"} of an RPC join (correlate.RpcMatch)."""
    calls = len(match.calls)
    return {"calls": calls, "both_sides": calls - match.caller_only - match.callee_only,
            "caller_only": match.caller_only, "callee_only": match.callee_only}
