"""``tracemerge report``'s model: key averages, RPC breakdown, collectives, clocks.

:func:`build_report` reads rank files (or one merged trace written by ``combine``) into a
:class:`Report` of plain data; :func:`tracemerge.report.render.render` turns it into a
table like torch's ``key_averages().table()`` (with a Node ID column), CSV, JSON, Markdown
or an HTML page.
"""

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import numpy as np

from tracemerge.analysis.job_timeline import build_timeline
from tracemerge.analysis.postmortem import PostMortem, postmortem
from tracemerge.analysis.postmortem import sections as postmortem_tables
from tracemerge.analysis.postmortem import summary as postmortem_summary
from tracemerge.analysis.summary import Analysis, analyse
from tracemerge.analysis.timeline import RankTimeline, rank_timeline, served_spans
from tracemerge.clocks.clock import ClockModel
from tracemerge.correlate.match import Correlation, correlate
from tracemerge.engine import LocalEngine, map_where_held
from tracemerge.errors import TraceError, TracemergeError, reading
from tracemerge.inputs.admit import MERGED_HEAD, is_merged_block, problem
from tracemerge.inputs.head import read_head
from tracemerge.inputs.merged_summary import check_summary
from tracemerge.job import Alignment, AlignRequest, Job
from tracemerge.model import RankTrace
from tracemerge.native import read_file
from tracemerge.nesting import unfinished
from tracemerge.report import GROUP_BY, SORT_KEYS  # the CLI's choices, read without this module
from tracemerge.report.collectives import CollectiveStats, collective_report, p2p_report
from tracemerge.report.gpu import GpuRank, gpu_rank
from tracemerge.report.keyavg import (
    KeyAverage,
    OpTree,
    correlations,
    group_rows,
    has_device_time,
    key_averages,
    op_tree,
)
from tracemerge.report.notes import HINT, WARNING, Note
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


def _top_spans(tree: OpTree, to_ref: Callable[[np.ndarray], np.ndarray],
               rows: Union[bool, np.ndarray] = True) -> Tuple[np.ndarray, np.ndarray]:
    """(start, end) reference-clock ns of the top-level host ops of an op tree (of its
    ``rows``): what keeps a thread busy. Asynchronous spans (calls in flight, gloo work)
    keep no thread busy: they are left out."""
    top = rows & tree.kept & (tree.parent < 0) & ~tree.is_async
    return to_ref(tree.start[top]), to_ref(tree.end[top])


