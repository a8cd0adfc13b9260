"""Stragglers by arrival: in a lockstep job the straggler is the rank the others wait for.

Data-parallel ranks meet in a collective every step (DDP's gradient all_reduce), so the
rank that is late does not show in step times: every rank's step ends when the
collective does, and the others' time goes into waiting for it. The algorithm:

1. For each collective every member recorded (the job's joins, on the reference clock:
   :class:`~tracemerge.analysis.job_timeline.JobTimeline`), the **last arriver** is the
   rank that entered it last, and the **waits it caused** are the sum over the other ranks
   of (its arrival − theirs).
2. Each collective belongs to the step of its last arriver in which it arrived (the rank's
   ``ProfilerStep#N`` span around its arrival; the whole trace when it has no steps).
3. A rank is a straggler by arrival when it arrived last in at least :data:`LATE_SHARE` of
   the complete collectives of at least two ranks, and the waits it caused per step (the
   median over its steps; each step's total divided among the others, so: how long each
   other rank waited for it) are at least :data:`MIN_WAIT_SHARE` of the median step, and at
   least :data:`MIN_WAIT_NS`.
4. **What makes it late**: for each collective it arrived at last, the stretch of its
   issuing thread since it was last released (the previous collective's completion on
   that thread, else its step's start) up to its arrival is compared with the same stretch
   of every other rank: the spans whose own time there exceeds the other ranks' median the
   most (per step, median over its steps) are its late work.
"""

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from tracemerge.algorithms.arrays import median as median_of  # np.median imports numpy.ma
from tracemerge.analysis.job_timeline import COLLECTIVE_WAIT, JobTimeline

LATE_SHARE = 0.5          # arrived last in at least this share of the collectives it was in
MIN_WAIT_SHARE = 0.05     # the waits it caused per step: at least this share of the median step
MIN_WAIT_NS = 100_000     # ... and at least this
TOP_WORK = 3              # spans named as what makes it late
WHOLE = ""                # the step of a collective in a trace with no steps


@dataclass
class LateRank:
    """One rank's arrivals: how often it came last, and what the others waited for it."""

    rank: int
    last: int                     # collectives it arrived at last
    collectives: int              # complete collectives of >= 2 ranks it was in
    waits_caused_ns: float        # median over its steps of the waits it caused (per other rank)
    steps: int                    # steps in which it arrived last at least once
    per_step_ns: Dict[str, int] = field(default_factory=dict)   # {step: waits it caused there, per other rank}
    late_work: Dict[str, float] = field(default_factory=dict)   # {span name: ns per step above the others'}
    straggler: bool = False


