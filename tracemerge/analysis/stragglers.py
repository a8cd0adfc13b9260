"""Stragglers: ranks whose steps are consistently slower than the other ranks'.

For a trace with ``ProfilerStep#N`` spans, each rank's duration of each step (on the
reference clock) is compared with the other ranks' in the same step by a robust z-score,
z = (d − median) / (1.4826 · MAD) over the ranks that ran the step (the MAD is floored at
MIN_SPREAD of the median and at 1 µs, so equal ranks do not divide by zero). A rank is a
straggler when its median z over the steps is at least Z_STRAGGLER (Iglewicz and Hoaglin's
outlier cut for this score). Three ranks are needed for a median to stand against one.

In a lockstep job (data parallel: every step ends in a collective) step times cannot tell
the straggler, since every rank's step ends when the collective does: the rank the others
waited for is found by its arrivals instead (:mod:`tracemerge.analysis.arrivals`), and is
named here with ``by="arrival"``, the waits it caused per step and the work that made it
late, beside the step times.

Each rank's step is split into the kinds of the critical path, from its step thread:
``waiting in a collective`` (the union of its collective waits in the step), RPC waits
(the union of its calls from send to completion) shared out among ``RPC transfer``,
``callee queueing`` and ``callee execution`` in the proportions of those calls' parts,
and ``compute`` for the rest. A straggler is named with the kinds whose per-step median
exceeds the other ranks' the most.
"""

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from tracemerge.analysis.arrivals import LateRank, late_ranks
from tracemerge.analysis.critical_path import (
    COLLECTIVE,
    COMPUTE,
    EXECUTION,
    QUEUEING,
    TRANSFER,
)
from tracemerge.analysis.job_timeline import RPC_WAIT, JobTimeline

Z_STRAGGLER = 3.5
MIN_SPREAD = 0.01
MIN_SPREAD_NS = 1_000
BREAKDOWN = (COMPUTE, TRANSFER, QUEUEING, EXECUTION, COLLECTIVE)


@dataclass
class Straggler:
    rank: int
    score: float             # median robust z over the steps
    slow_steps: int          # steps with z >= Z_STRAGGLER
    steps: int               # steps the rank ran
    excess_ns: float         # median over steps of (its duration - the step's median)
    kinds: Dict[str, float] = field(default_factory=dict)   # {kind: per-step ns above the other ranks' median}, largest first
    by: str = "step time"    # what names it: "step time", "arrival" (the others wait for it), or both
    waits_caused_ns: float = 0.0   # by arrival: per step, how long each other rank waited for it (median)
    late_work: Dict[str, float] = field(default_factory=dict)   # by arrival: {span: ns per step above the others'}


@dataclass
class StepTimes:
    steps: List[str] = field(default_factory=list)        # step names in time order
    ranks: List[int] = field(default_factory=list)
    duration_ns: List[List[Optional[int]]] = field(default_factory=list)  # [step][rank index]: None when the rank has no such step
    z: List[List[Optional[float]]] = field(default_factory=list)          # [step][rank index]
    breakdown: Dict[int, Dict[str, float]] = field(default_factory=dict)  # {rank: {kind: median ns per step}}
    stragglers: List[Straggler] = field(default_factory=list)   # highest score first
    late: List[LateRank] = field(default_factory=list)   # every rank that arrived last somewhere (arrivals.late_ranks)


def stragglers(job: JobTimeline) -> StepTimes:
    """The :class:`StepTimes` of a job (empty when it has no steps)."""
    at: Dict[Tuple[str, int], Tuple[int, int, int]] = {}
    for rank, tl in job.ranks.items():
        for name, start, end, thread in tl.steps:
            at[(name, rank)] = (start, end, thread)
    if not at:
        return _by_arrival(StepTimes(), job)
    ranks = sorted(job.ranks)
    first: Dict[str, int] = {}
    for (name, _), (start, _, _) in at.items():
        first[name] = min(first.get(name, start), start)
    steps = sorted(first, key=lambda n: (first[n], n))
    d, parts = _durations(job, at, steps, ranks)
    med, z = _robust_z(d)
    breakdown = {r: {k: float(np.median(v)) if v else 0.0 for k, v in parts[r].items()} for r in ranks}
    out = StepTimes(steps=steps, ranks=ranks,
                    duration_ns=[[None if np.isnan(v) else int(v) for v in row] for row in d],
                    z=[[None if np.isnan(v) else round(float(v), 3) for v in row] for row in z], breakdown=breakdown)
    for j, rank in enumerate(ranks):
        found = _straggler(rank, z[:, j], d[:, j], med[:, 0], breakdown, ranks)
        if found is not None:
            out.stragglers.append(found)
    out.stragglers.sort(key=lambda s: -s.score)
    return _by_arrival(out, job)


def _durations(job: JobTimeline, at: Dict[Tuple[str, int], Tuple[int, int, int]], steps: List[str],
               ranks: List[int]) -> Tuple[np.ndarray, Dict[int, Dict[str, List[float]]]]:
    """([step][rank index] duration ns, NaN where a rank has no such step; {rank: {kind: ns per step}})."""
    d = np.full((len(steps), len(ranks)), np.nan)
    parts: Dict[int, Dict[str, List[float]]] = {r: {k: [] for k in BREAKDOWN} for r in ranks}
    longest: Dict[Tuple[int, int], int] = {}   # {(rank, thread): the longest wait on it}, for the search by end
    for i, name in enumerate(steps):
        for j, rank in enumerate(ranks):
            found = at.get((name, rank))
            if found is None:
                continue
            d[i, j] = found[1] - found[0]
            for kind, ns in _breakdown(job, rank, *found, longest).items():
                parts[rank][kind].append(ns)
    return d, parts


