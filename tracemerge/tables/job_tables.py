"""The job's tables beside ``events``: made from the :class:`~tracemerge.job.Job`'s joins
(``job.links``), its clock model, and what each rank's worker handed back (key-average
rows, server threads, RPC spans, timelines): kilobytes, never another rank's events.

Each table is one function of :class:`Products` (what the tables share, made once), named
by the report section it belongs to (``Section.export`` in :mod:`tracemerge.report.sections`):
``export`` and ``tables.load`` walk that registry, so an analysis's table is one function
and one registry entry. Every table is a pyarrow Table with a fixed schema, so an empty one
still has its columns.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tracemerge.algorithms.arrays import distinct
from tracemerge.analysis.critical_path import Window
from tracemerge.analysis.critical_path import critical_path as find_critical_path
from tracemerge.analysis.job_timeline import build_timeline
from tracemerge.clocks.text import offsets_document
from tracemerge.job import Alignment, Job
from tracemerge.report.collectives import collective_report, p2p_report
from tracemerge.report.keyavg import group_rows
from tracemerge.report.rpcstats import PERCENTILES, RpcReport, rpc_report
from tracemerge.tables.events import require_arrow

if TYPE_CHECKING:
    import pyarrow as pa

    from tracemerge.tables.parts import RankPart

# (rpc_id, role) -> (rank, tid, thread name) of the span that shows that side of the call
SpanSides = Mapping[Tuple[str, str], Tuple[int, str, Optional[str]]]


@dataclass(frozen=True)
class Products:
    """What the job's tables are made from: the job, its clocks and the parts' small results,
    with what several tables share made once (:func:`products`)."""

    job: Job
    alignment: Alignment
    parts: Sequence["RankPart"]
    group_by: str
    sides: SpanSides                  # each RPC side's span: rank, tid, thread
    rpc: Optional[RpcReport]          # the RPC latency and callee load (None: no RPC)
    windows: Optional[List[Window]]   # the critical path (None: not asked for)

    def per_rank(self, name: str) -> Dict[int, Any]:
        """{rank: value} of the per-rank product ``name`` (a section's ``per_rank``), in job order."""
        return {p.rank: p.products[name] for p in self.parts if name in p.products}


def products(job: Job, alignment: Alignment, parts: Sequence["RankPart"], group_by: str = "name",
             critical_path: bool = False) -> Products:
    # a rank's own part last: where it holds a call's side (a paired builtin's op) and the
    # drawn callee spans do too, the thread is the one the rank's file names
    sides = {(rpc_id, role): (p.rank, tid, thread) for p in sorted(parts, key=lambda p: -p.part)
             for rpc_id, role, tid, thread in p.rpc_spans}
    threads = {p.rank: p.products["server_threads"] for p in parts if "server_threads" in p.products}
    rpc = rpc_report(job.links.rpcs, alignment.clocks, threads) if len(job.links.rpcs.calls) else None
    windows = None
    if critical_path:
        timelines = {p.rank: p.products["timeline"] for p in parts if p.products.get("timeline") is not None}
        windows = find_critical_path(build_timeline(timelines, job.links.rpcs.calls, job.links.collectives,
                                                    alignment.clocks))
    return Products(job, alignment, parts, group_by, sides, rpc, windows)

STATS = ("mean", *(f"p{p}" for p in PERCENTILES), "max")


def _table(columns: Sequence[Tuple[str, Any]], rows: Iterable[Dict[str, Any]]) -> "pa.Table":
    pa = require_arrow()
    schema = pa.schema(list(columns))
    data: Dict[str, List[Any]] = {name: [] for name, _ in columns}
    for row in rows:
        for name in data:
            data[name].append(row.get(name))
    return pa.table(data, schema=schema)


def rpcs_table(made: Products) -> "pa.Table":
    """One row per RPC with both sides: who called whom from which thread, t1..t4 on the
    reference clock (null where that side was not recorded), and which sides the inputs had."""
    pa = require_arrow()
    job, alignment, sides = made.job, made.alignment, made.sides
    calls = job.links.rpcs.calls
    n = len(calls)
    s, i64, i32 = pa.string(), pa.int64(), pa.int32()
    columns: Dict[str, Any] = {}
    for key in ("rpc_id", "kind", "func", "name"):
        columns[key] = pa.array([rec.get(key, "") for rec in calls.first], s)
    columns["status"] = pa.array(list(calls.status), s)
    for role in ("caller", "callee"):
        ranks = getattr(calls, role)
        found = [sides.get((rec["rpc_id"], role)) for rec in calls.first]
        columns[f"{role}_rank"] = pa.array(ranks.astype(np.int32) if n else np.zeros(0, np.int32))
        columns[f"{role}_tid"] = pa.array([f[1] if f else None for f in found], s)
        columns[f"{role}_thread"] = pa.array([f[2] if f else None for f in found], s)
    # t1/t4 on the caller's clock, t2/t3 on the callee's: each rank's converted in one numpy call
    for k, (key, role) in enumerate((("t1_ns", "caller"), ("t2_ns", "callee"), ("t3_ns", "callee"),
                                     ("t4_ns", "caller"))):
        times, known = _on_reference(calls, k, getattr(calls, role), alignment.clocks)
        columns[key] = pa.array(times, i64, mask=~known)
    has_caller = calls.has[0] if n else np.zeros(0, bool)
    has_callee = calls.has[1] if n else np.zeros(0, bool)
    columns["sides"] = pa.array(np.where(has_caller & has_callee, "both",
                                         np.where(has_caller, "caller_only", "callee_only")).tolist(), s)
    order = ["rpc_id", "kind", "func", "name", "status", "caller_rank", "caller_tid", "caller_thread",
             "callee_rank", "callee_tid", "callee_thread", "t1_ns", "t2_ns", "t3_ns", "t4_ns", "sides"]
    schema = pa.schema([(k, i32 if k.endswith("_rank") else i64 if k.endswith("_ns") else s) for k in order])
    return pa.table([columns[k] for k in order], schema=schema)


def _on_reference(calls: Any, k: int, ranks: np.ndarray, clocks: Mapping[int, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """(time ``k`` of every call on the reference clock, whether it is known there): read on
    the clock of ``ranks`` (each call's), one numpy call per rank; a peer without a file or
    clock is not on the reference clock."""
    n = len(calls)
    times = calls.times[k].copy() if n else np.zeros(0, np.int64)
    known = calls.has[k].copy() if n else np.zeros(0, bool)
    for rank in distinct(ranks).tolist() if n else []:
        at = (ranks == rank) & known
        if rank in clocks:
            times[at] = clocks[rank].to_reference(times[at])
        else:
            known[ranks == rank] = False
    return times, known


def collectives_table(made: Products) -> "pa.Table":
    """One row per rank per collective (group, seq): its op, the group, and that rank's
    start and end on the reference clock."""
    pa = require_arrow()
    clocks = made.alignment.clocks
    rows = []
    for m in made.job.links.collectives:
        for rank, start in m.start_ns.items():
            end = m.end_ns.get(rank)
            clock = clocks.get(rank)
            rows.append({"group": m.group, "seq": m.seq, "op": m.op, "group_ranks": list(m.group_ranks),
                         "rank": rank, "start_ns": int(clock.to_reference(start)) if clock else None,
                         "end_ns": int(clock.to_reference(end)) if clock and end is not None else None,
                         "bytes": m.bytes.get(rank), "complete": m.complete})
    s, i64 = pa.string(), pa.int64()
    return _table([("group", s), ("seq", i64), ("op", s), ("group_ranks", pa.list_(pa.int32())),
                   ("rank", pa.int32()), ("start_ns", i64), ("end_ns", i64), ("bytes", i64),
                   ("complete", pa.bool_())], rows)


def clocks_table(made: Products) -> "pa.Table":
    """``tracemerge offsets``' table: each rank's clock against the reference, with bounds."""
    pa = require_arrow()
    doc = offsets_document(made.alignment, list(made.job.infos))
    notes = {r: c.note for r, c in made.alignment.clocks.items()}
    rows = [{**r, "reference": doc["reference"], "note": notes.get(r["rank"]) or None} for r in doc["ranks"]]
    s, i64 = pa.string(), pa.int64()
    return _table([("rank", pa.int32()), ("reference", pa.int32()), ("method", s), ("offset_ns", i64),
                   ("drift_ppm", pa.float64()), ("anchor_ns", i64), ("error_bound_ns", i64), ("samples", i64),
                   ("peers", pa.list_(pa.int32())), ("machine", pa.int32()), ("hostname", s), ("note", s)], rows)


def key_averages_table(made: Products) -> "pa.Table":
    """``report``'s key averages (torch's columns, µs; ``node_id`` the rank, -1 over several)."""
    pa = require_arrow()
    grouped = group_rows([r for rows in made.per_rank("key_averages").values() for r in rows],
                         made.group_by == "name,rank")
    grouped.sort(key=lambda r: (-r.cpu_time_total, r.key, r.node_id))
    return _table([("key", pa.string()), ("count", pa.int64()), ("node_id", pa.int32()),
                   ("cpu_time_total_us", pa.float64()), ("self_cpu_time_total_us", pa.float64()),
                   ("cpu_time_us", pa.float64()), ("is_user_annotation", pa.bool_())],
                  ({"key": r.key, "count": r.count, "node_id": r.node_id, "cpu_time_total_us": r.cpu_time_total,
                    "self_cpu_time_total_us": r.self_cpu_time_total, "cpu_time_us": r.cpu_time,
                    "is_user_annotation": r.is_user_annotation} for r in grouped))


def rpc_latency_table(made: Products) -> "pa.Table":
    """``report``'s RPC latency breakdown: one row per kind, function, caller and callee, µs statistics."""
    pa = require_arrow()
    rep = made.rpc
    f64, s, i64 = pa.float64(), pa.string(), pa.int64()
    parts = ("e2e", "exec", "overhead", "queue")
    return _table(
        [("name", s), ("kind", s), ("func", s), ("caller", pa.int32()), ("callee", pa.int32()), ("count", i64),
         ("complete", i64), ("errors", i64)] + [(f"{p}_{k}_us", f64) for p in parts for k in STATS],
        ({"name": k.name, "kind": k.kind, "func": k.func, "caller": k.caller, "callee": k.callee, "count": k.count,
          "complete": k.complete, "errors": k.errors,
          **{f"{p}_{x}_us": getattr(k, f"{p}_us").get(x) for p in parts for x in STATS}}
         for k in (rep.keys if rep else [])))


def rpc_callees_table(made: Products) -> "pa.Table":
    """``report``'s callee load: one row per callee, its server threads and queueing."""
    pa = require_arrow()
    rep = made.rpc
    f64, s, i64 = pa.float64(), pa.string(), pa.int64()
    return _table(
        [("callee", pa.int32()), ("name", s), ("calls", i64), ("threads", i64), ("max_concurrent", i64),
         ("all_busy_share", f64), ("queue_mean_us", f64), ("exec_mean_us", f64), ("hint", s)],
        ({"callee": c.callee, "name": c.name, "calls": c.calls, "threads": c.threads,
          "max_concurrent": c.max_concurrent, "all_busy_share": c.all_busy_share, "queue_mean_us": c.queue_mean_us,
          "exec_mean_us": c.exec_mean_us, "hint": c.hint or None} for c in (rep.callees if rep else [])))


def collective_stats_table(made: Products) -> "pa.Table":
    """``report``'s collectives section: per group and op, counts, bytes, arrival skew."""
    pa = require_arrow()
    stats = collective_report(made.job.links.collectives, made.alignment.clocks) + p2p_report(made.job.links.p2p,
                                                                                              made.alignment.clocks)
    f64, s, i64 = pa.float64(), pa.string(), pa.int64()
    return _table([("group", s), ("op", s), ("count", i64), ("complete", i64), ("bytes", i64),
                   ("skew_mean_us", f64), ("skew_max_us", f64), ("slowest_rank", pa.int32())],
                  ({"group": c.group, "op": c.op, "count": c.count, "complete": c.complete, "bytes": c.bytes,
                    "skew_mean_us": c.skew_us.get("mean"), "skew_max_us": c.skew_us.get("max"),
                    "slowest_rank": c.slowest_rank} for c in stats))


def critical_path_table(made: Products) -> "pa.Table":
    """The cross-rank critical path (:mod:`tracemerge.analysis.critical_path`): one row per
    segment, with the window (ProfilerStep#N, ProfilerStep#N (rank R), else the whole trace) it belongs to."""
    pa = require_arrow()
    s, i64 = pa.string(), pa.int64()
    return _table([("window", s), ("window_start_ns", i64), ("window_end_ns", i64), ("rank", pa.int32()),
                   ("tid", s), ("name", s), ("kind", s), ("start_ns", i64), ("end_ns", i64)],
                  ({"window": w.window, "window_start_ns": w.start_ns, "window_end_ns": w.end_ns, "rank": seg.rank,
                    "tid": None if seg.tid is None else str(seg.tid), "name": seg.name, "kind": seg.kind,
                    "start_ns": seg.start_ns, "end_ns": seg.end_ns}
                   for w in made.windows or [] for seg in w.segments))


def gpu_table(made: Products) -> "pa.Table":
    """``report``'s GPU section (:mod:`tracemerge.report.gpu`): per rank with device events,
    its GPU window and the time (µs) compute, communication and memory work ran, idle, the
    communication overlapped by compute, the launch delays, and its top kernel."""
    pa = require_arrow()
    f64 = pa.float64()
    delays = ("mean", "p50", "p95", "max")
    return _table([("rank", pa.int32()), ("window_us", f64), ("compute_us", f64), ("communication_us", f64),
                   ("memory_us", f64), ("idle_us", f64), ("overlap_us", f64), ("overlap_share", f64)]
                  + [(f"launch_delay_{k}_us", f64) for k in delays]
                  + [("launches", pa.int64()), ("top_kernel", pa.string()), ("top_kernel_us", f64)],
                  ({"rank": g.rank, "window_us": g.window_us, "compute_us": g.compute_us,
                    "communication_us": g.communication_us, "memory_us": g.memory_us, "idle_us": g.idle_us,
                    "overlap_us": g.overlap_us, "overlap_share": g.overlap_share,
                    **{f"launch_delay_{k}_us": g.launch_delay_us.get(k) for k in delays},
                    "launches": g.launch_delay_us.get("count"),
                    "top_kernel": g.top_kernels[0]["name"] if g.top_kernels else None,
                    "top_kernel_us": g.top_kernels[0]["total_us"] if g.top_kernels else None}
                   for g in sorted((g for g in made.per_rank("gpu").values() if g is not None), key=lambda g: g.rank)))
