"""``tracemerge report``'s model: key averages, RPC breakdown, collectives, clocks.

:func:`build_report` reads rank files (or one merged trace written by ``combine``) into a
:class:`Report` of plain data; :func:`tracemerge.report.render.render` turns it into a
table like torch's ``key_averages().table()`` (with a Node ID column), CSV, JSON, Markdown
or an HTML page.
"""

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from tracemerge.algorithms.nesting import unfinished
from tracemerge.analysis.job_timeline import build_timeline
from tracemerge.analysis.postmortem import PostMortem, postmortem
from tracemerge.analysis.postmortem import sections as postmortem_tables
from tracemerge.analysis.postmortem import summary as postmortem_summary
from tracemerge.analysis.summary import Analysis, analyse
from tracemerge.clocks.clock import ClockModel
from tracemerge.correlate.match import Correlation, correlate
from tracemerge.errors import TraceError, TracemergeError
from tracemerge.inputs.admit import MERGED_HEAD, is_merged_block, problem
from tracemerge.inputs.head import read_head
from tracemerge.inputs.merged_summary import check_summary
from tracemerge.job import Alignment, AlignRequest, Job
from tracemerge.model import RankTrace
from tracemerge.native import read_file
from tracemerge.place.plan import make_plan, reference_extent
from tracemerge.place.rank_pass import Options, gather
from tracemerge.place.remote_spans import drawn_pids
from tracemerge.report import GROUP_BY, SORT_KEYS  # the CLI's choices, read without this module
from tracemerge.report.collectives import CollectiveStats, collective_report, p2p_report
from tracemerge.report.gpu import GpuRank, gpu_rank
from tracemerge.report.keyavg import (
    KeyAverage,
    group_rows,
    has_device_time,
    key_averages,
    op_tree,
)
from tracemerge.report.notes import HINT, WARNING, Note
from tracemerge.report.rank_products import top_spans
from tracemerge.report.rpcstats import RpcReport, rpc_report, server_threads

ROW_FIELDS = ("key", "count", "node_id", "cpu_time_total", "self_cpu_time_total", "cpu_time")
# added to every row (JSON, CSV) when the report has device time, as torch's table adds its columns
DEVICE_FIELDS = ("device_time_total", "self_device_time_total", "device_time", "device_type")
TIMELINE_BINS = 120


@dataclass
class Report:
    key_averages: List[KeyAverage]     # grouped, unsorted
    group_by: str
    ranks: List[Dict[str, Any]]        # [{rank, worker_name, hostname, path}]
    clocks: List[Dict[str, Any]]       # ClockModel dicts, one per rank
    reference: int
    align: str
    rpc: Optional[RpcReport] = None    # None without RPC records
    collectives: List[CollectiveStats] = field(default_factory=list)
    timeline: Dict[str, Any] = field(default_factory=dict)   # {start_ns, bin_ns, busy: {rank: [avg busy threads]}}
    notes: List[Note] = field(default_factory=list)
    analysis: Optional[Analysis] = None  # analysis.summary.Analysis (critical path, wait states, stragglers) with --analysis; None otherwise
    gpu: List[GpuRank] = field(default_factory=list)  # of the ranks with device activity
    # a failed job's post-mortem (analysis.postmortem), None when there is nothing to say
    postmortem: Optional[PostMortem] = None
    # {product: {rank: value}}: what the per-rank pass made of each rank for the sections
    # (their ``per_rank``; place/rank_pass.py); empty for a merged trace
    per_rank: Dict[str, Dict[int, Any]] = field(default_factory=dict)


def is_merged(trace: RankTrace) -> bool:
    """A trace written by ``tracemerge combine``: its summary maps output pids to ranks."""
    return is_merged_block(trace.tracemerge)


def read_merged(path: str) -> Optional[RankTrace]:
    """The trace of ``path`` if it is a merged trace written by ``combine``, else None.
    Only a file that starts as combine's output does is read (rank files and Kineto traces
    are told apart by their heads)."""
    if problem(path) is not None:
        return None  # a device or FIFO is never opened here: Job.open turns it away
    try:
        head = read_head(path)
    except TraceError:
        return None  # unreadable: Job.open's reader says so (or --skip-bad skips it)
    if head is None or set(head) != MERGED_HEAD:
        return None
    trace = read_file(path)
    if not is_merged(trace):
        return None
    # checked before any reader takes a field (a value of the wrong type ended info, report, diff in exit 1)
    return replace(trace, tracemerge=check_summary(path, trace.tracemerge or {}))