def _robust_z(d: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(each step's median, the robust z of every duration: its distance from the median in
    MADs, floored; NaN for a step fewer than 3 ranks took)."""
    with np.errstate(all="ignore"):
        med = np.nanmedian(d, axis=1, keepdims=True)
        spread = 1.4826 * np.nanmedian(np.abs(d - med), axis=1, keepdims=True)
        spread = np.maximum(np.maximum(spread, MIN_SPREAD * med), MIN_SPREAD_NS)
        z = (d - med) / spread
        counted = (~np.isnan(d)).sum(axis=1, keepdims=True) >= 3
        return med, np.where(counted, z, np.nan)


def _straggler(rank: int, z: np.ndarray, d: np.ndarray, med: np.ndarray, breakdown: Dict[int, Dict[str, float]],
               ranks: List[int]) -> Optional[Straggler]:
    """The Straggler ``rank`` is by step time (its column ``z``, ``d`` and the steps' medians
    ``med``), or None when its median z is below Z_STRAGGLER."""
    col = z[~np.isnan(z)]
    if not len(col):
        return None
    score = float(np.median(col))
    if score < Z_STRAGGLER:
        return None
    others = [r for r in ranks if r != rank]
    kinds = {k: breakdown[rank][k] - float(np.median([breakdown[r][k] for r in others])) for k in BREAKDOWN}
    kinds = {k: v for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]) if v > 0}
    return Straggler(rank=rank, score=round(score, 3), slow_steps=int((col >= Z_STRAGGLER).sum()),
                     steps=int((~np.isnan(d)).sum()), excess_ns=float(np.nanmedian(d - med)), kinds=kinds)


def _by_arrival(out: StepTimes, job: JobTimeline) -> StepTimes:
    """``out`` with the ranks' arrivals (``late``) and the stragglers by arrival named first
    (``by``: "arrival", or "step time, arrival" for a rank both name)."""
    out.late = late_ranks(job)
    named = {s.rank: s for s in out.stragglers}
    first = []
    for late in out.late:
        if not late.straggler:
            continue
        s = named.get(late.rank)
        if s is None:
            j = out.ranks.index(late.rank) if late.rank in out.ranks else None
            col = [v for row in out.duration_ns if j is not None and (v := row[j]) is not None]
            others = [v for row in out.duration_ns for i, v in enumerate(row) if i != j and v is not None]
            excess = float(np.median(col) - np.median(others)) if col and others else 0.0
            s = Straggler(rank=late.rank, score=round(late.last / max(late.collectives, 1), 3),
                          slow_steps=sum(v >= late.waits_caused_ns / 2 for v in late.per_step_ns.values()),
                          steps=late.steps, excess_ns=excess, by="arrival")
        else:
            out.stragglers.remove(s)
            s.by = "step time, arrival"
        s.waits_caused_ns, s.late_work = late.waits_caused_ns, dict(late.late_work)
        first.append(s)
    out.stragglers = first + out.stragglers
    return out


def _breakdown(job: JobTimeline, rank: int, start: int, end: int, thread: int,
               longest: Dict[Tuple[int, int], int]) -> Dict[str, float]:
    """{kind: ns} of one rank's step [start, end) on its step thread."""
    th = job.thread(rank, thread)
    rpc: List[Tuple[int, int]] = []
    coll: List[Tuple[int, int]] = []
    shares = {TRANSFER: 0, QUEUEING: 0, EXECUTION: 0}
    we = th.wait_end
    if (rank, thread) not in longest:
        longest[(rank, thread)] = max((e - s for s, e in zip(th.wait_start, we)), default=0)
    reach = longest[(rank, thread)]
    j = bisect_right(we, start)
    while j < len(we) and we[j] - reach < end:
        s, e = max(th.wait_start[j], start), min(we[j], end)
        if e > s:
            if th.wait_kind[j] == RPC_WAIT:
                rpc.append((s, e))
                c = th.wait_ref[j]
                if job.has[:, c].all():
                    t1, t2, t3, t4 = (int(v) for v in job.t_ref[:, c])
                    queue = max(t2 - t1 - int(job.floor[c]), 0)
                    execute = max(t3 - t2, 0)
                    shares[QUEUEING] += queue
                    shares[EXECUTION] += execute
                    shares[TRANSFER] += max(t4 - t1 - queue - execute, 0)
                else:
                    shares[TRANSFER] += e - s
            else:
                coll.append((s, e))
        j += 1
    waited_coll = _union(coll)
    waited_all = _union(rpc + coll)
    out: Dict[str, float] = dict.fromkeys(BREAKDOWN, 0)
    out[COLLECTIVE] = waited_coll
    total = sum(shares.values())
    rpc_only = max(waited_all - waited_coll, 0)
    if total:
        for k, v in shares.items():
            out[k] = rpc_only * v / total
    out[COMPUTE] = max(end - start - waited_all, 0)
    return out


def _union(intervals: List[Tuple[int, int]]) -> int:
    """Total length covered by ``intervals`` [(start, end)]."""
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total