def _busy(spans: Tuple[np.ndarray, np.ndarray], start_ns: int, bin_ns: int) -> List[float]:
    """Average number of busy threads per time bin of the ``spans`` (:func:`_top_spans`),
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
    alignment = job.clock_model(alignment)
    clocks = alignment.clocks
    rows: List[KeyAverage] = []
    threads: Dict[int, int] = {}
    traces_info: List[Dict[str, Any]] = []
    spans: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
    timelines: Dict[int, RankTimeline] = {}
    gpu: List[Optional[GpuRank]] = []
    open_at_stop: Dict[str, int] = {}   # {path: spans still open when its profiler stopped}
    runner = job.engine or LocalEngine(1)
    sources = [job.source(rank) for rank in job.ranks]
    names = [{r.get("name", "") for r in info.rpcs} if analysis else None for info in job.infos]
    paired = served_spans(job.infos) if analysis else {}  # paired builtins' ops: their callee spans
    args = (sources, job.ranks, [clocks[r] for r in job.ranks], [i.path for i in job.infos], names,
            [remote_ops] * len(sources), [tuple(comm_kernels)] * len(sources), [paired.get(r, {}) for r in job.ranks])
    # each rank's products by the worker that holds (or reads) it, once; traces kept in this
    # process are not sent to workers
    made = map_where_held(runner, rank_products, *args)
    for rank, info, part in zip(job.ranks, job.infos, made):
        rows += part.rows
        open_at_stop[info.path] = part.open_at_stop
        gpu.append(part.gpu)
        if part.timeline is not None:
            timelines[rank] = part.timeline
        threads[rank] = part.server_threads
        spans[rank] = part.spans
        traces_info.append({"rank": rank, "worker_name": info.worker_name, "hostname": info.hostname,
                            "path": info.path})
    # ranks with events (one read from its journal alone has none)
    timed = [(r, i) for r, i in zip(job.ranks, job.infos) if i.timed]
    if timed:
        first = min(clocks[r].to_reference(i.first_ns) for r, i in timed)
        last = max(clocks[r].to_reference(i.last_ns) for r, i in timed)
    else:  # every rank left only a journal: the job's times are its profiling windows (its events' are 0)
        first = min(clocks[r].to_reference(i.start_ns) for r, i in zip(job.ranks, job.infos))
        last = max(clocks[r].to_reference(i.stop_ns) for r, i in zip(job.ranks, job.infos))
    bin_ns = max(1, -(-(last - first) // TIMELINE_BINS))
    busy = {rank: _busy(found, first, bin_ns) for rank, found in spans.items()}
    report = Report(key_averages=group_rows(rows, group_by == "name,rank"), group_by=group_by, ranks=traces_info,
                    clocks=[clocks[r].as_dict() for r in job.ranks], reference=alignment.reference,
                    align=alignment.method, timeline={"start_ns": first, "bin_ns": bin_ns, "busy": busy},
                    gpu=[g for g in gpu if g is not None])
    _add_records(report, job.infos, job.links, clocks, threads)
    report.postmortem = postmortem(job.infos, clocks) or None
    report.notes += unfinished_notes(open_at_stop)
    if analysis:
        report.analysis = analyse(build_timeline(timelines, job.links.rpcs.calls, job.links.collectives, clocks))
    return report


@dataclass
class RankProducts:
    """What the report keeps of one rank, made where its events are (an engine's worker)."""

    rows: List[KeyAverage]                  # its key-average partials, grouped by (name, rank) later
    open_at_stop: int                       # spans still open when its profiler stopped
    gpu: Optional[GpuRank]
    timeline: Optional[RankTimeline]        # the analyses' timeline (asked for with rpc names)
    server_threads: int
    spans: Tuple[np.ndarray, np.ndarray]    # its top-level spans on the reference clock (busy bins)


def rank_products(source: Union[RankTrace, str], rank: int, clock: ClockModel, path: str,
                  rpc_names: Optional[Set[str]], remote_ops: bool, comm_kernels: Sequence[str] = (),
                  served: Optional[Mapping[Tuple[Any, int], str]] = None) -> RankProducts:
    """One rank's :class:`RankProducts` from one read of its events (``source``: the trace,
    or its file); ``rpc_names``: also its timeline, for the analyses; ``comm_kernels``: regexes
    of further communication kernels for the GPU section."""
    trace = source if isinstance(source, RankTrace) else read_file(source, columns_only=True)
    if is_merged(trace):
        raise TracemergeError(f"{path}: a merged trace; report on it alone, or on the rank files")
    with reading(path):
        tree = op_tree(trace)   # built once: the key averages and the busy bins both use it
        links = correlations(trace)  # likewise: the key averages and the GPU section
        return RankProducts(
            rows=key_averages(trace, np.full(len(trace.pids), rank, dtype=np.int64), remote_ops, tree, links),
            open_at_stop=int(unfinished(trace).sum()),
            gpu=gpu_rank(trace, rank, comm_kernels=comm_kernels, links=links),
            timeline=None if rpc_names is None else rank_timeline(trace, rank, clock, rpc_names, served),
            server_threads=server_threads(trace),
            spans=_top_spans(tree, clock.to_reference))


def unfinished_notes(open_at_stop: Dict[str, int]) -> List[Note]:
    """A note per input with spans still open when its profiler stopped (``args.finished``
    false): they are in the trace as Kineto wrote them, and no row of the key averages."""
    return [Note(f"{path}: {n} span{'s were' if n != 1 else ' was'} still open when the profiler stopped (args.finished "
            "false; the duration written runs to the stop, not to the span's end): left out of the key averages, "
            "their children still counted under them") for path, n in open_at_stop.items() if n]


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
    rows = key_averages(trace, node, remote_ops)
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
                           "busy": {r: _busy(_top_spans(tree, _same, rank_of_row == r), first, bin_ns)
                                    for r in sorted(clocks)}}
    if "records" not in block:
        report.notes.append(Note("a merged trace written before tracemerge kept its records: no RPC or collectives "
                                 "report"))
        return report
    records = [Recorded(int(r["rank"]), r.get("rpcs") or [], r.get("collectives") or [], bool(r.get("has_block")),
                        r.get("remote_rpcs") or [], r.get("job_id"))
               for r in block["records"]]
    threads = {r.rank: server_threads(trace, np.flatnonzero(node == r.rank)) for r in records}
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