def _busy(spans: Tuple[np.ndarray, np.ndarray], start_ns: int, bin_ns: int) -> List[float]:
    """Average number of busy threads per time bin of the ``spans`` (:func:`~tracemerge.report.rank_products.top_spans`),
    clipped to bins."""
    s, e = spans[0] - start_ns, spans[1] - start_ns
    edges = np.arange(TIMELINE_BINS + 1, dtype=np.int64) * bin_ns
    busy = [(np.clip(e, lo, hi) - np.clip(s, lo, hi)).sum() / bin_ns for lo, hi in zip(edges[:-1], edges[1:])]
    return [round(float(b), 4) for b in busy]


# said when --analysis is asked of a merged trace, which is reported without it
MERGED_NO_ANALYSIS = ("--analysis: not done on a merged trace: the critical path, wait states and stragglers "
                      "are found from the rank files' own events and records; give the rank files")


def build_report(paths: List[str], job_opener: Callable[[List[str]], Job],
                 align: Union[AlignRequest, Tuple[Any, ...], None] = None, group_by: str = "name",
                 remote_ops: bool = False, analysis: bool = False, comm_kernels: Sequence[str] = ()) -> Report:
    """The :class:`Report` of ``paths``; ``job_opener(paths)`` opens rank files as a
    :class:`~tracemerge.job.Job`, aligned by ``align`` (an AlignRequest, or its fields as a
    tuple) unless the opener aligned it. ``analysis``: also the cross-rank analyses
    (:mod:`tracemerge.analysis`), for rank files. ``comm_kernels``: regexes of further
    communication kernels for the GPU section (``--comm-kernel``)."""
    if group_by not in GROUP_BY:
        raise TracemergeError(f"--group-by {group_by!r}: choose from {', '.join(GROUP_BY)}")
    if len(paths) == 1:
        trace = read_merged(paths[0])
        if trace is not None:
            report = merged_report(trace, group_by, remote_ops, comm_kernels)
            if analysis:
                report.notes.append(Note(MERGED_NO_ANALYSIS, WARNING))
            return report
    job = job_opener(paths)
    if job.alignment is None:
        job = job.aligned(align if isinstance(align, AlignRequest) else AlignRequest(*(align or ())))
    return job_report(job, None, group_by, remote_ops, analysis, comm_kernels)