def late_ranks(job: JobTimeline) -> List[LateRank]:
    """Every rank that arrived last at some collective, the stragglers among them first
    (module docstring), then by waits caused."""
    steps = {rank: sorted((s, e, name) for name, s, e, _ in tl.steps) for rank, tl in job.ranks.items()}
    counted: Dict[int, int] = {}
    last: Dict[int, int] = {}
    caused: Dict[int, Dict[str, List[int]]] = {}
    excess: Dict[int, Dict[str, Dict[str, float]]] = {}
    others_of: Dict[int, int] = {}
    for k, found in enumerate(job.coll_last):
        members = job.coll_ranks[k]
        if found is None or len(members) < 2:
            continue
        who, at = found
        for r in members:
            counted[r] = counted.get(r, 0) + 1
        last[who] = last.get(who, 0) + 1
        step = _step_at(steps.get(who, []), at)
        waited = sum(max(at - job.coll_arrive[(k, r)], 0) for r in members if r != who)
        caused.setdefault(who, {}).setdefault(step, []).append(waited // (len(members) - 1))
        others_of[who] = len(members) - 1
        for name, ns in _lead_up_excess(job, k, who, members).items():
            by_step = excess.setdefault(who, {}).setdefault(step, {})
            by_step[name] = by_step.get(name, 0.0) + ns
    durations = [e - s for tl in job.ranks.values() for _, s, e, _ in tl.steps]
    typical = float(median_of(durations)) if durations else 0.0
    out = [_late_rank(rank, per_step, excess.get(rank, {}), last[rank], counted[rank], typical)
           for rank, per_step in caused.items()]
    out.sort(key=lambda r: (not r.straggler, -r.waits_caused_ns, r.rank))
    return out


def _late_rank(rank: int, per_step: Dict[str, List[int]], excess: Dict[str, Dict[str, float]], last: int,
               counted: int, typical: float) -> LateRank:
    """The LateRank of ``rank``, last ``last`` times of ``counted`` collectives: the waits it
    caused per step (``per_step``), its lead-up work above the others' (``excess``, per
    step), a straggler where it was late often and long against ``typical`` step time."""
    totals = {step: int(sum(v)) for step, v in per_step.items()}
    median = float(median_of(list(totals.values())))
    work: Dict[str, List[float]] = {}
    for by_name in excess.values():
        for name, ns in by_name.items():
            work.setdefault(name, []).append(ns)
    n = len(totals)
    late_work = {name: float(median_of(v + [0.0] * (n - len(v)))) for name, v in work.items()}
    late_work = dict(sorted(((k, v) for k, v in late_work.items() if v > 0), key=lambda kv: -kv[1])[:TOP_WORK])
    straggler = last >= LATE_SHARE * counted and median >= MIN_WAIT_NS and median >= MIN_WAIT_SHARE * typical
    return LateRank(rank=rank, last=last, collectives=counted, waits_caused_ns=median,
                    steps=n, per_step_ns=totals, late_work=late_work, straggler=straggler)


def _step_at(steps: List[Tuple[int, int, str]], at: int) -> str:
    """The name of the step (start, end, name) around ``at``, else WHOLE."""
    i = bisect_right(steps, (at, np.iinfo(np.int64).max, "")) - 1
    return steps[i][2] if i >= 0 and steps[i][0] <= at <= steps[i][1] else WHOLE


def _lead_up_excess(job: JobTimeline, k: int, who: int, members: List[int]) -> Dict[str, float]:
    """{span name: ns} by which the last arriver's own time in each span, over its lead-up to
    collective ``k`` (module docstring, step 4), exceeds the other ranks' median."""
    own = _lead_up(job, k, who)
    if not own:
        return {}
    theirs = [_lead_up(job, k, r) for r in members if r != who]
    out = {}
    for name, ns in own.items():
        rest = float(median_of([t.get(name, 0) for t in theirs])) if theirs else 0.0
        if ns > rest:
            out[name] = ns - rest
    return out


def _lead_up(job: JobTimeline, k: int, rank: int) -> Dict[str, int]:
    """{span name: own ns} on ``rank``'s issuing thread of collective ``k``, from its release
    (the end of its previous collective wait, else its step's or thread's start) to its arrival."""
    index = job.coll_thread.get((k, rank))
    arrive = job.coll_arrive.get((k, rank))
    if index is None or arrive is None:
        return {}
    th = job.thread(rank, index)
    begin = th.first_ns
    for name, s, e, t in job.ranks[rank].steps:
        if t == index and s <= arrive <= e:
            begin = s
    j = bisect_right(th.wait_end, arrive) - 1
    while j >= 0 and th.wait_kind[j] != COLLECTIVE_WAIT:
        j -= 1
    if j >= 0:
        begin = max(begin, th.wait_end[j])
    if arrive <= begin:
        return {}
    bounds = np.frombuffer(th.bounds, dtype=np.int64) if len(th.bounds) else np.zeros(0, np.int64)
    owner = np.frombuffer(th.owner, dtype=np.int64) if len(th.owner) else np.zeros(0, np.int64)
    lo = max(int(np.searchsorted(bounds, begin, side="right")) - 1, 0)
    hi = int(np.searchsorted(bounds, arrive, side="left"))
    out: Dict[str, int] = {}
    for p in range(lo, min(hi, len(bounds))):
        s = max(int(bounds[p]), begin)
        e = min(int(bounds[p + 1]) if p + 1 < len(bounds) else arrive, arrive)
        span = int(owner[p])
        if e > s and span >= 0:
            name = job.name_of(rank, span)
            out[name] = out.get(name, 0) + e - s
    return out


def straggler_of(late: List[LateRank]) -> Optional[LateRank]:
    """The rank the others wait for most, when it is a straggler by arrival."""
    return late[0] if late and late[0].straggler else None
