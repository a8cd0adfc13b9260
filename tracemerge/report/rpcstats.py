"""RPC latency breakdown and callee thread-pool saturation, from matched RPC records.

Per RPC key (kind, function, caller -> callee), from each call's NTP quadruple
(t1 send, t2 start, t3 end, t4 complete): end-to-end latency t4 - t1 (caller clock only),
callee execution t3 - t2 (callee clock only), the overhead δ = (t4 - t1) - (t3 - t2)
(transport plus framework, both directions) and queueing on the callee. Queueing needs
the two clocks together: t1 and t2 are put on the reference clock with the alignment's
models, and the smallest t2 - t1 seen between the two ranks is taken as the delivery time
of a call that did not wait, so queueing = (t2 - t1) - that minimum. Subtracting the
minimum also cancels any constant offset the alignment left, so queueing is accurate to
the drift and the jitter of delivery, not to the offset error.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from tracemerge.algorithms.arrays import distinct, percentiles
from tracemerge.algorithms.nesting import lane_origins
from tracemerge.clocks.clock import ClockModel, to_reference_by_rank
from tracemerge.correlate.match import RpcCall, RpcMatch
from tracemerge.model import RankTrace

PERCENTILES = (50, 95, 99)
# A callee is called thread-limited when its observed server threads were all busy for at
# least this share of the time calls were in flight, and calls waited at least this
# fraction of their execution time before starting.
SATURATED_SHARE = 0.5
QUEUE_TO_EXEC = 0.25


def summary_us(values_ns: Union[Sequence[int], np.ndarray]) -> Dict[str, float]:
    """{mean, p50, p95, p99, max} in µs of ns values (empty dict for none)."""
    if not len(values_ns):
        return {}
    v = np.asarray(values_ns, dtype=np.float64) / 1000.0
    out = {"mean": float(v.mean())}
    out.update(zip((f"p{p}" for p in PERCENTILES), percentiles(v, PERCENTILES)))
    out["max"] = float(v.max())
    return out


@dataclass
class RpcKeyStats:
    name: str              # torch's legacy key, rpc_async#func(worker0 -> worker1)
    kind: str
    func: str
    caller: int
    callee: int
    count: int             # calls seen from either side
    complete: int          # calls with both sides, which the times below are over
    errors: int
    e2e_us: Dict[str, float]       # summary_us: {mean, p50, p95, p99, max}
    exec_us: Dict[str, float]
    overhead_us: Dict[str, float]
    queue_us: Dict[str, float]


@dataclass
class CalleeLoad:
    callee: int
    name: str              # worker name of the callee
    calls: int
    threads: int           # server threads seen running calls (max concurrency if unknown)
    max_concurrent: int
    all_busy_share: float  # of the time calls were in flight on the callee
    queue_mean_us: float
    exec_mean_us: float
    hint: str = ""         # one line when the callee looks thread-limited


@dataclass
class RpcReport:
    keys: List[RpcKeyStats] = field(default_factory=list)
    callees: List[CalleeLoad] = field(default_factory=list)
    caller_only: int = 0
    callee_only: int = 0


def _callee_name(call: RpcCall) -> str:
    inner = call.name.rpartition("(")[2].rstrip(")")
    return inner.partition(" -> ")[2] or f"rank {call.callee}"


def server_threads(trace: RankTrace, pid_codes: Optional[np.ndarray] = None, served: Sequence[int] = ()) -> int:
    """Number of distinct threads that ran callee spans (``...#remote``) in one rank's trace
    (of the processes ``pid_codes`` only, when given: one rank of a merged trace, whose
    spans moved to a lane of their thread count on that thread); ``served``: the events
    that are callee spans under another name, the ops that served paired builtins."""
    codes = [i for i, n in enumerate(trace.names) if isinstance(n, str) and n.endswith("#remote")]
    hits = np.isin(trace.name, codes) & (trace.ph == ord("X"))
    hits[np.asarray(served, dtype=np.int64)] = True
    if pid_codes is not None:
        hits &= np.isin(trace.pid, pid_codes)
    return len(distinct(lane_origins(trace)[trace.tid[hits]]))


def _covered_ns(starts: np.ndarray, ends: np.ndarray, level: int) -> int:
    """Total time at least ``level`` of the intervals [starts, ends) overlap."""
    if not len(starts):
        return 0
    t = np.concatenate((ends, starts))
    d = np.concatenate((np.full(len(ends), -1), np.full(len(starts), 1)))
    order = np.lexsort((d, t))            # at equal times, ends before starts
    t, running = t[order], np.cumsum(d[order])
    seg = np.diff(t)
    return int(seg[running[:-1] >= level].sum())


def _max_concurrent(starts: np.ndarray, ends: np.ndarray) -> int:
    if not len(starts):
        return 0
    t = np.concatenate((ends, starts))
    d = np.concatenate((np.full(len(ends), -1), np.full(len(starts), 1)))
    return int(np.cumsum(d[np.lexsort((d, t))]).max())


def rpc_report(match: RpcMatch, clocks: Mapping[int, ClockModel],
               threads_by_rank: Optional[Mapping[int, int]] = None) -> RpcReport:
    """The :class:`RpcReport` of an :class:`~tracemerge.correlate.match.RpcMatch`.

    ``clocks`` is {rank: ClockModel}; ``threads_by_rank`` {rank: observed server threads}.
    """
    threads_by_rank = threads_by_rank or {}
    # by position: records of two jobs may share an rpc_id (ids restart in every run), and
    # only the position tells a complete call from its namesake of the other job
    calls_seen = list(match.calls)
    full, queue = _queues(match, clocks, calls_seen)
    report = RpcReport(caller_only=match.caller_only, callee_only=match.callee_only)
    groups: Dict[Tuple[str, str, int, int], List[int]] = {}
    for n, c in enumerate(calls_seen):
        groups.setdefault((c.kind, c.func, c.caller, c.callee), []).append(n)
    for members in groups.values():
        report.keys.append(_key_stats([calls_seen[n] for n in members], [n for n in members if n in queue],
                                      calls_seen, queue))
    for callee in sorted({calls_seen[n].callee for n in full}):
        mine = [n for n in full if calls_seen[n].callee == callee]
        report.callees.append(_callee_load(callee, [calls_seen[n] for n in mine], [queue[n] for n in mine],
                                           threads_by_rank.get(callee)))
    return report


def _queues(match: RpcMatch, clocks: Mapping[int, ClockModel], calls_seen: List[RpcCall]) -> Tuple[List[int], Dict[int, int]]:
    """(the positions of the complete calls, {position: its queue ns}): each call's transit
    (t2 less t1 on the reference clock) less the least of its (caller, callee) pair."""
    columns = match.calls
    have = np.fromiter(clocks, np.int64, len(clocks))
    complete = columns.has.all(axis=0) & np.isin(columns.caller, have) & np.isin(columns.callee, have)
    at = np.flatnonzero(complete)
    # t2 on the reference clock less t1 there, every call's in one pass per rank
    gap = (to_reference_by_rank(clocks, columns.callee[at], columns.times[1, at])
           - to_reference_by_rank(clocks, columns.caller[at], columns.times[0, at]))
    full: List[int] = at.tolist()
    transit: Dict[int, int] = dict(zip(full, gap.tolist()))
    floor: Dict[Tuple[int, int], int] = {}
    for n in full:
        pair = (calls_seen[n].caller, calls_seen[n].callee)
        floor[pair] = min(floor.get(pair, transit[n]), transit[n])
    return full, {n: transit[n] - floor[(calls_seen[n].caller, calls_seen[n].callee)] for n in full}


def _key_stats(calls: List[RpcCall], done_at: List[int], calls_seen: List[RpcCall], queue: Dict[int, int]) -> RpcKeyStats:
    """The statistics of one (kind, func, caller, callee): ``calls``, of which those at
    ``done_at`` are complete (every one of their times is set)."""
    done = [calls_seen[n] for n in done_at]
    e2e = np.array([c.complete_ns - c.send_ns for c in done], dtype=np.int64)  # type: ignore[operator]
    exe = np.array([c.end_ns - c.start_ns for c in done], dtype=np.int64)  # type: ignore[operator]
    c0 = calls[0]
    return RpcKeyStats(
        name=c0.name, kind=c0.kind, func=c0.func, caller=c0.caller, callee=c0.callee, count=len(calls),
        complete=len(done), errors=sum(c.status != "ok" for c in calls), e2e_us=summary_us(e2e),
        exec_us=summary_us(exe), overhead_us=summary_us(e2e - exe),
        queue_us=summary_us([queue[n] for n in done_at]))


def _callee_load(callee: int, calls: List[RpcCall], queued: List[int], observed_threads: Optional[int]) -> CalleeLoad:
    """How busy ``callee`` was serving its complete ``calls`` (each queued ``queued`` ns),
    with a hint where its server threads were the limit."""
    starts = np.array([c.start_ns for c in calls], dtype=np.int64)
    ends = np.array([c.end_ns for c in calls], dtype=np.int64)
    waits = np.array(queued, dtype=np.int64)
    peak = _max_concurrent(starts, ends)
    threads = observed_threads or peak
    in_flight = _covered_ns(starts - waits, ends, 1)
    share = _covered_ns(starts, ends, threads) / in_flight if in_flight else 0.0
    load = CalleeLoad(callee=callee, name=_callee_name(calls[0]), calls=len(calls), threads=threads,
                      max_concurrent=peak, all_busy_share=share,
                      queue_mean_us=float(waits.mean()) / 1000.0, exec_mean_us=float((ends - starts).mean()) / 1000.0)
    if share >= SATURATED_SHARE and load.queue_mean_us >= QUEUE_TO_EXEC * load.exec_mean_us > 0:
        load.hint = (f"{load.name} (rank {callee}) is thread-limited: its {threads} server thread"
                     f"{'s were' if threads != 1 else ' was'} all busy {share:.0%} of the time calls were in "
                     f"flight and calls queued {load.queue_mean_us / 1000:.2f} ms on average before a "
                     f"{load.exec_mean_us / 1000:.2f} ms execution; raise num_worker_threads")
    return load
