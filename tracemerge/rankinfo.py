"""What a rank file says about its rank: identity, clock anchors, RPC and collective records.

A :class:`RankInfo` is small (no events), so the clock model can be solved over all ranks
while the events themselves are streamed one rank at a time.
"""

import os
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from tracemerge.checks import clock_jumps, job_facts
from tracemerge.errors import RankConflict, TraceError
from tracemerge.kineto_collectives import collectives as kineto_collectives

_RANK_IN_NAME = re.compile(r"(?:rank|worker|node|trainer|proc|process|gpu|device)[-_.]?(\d+)", re.IGNORECASE)

PROFILER_SPAN = "PyTorch Profiler (0)"
ITERATION_START = "Iteration Start: PyTorch Profiler"


@dataclass
class RankInfo:
    path: str
    rank: Optional[int]             # None until assigned when the file could not tell
    rank_source: str                # tracemerge | distributedInfo | filename | order
    worker_name: str
    hostname: str
    job_id: Optional[str]
    base_ns: Optional[int]
    start_ns: int                   # profiler start on the file's clock
    start_source: str               # which anchor gave start_ns
    stop_ns: int                    # profiler stop on the file's clock (the block's, the profiler span's end, the last event's end)
    first_ns: int                   # earliest event time (file's clock)
    last_ns: int                    # latest event end (file's clock)
    events: int
    threads: int
    pids: list                      # original pid values, by pid code
    rpcs: list = field(default_factory=list)
    collectives: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    truncated: bool = False
    timed: bool = True              # the file has at least one timestamped event
    has_block: bool = False         # the file carries a 'tracemerge' block
    job: dict = field(default_factory=dict)  # job_id / world_size / backend the file states (checks.job_facts)


def rank_from_name(path):
    """The rank spelled in a file name (``rank3``, ``rank-3``, ``worker_3`` …), or None."""
    found = _RANK_IN_NAME.findall(os.path.basename(path))
    return int(found[-1]) if found else None


def _rank_candidates(trace):
    block = trace.tracemerge or {}
    if isinstance(block.get("rank"), int):
        return block["rank"], "tracemerge"
    dist = trace.meta.get("distributedInfo")
    if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
        return dist["rank"], "distributedInfo"
    rank = rank_from_name(trace.path)
    if rank is not None:
        return rank, "filename"
    return None, "unknown"


def _profiler_start(trace, first_ns):
    block = trace.tracemerge or {}
    if isinstance(block.get("profile_start_ns"), int):
        return block["profile_start_ns"], "profile_start_ns"
    for label in (PROFILER_SPAN, ITERATION_START):
        code = trace.code_of(label)
        if code is not None:
            hits = np.flatnonzero((trace.name == code) & trace.timed)
            if len(hits):
                return int(trace.ts[hits].min()), label
    return first_ns, "first event"


def _profiler_stop(trace, last_ns):
    """Where profiling stopped: the block's profile_stop_ns, else the end of the profiler's
    span, else the last event's end. With the start, the span the clock model is fitted
    for: a rank file's block alone gives both, so alignment needs no events."""
    block = trace.tracemerge or {}
    if isinstance(block.get("profile_stop_ns"), int):
        return block["profile_stop_ns"]
    code = trace.code_of(PROFILER_SPAN)
    if code is not None:
        hits = np.flatnonzero((trace.name == code) & trace.timed & (trace.dur >= 0))
        if len(hits):
            return int((trace.ts[hits] + trace.dur[hits]).max())
    return last_ns


# What every record must carry to be matched across ranks (docs/rank-file-format.md); the
# other fields are optional, and a side that had not finished leaves its end time out.
RECORD_FIELDS = {
    "rpcs": {"rpc_id": str, "role": str, "caller": int, "callee": int},
    "collectives": {"group": (str, int), "seq": int, "start_ns": int},
}


def records(path, block, key):
    """The ``key`` records of a rank file's block, checked so a bad one is named, not a crash later."""
    found = block.get(key) or []
    if not isinstance(found, list):
        raise TraceError(path, f"'tracemerge.{key}' is a {type(found).__name__}, not a list")
    for i, rec in enumerate(found):
        if not isinstance(rec, dict):
            raise TraceError(path, f"tracemerge.{key}[{i}] is a {type(rec).__name__}, not an object")
        for name, kind in RECORD_FIELDS[key].items():
            value = rec.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise TraceError(path, f"tracemerge.{key}[{i}]: missing or bad '{name}' ({value!r})")
        for name, value in rec.items():
            if name.endswith("_ns") and value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise TraceError(path, f"tracemerge.{key}[{i}]: '{name}' is not integer ns ({value!r})")
    return list(found)


def describe(trace):
    """The :class:`RankInfo` of one read trace."""
    rank, source = _rank_candidates(trace)
    block = trace.tracemerge or {}
    span = trace.time_span()
    empty = [] if span else ["no timestamped events: the file adds no time span to the merged trace"]
    span = span or (0, 0)
    start, start_source = _profiler_start(trace, span[0])
    stem = os.path.basename(trace.path).split(".")[0]
    worker = block.get("worker_name") or stem
    host = block.get("hostname") or trace.meta.get("host_name") or trace.meta.get("hostname") or "unknown host"
    threads = len(set(zip(trace.pid.tolist(), trace.tid.tolist())))
    return RankInfo(
        path=trace.path, rank=rank, rank_source=source, worker_name=str(worker), hostname=str(host),
        job_id=block.get("job_id"), base_ns=trace.base_ns, start_ns=start, start_source=start_source,
        stop_ns=max(start, _profiler_stop(trace, span[1])),
        first_ns=span[0], last_ns=span[1], events=len(trace), threads=threads, pids=list(trace.pids),
        rpcs=records(trace.path, block, "rpcs"),
        collectives=records(trace.path, block, "collectives") if "collectives" in block else kineto_collectives(trace),
        warnings=list(trace.warnings) + empty + clock_jumps(trace, PROFILER_SPAN), timed=not empty, truncated=trace.truncated,
        has_block=trace.tracemerge is not None, job=job_facts(trace))


def assign_ranks(infos, rank_from="auto"):
    """Give every info its rank; ``rank_from="order"`` numbers files in the order given.

    Two files claiming one rank, or a file whose rank cannot be told, is an error: merging
    them silently would put two workers' events on one timeline row.
    """
    if rank_from == "order":
        for i, info in enumerate(infos):
            info.rank, info.rank_source = i, "order"
        return infos
    for info in infos:
        if info.rank is None:
            raise RankConflict(f"{info.path}: cannot tell the rank (no 'tracemerge' block, no "
                               "distributedInfo.rank, no rank in the file name); pass --rank-from order")
    seen = {}
    for info in infos:
        other = seen.setdefault(info.rank, info)
        if other is not info:
            raise RankConflict(f"{info.path}: rank {info.rank} (from {info.rank_source}) is also claimed by "
                               f"{other.path} (from {other.rank_source}); pass --rank-from order to number "
                               "files in the order given")
    return infos
