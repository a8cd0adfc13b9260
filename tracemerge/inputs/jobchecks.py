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


def rpc_peers(infos):
    """Warnings for RPC records whose peer rank has no input file, with counts per rank."""
    missing = match_rpcs(infos).missing_peer
    return [f"{n} RPC records name rank {rank} as their peer, but no input file has rank {rank}"
            for rank, n in sorted(missing.items())]
