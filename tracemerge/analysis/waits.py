"""Wait states across ranks, in Scalasca's vocabulary adapted to RPC and collectives.

- **Queueing** (the caller waited on a callee that was busy): per call, the request's
  delivery t2 − t1 on the reference clock minus the fastest delivery seen between the two
  ranks (as in the RPC report: the constant part of the clock error cancels).
- **Callee idle before a call** (the callee waited for work, Scalasca's *late sender*):
  per served call, the time the thread that ran it had been idle since the end of the
  previous call it served, up to this request's arrival (t1 + fastest delivery) or its
  start, whichever is first; a thread's first call counts nothing.
- **Waiting in a collective** (*wait at N×N*): per collective that every rank of its group
  recorded, each rank's wait is the last arrival minus its own; the last arriver is counted.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from tracemerge.analysis.job_timeline import JobTimeline


@dataclass
class RpcWait:
    name: str                 # the RPC key, rpc_async#func(caller -> callee)
    caller: int
    callee: int
    calls: int                # calls with both sides, which the times are over
    queueing_ns: int          # total
    queueing_mean_ns: float
    callee_idle_ns: int       # total time the serving threads waited for these calls
    callee_idle_mean_ns: float


@dataclass
class CollectiveWait:
    group: str
    op: str
    rank: int
    count: int                # complete collectives the rank was in
    wait_ns: int              # total wait for the last arriver
    wait_mean_ns: float
    last_arrivals: int        # times this rank arrived last


@dataclass
class WaitStates:
    rpc: List[RpcWait] = field(default_factory=list)                  # most queueing first
    collectives: List[CollectiveWait] = field(default_factory=list)   # most waiting first
    by_rank: Dict[int, Dict[str, int]] = field(default_factory=dict)  # {rank: {"queueing_ns", "callee_idle_ns", "collective_ns"}}


def wait_states(job: JobTimeline) -> WaitStates:
    """The :class:`WaitStates` of a :class:`~tracemerge.analysis.job_timeline.JobTimeline`."""
    out = WaitStates()
    n = len(job.call_name)
    if n:
        full: np.ndarray = job.has.all(axis=0)  # type: ignore[assignment]  # 2-d: an array (numpy's stubs say maybe a scalar)
        queue = np.where(full, job.t_ref[1] - job.t_ref[0] - job.floor, 0)
        idle = _callee_idle(job, full)
        keys: Dict[Tuple[str, int, int], List[int]] = {}
        for c in np.flatnonzero(full).tolist():
            keys.setdefault((job.call_name[c], job.call_caller[c], job.call_callee[c]), []).append(c)
        for (name, caller, callee), cs in keys.items():
            q, i = queue[cs], idle[cs]
            out.rpc.append(RpcWait(name=name, caller=caller, callee=callee, calls=len(cs), queueing_ns=int(q.sum()),
                                   queueing_mean_ns=float(q.mean()), callee_idle_ns=int(i.sum()),
                                   callee_idle_mean_ns=float(i.mean())))
            _add(out.by_rank, caller, "queueing_ns", int(q.sum()))
            _add(out.by_rank, callee, "callee_idle_ns", int(i.sum()))
        out.rpc.sort(key=lambda w: (-w.queueing_ns, -w.callee_idle_ns, w.name))
    groups: Dict[Tuple[str, str, int], List[int]] = {}
    for k, last in enumerate(job.coll_last):
        if last is None:
            continue
        key = (job.coll_group[k], job.coll_op[k])
        for rank in job.coll_ranks[k]:
            g = groups.setdefault(key + (rank,), [0, 0, 0])
            g[0] += 1
            g[1] += last[1] - job.coll_arrive[(k, rank)]
            g[2] += last[0] == rank
    for (group, op, rank), (count, wait, lasts) in groups.items():
        out.collectives.append(CollectiveWait(group=group, op=op, rank=rank, count=count, wait_ns=int(wait),
                                              wait_mean_ns=wait / count, last_arrivals=int(lasts)))
        _add(out.by_rank, rank, "collective_ns", int(wait))
    out.collectives.sort(key=lambda w: (-w.wait_ns, w.group, w.op, w.rank))
    out.by_rank = {r: {k: v.get(k, 0) for k in ("queueing_ns", "callee_idle_ns", "collective_ns")}
                   for r, v in sorted(out.by_rank.items())}
    return out


def _add(table: Dict[int, Dict[str, int]], rank: int, key: str, value: int) -> None:
    row = table.setdefault(rank, {})
    row[key] = row.get(key, 0) + value


def _callee_idle(job: JobTimeline, full: np.ndarray) -> np.ndarray:
    """Per call: how long the thread that served it had waited for it since its previous call."""
    idle = np.zeros(len(job.call_name), dtype=np.int64)
    by_thread: Dict[Tuple[int, int], List[Tuple[int, int]]] = {}
    for c, (rank, span) in job.callee_span.items():
        by_thread.setdefault((rank, int(job.ranks[rank].span_thread[span])), []).append((c, span))
    for (rank, _), items in by_thread.items():
        calls = np.array([c for c, _ in items], dtype=np.int64)
        spans = np.array([s for _, s in items], dtype=np.int64)
        start = job.ranks[rank].span_start[spans]
        end = job.ranks[rank].span_end[spans]
        order = np.argsort(start, kind="stable")
        calls, start, end = calls[order], start[order], end[order]
        prev = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]))
        arrival = job.t_ref[0, calls] + job.floor[calls]
        ready = np.minimum(arrival, start)
        ok = (prev > np.iinfo(np.int64).min) & full[calls]
        idle[calls[ok]] = np.maximum(ready[ok] - prev[ok], 0)
    return idle