def job_report(job: Job, alignment: Optional[Alignment] = None, group_by: str = "name", remote_ops: bool = False,
               analysis: bool = False, comm_kernels: Sequence[str] = ()) -> "Report":
    """The :class:`Report` of a job under ``alignment`` (None: the job's own; what ``combine
    --report`` uses); ``analysis``: with the critical path, wait states and stragglers
    (``report --analysis``)."""
    from tracemerge.report.sections import per_rank_products  # the registry: it imports this module (Report)

    plan = make_plan(job, alignment)
    clocks = plan.clocks
    made = gather(job, plan, per_rank_products(), Options(remote_ops=remote_ops, comm_kernels=tuple(comm_kernels),
                                                         timelines=analysis))
    extent = reference_extent(job.infos, clocks)
    # every rank left only a journal: the job's times are its profiling windows (its events' are 0)
    first, last = extent or (min(clocks[r].to_reference(i.start_ns) for r, i in zip(job.ranks, job.infos)),
                             max(clocks[r].to_reference(i.stop_ns) for r, i in zip(job.ranks, job.infos)))
    bin_ns = max(1, -(-(last - first) // TIMELINE_BINS))
    busy = {rank: _busy(found, first, bin_ns) for rank, found in made["busy_spans"].items()}
    gpu = made["gpu"]
    report = Report(key_averages=group_rows([r for rank in job.ranks for r in made["key_averages"][rank]],
                                            group_by == "name,rank"),
                    group_by=group_by,
                    ranks=[{"rank": rank, "worker_name": info.worker_name, "hostname": info.hostname,
                            "path": info.path} for rank, info in zip(job.ranks, job.infos)],
                    clocks=[clocks[r].as_dict() for r in job.ranks], reference=plan.alignment.reference,
                    align=plan.alignment.method, timeline={"start_ns": first, "bin_ns": bin_ns, "busy": busy},
                    gpu=[gpu[r] for r in job.ranks if gpu[r] is not None], per_rank=made)
    _add_records(report, job.infos, job.links, clocks, made["server_threads"])
    report.postmortem = postmortem(job.infos, clocks) or None
    report.notes += unfinished_notes({info.path: made["open_at_stop"][rank]
                                      for rank, info in zip(job.ranks, job.infos)})
    if analysis:
        timelines = {rank: tl for rank, tl in made["timeline"].items() if tl is not None}
        report.analysis = analyse(build_timeline(timelines, job.links.rpcs.calls, job.links.collectives, clocks))
    return report


# inputs named one by one in a note about several; past that, one note says how many
NAMED_INPUTS = 3
_OPEN_AT_STOP = ("still open when the profiler stopped (args.finished false; the duration written runs to the stop, "
                 "not to the span's end): left out of the key averages, their children still counted under them")


def unfinished_notes(open_at_stop: Dict[str, int]) -> List[Note]:
    """A note per input with spans still open when its profiler stopped (``args.finished``
    false): they are in the trace as Kineto wrote them, and no row of the key averages.
    More than NAMED_INPUTS such inputs (a large job, where every rank's stop cut one span)
    are one note, naming the first few: a line per rank would bury the report."""
    found = [(path, n) for path, n in open_at_stop.items() if n]
    if len(found) > NAMED_INPUTS:
        named = ", ".join(f"{path} ({n})" for path, n in found[:NAMED_INPUTS])
        return [Note(f"{len(found)} inputs had spans {_OPEN_AT_STOP} ({sum(n for _, n in found)} spans: {named} "
                     f"and {len(found) - NAMED_INPUTS} more)")]
    return [Note(f"{path}: {n} span{'s were' if n != 1 else ' was'} {_OPEN_AT_STOP}") for path, n in found]


def _add_records(report: Report, infos: Sequence[Any], links: Correlation, clocks: Mapping[int, ClockModel],
                 threads: Mapping[int, int]) -> None:
    """The RPC and collective sections, from the ranks' joined records (``links``) and clock
    models; ``infos`` (RankInfo-like: has_block) say whether any input had records."""
    match = links.rpcs
    if match.calls:
        report.rpc = rpc_report(match, clocks, threads)
        report.notes += [Note(c.hint, HINT) for c in report.rpc.callees if c.hint]
        if match.caller_only or match.callee_only:
            report.notes.append(Note(f"{match.caller_only} RPCs have only the caller's record and "
                                     f"{match.callee_only} only the callee's; their times are left out of the breakdown"))
    report.collectives = collective_report(links.collectives, clocks) + p2p_report(links.p2p, clocks)
    report.notes += [Note(w) for w in links.order_warnings]
    if not any(i.has_block for i in infos) and not report.collectives:
        report.notes.append(Note("no rank-file records (plain Kineto traces): no RPC or collectives report"))


@dataclass
class Recorded:
    """What a merged trace's summary keeps of one input (``records``): enough of its
    RankInfo for the RPC and collective sections."""

    rank: int
    rpcs: List[Dict[str, Any]]
    collectives: List[Dict[str, Any]]
    has_block: bool
    remote_rpcs: List[Dict[str, Any]] = field(default_factory=list)   # callee sides the caller's file carried
    job_id: Optional[str] = None


def merged_report(trace: RankTrace, group_by: str = "name", remote_ops: bool = False,
                  comm_kernels: Sequence[str] = ()) -> Report:
    """The :class:`Report` of a merged trace: the one its inputs give, from its events
    (already on the reference clock) and its summary (pid -> rank map, clock models,
    records)."""
    block = trace.tracemerge or {}
    rank_of_pid = {out: int(rank) for rank, m in block["pids"].items() for out in m.values()}
    node = np.array([rank_of_pid.get(p, -1) for p in trace.pids], dtype=np.int64)
    # the callee spans combine drew of a rank (a paired builtin's, a silent callee's) are its
    # node's in the key averages and its server threads, as in the report of the rank files;
    # the busy timeline keeps to the rank's own processes (a paired op is busy there already)
    drawn = drawn_pids({int(rank): list(m.values()) for rank, m in block["pids"].items()})
    callee_node = np.array([rank_of_pid.get(p, drawn.get(p, -1)) for p in trace.pids], dtype=np.int64)
    rows = key_averages(trace, callee_node, remote_ops)
    inputs = block.get("inputs") or []
    clocks = {int(c["rank"]): ClockModel(**c) for c in block.get("alignment") or []}
    report = Report(
        key_averages=group_rows(rows, group_by == "name,rank"), group_by=group_by,
        ranks=[{k: i.get(k) for k in ("rank", "worker_name", "hostname", "path")} for i in inputs],
        clocks=list(block.get("alignment") or []), reference=block.get("reference", 0), align=block.get("align", ""))
    found = (gpu_rank(trace, r, np.flatnonzero(node == r), comm_kernels) for r in sorted(set(node.tolist()) - {-1}))
    report.gpu = [g for g in found if g is not None]
    report.notes += unfinished_notes({trace.path: int(unfinished(trace).sum())})
    span = trace.time_span()
    if span is not None:
        first, last = span
        bin_ns = max(1, -(-(last - first) // TIMELINE_BINS))
        tree = op_tree(trace)
        rank_of_row = node[trace.pid[tree.index]]
        report.timeline = {"start_ns": first, "bin_ns": bin_ns,
                           "busy": {r: _busy(top_spans(tree, _same, rank_of_row == r), first, bin_ns)
                                    for r in sorted(clocks)}}
    if "records" not in block:
        report.notes.append(Note("a merged trace written before tracemerge kept its records: no RPC or collectives "
                                 "report"))
        return report
    records = [Recorded(int(r["rank"]), r.get("rpcs") or [], r.get("collectives") or [], bool(r.get("has_block")),
                        r.get("remote_rpcs") or [], r.get("job_id"))
               for r in block["records"]]
    threads = {r.rank: server_threads(trace, np.flatnonzero(callee_node == r.rank)) for r in records}
    _add_records(report, records, correlate(records), clocks, threads)
    return report


def _same(ns: np.ndarray) -> np.ndarray:
    return ns


def sorted_rows(rows: List[KeyAverage], sort_by: str = "cpu_time_total", row_limit: int = 100) -> List[KeyAverage]:
    """Rows sorted as torch's table() sorts (numbers descending; key ascending), limited."""
    if sort_by not in SORT_KEYS:
        raise TracemergeError(f"--sort-by {sort_by!r}: choose from {', '.join(SORT_KEYS)}")
    if sort_by == "key":
        rows = sorted(rows, key=lambda r: r.key)
    else:
        attr = sort_by.replace("cuda", "device")
        rows = sorted(rows, key=lambda r: getattr(r, attr), reverse=True)
    return rows[:row_limit] if row_limit and row_limit > 0 else rows


def row_fields(rows: List[KeyAverage]) -> Tuple[str, ...]:
    """The fields of the rows of a report with ``rows``: torch's device ones too when some
    row has device time."""
    return ROW_FIELDS + DEVICE_FIELDS if has_device_time(rows) else ROW_FIELDS


def row_dict(r: KeyAverage, fields: tuple = ROW_FIELDS) -> dict:
    return {f: getattr(r, f) for f in fields}

def postmortem_view(report: Report) -> Tuple[List[str], List[Tuple[str, Tuple[List[str], List[List[Any]]]]]]:
    """(summary lines, titled tables) of the post-mortem, times in ms from the report's
    start, for every renderer to show first; ([], []) when there is nothing to say."""
    pm = report.postmortem
    if not pm:
        return [], []
    t0 = report.timeline.get("start_ns", 0)
    return postmortem_summary(pm, t0), postmortem_tables(pm, t0)
