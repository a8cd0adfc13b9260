"""The per-rank pass of the tables and the job-level tables after it.

Each rank is read once, by a worker of the job's engine (:func:`rank_part`): the merge's
selection, the rank's ``events`` (:mod:`tracemerge.tables.events`), its key-average rows
(``report``'s :func:`~tracemerge.report.keyavg.key_averages` over the same op tree), its
RPC server threads and spans, and, when the critical path is asked for, its timeline
(:func:`~tracemerge.analysis.timeline.rank_timeline`). A worker writes its events as a
Parquet file of its own (``export``) or hands them back (``load``); everything else it
returns is small. The parent then makes the job's tables from those and the job's joins.

The placements, the window and the drawn callee spans are the merge's own
(:mod:`tracemerge.merge.combine`, :mod:`tracemerge.place`), so rows and merged JSON agree.
"""

import contextlib
import ctypes
import functools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from tracemerge import native
from tracemerge.analysis.timeline import RankTimeline, rank_timeline, served_spans
from tracemerge.engine import Held, LocalEngine, gc_paused
from tracemerge.errors import reading
from tracemerge.inputs.cycles import joined_trace, pids_agree, recoded
from tracemerge.inputs.rankinfo import rank_of
from tracemerge.job import Alignment, Job
from tracemerge.model import RankTrace
from tracemerge.place import selection as select
from tracemerge.place.placement import Placement
from tracemerge.place.plan import make_plan
from tracemerge.place.remote_spans import remote_spans
from tracemerge.registry import Registry
from tracemerge.report import sections
from tracemerge.report.gpu import GpuRank, gpu_rank
from tracemerge.report.keyavg import KeyAverage, correlations, key_averages, op_tree
from tracemerge.report.rpcstats import server_threads
from tracemerge.tables import job_tables
from tracemerge.tables.events import event_schema, rank_batches, require_arrow

if TYPE_CHECKING:
    import pyarrow as pa

Source = Union[str, RankTrace, Held, Tuple[Union[str, RankTrace, Held], ...]]

# the job-level tables tracemerge's own report sections make, in the order they are written
# (a section's ``export``: one function of job_tables.Products each)
JOB_TABLES = tuple(name for s in sections.SECTIONS for name, _ in s.export)


@dataclass
class RankPart:
    """What one rank's worker hands back (small, except ``events`` for ``load``)."""

    rank: int
    part: int                                  # 0: the rank's own file(s); 1: callee spans drawn from callers
    rows: int                                  # events rows
    counts: Dict[str, Any]                     # in, filtered, filtered_by
    rpc_spans: List[Tuple[str, str, str, Optional[str]]] = field(default_factory=list)
    key_averages: List[KeyAverage] = field(default_factory=list)
    server_threads: int = 0
    gpu: Optional[GpuRank] = None              # the rank's GPU time (report's GPU section), with device events
    timeline: Optional[RankTimeline] = None
    events: Optional["pa.Table"] = None         # kept when no file was written
    core: str = "python"


@dataclass(frozen=True)
class PartTask:
    """One worker's task: where to read, how to place and select, what to make."""

    rank: int
    part: int
    place: Placement
    selection: select.Selection
    window: Tuple[Optional[int], Optional[int]]
    path: Optional[str]                        # the Parquet file to write, None: hand the table back
    report: bool                               # the key-average rows and server threads (own parts)
    timeline_names: Optional[Tuple[str, ...]]  # the rank's RPC names when its timeline is wanted
    served: Optional[Dict[Tuple[Any, int], str]] = None  # paired builtins' ops, their callee spans (served_spans)
    remote_ops: bool = False
    gpu: bool = False                          # the rank's GPU time (~0.2 s of a 60 MB rank: asked for)
    comm_kernels: Tuple[str, ...] = ()         # regexes of further communication kernels (--comm-kernel)


def rank_part(source: Source, task: PartTask) -> RankPart:
    """The worker of one part (runs in the engine's processes): read once, select, tabulate."""
    name = _named(source)
    with gc_paused(), reading(name), _returning_pool():
        trace, core = _read(source)
        if task.place.pids and not pids_agree(trace, task.place.pids):  # a cycle of a rank of several
            trace = recoded(trace, task.place.pids)
        n_in = len(trace)
        trace, counts = select.apply(trace, task.place, task.selection, task.window)
        part = RankPart(task.rank, task.part, 0, {**counts, "in": n_in}, core=core)
        if task.report:
            links = correlations(trace)  # read by the key averages and the GPU section both
            part.key_averages = key_averages(trace, np.full(len(trace.pids), task.rank, dtype=np.int64),
                                             task.remote_ops, op_tree(trace), links)
            part.server_threads = server_threads(trace)
            part.gpu = gpu_rank(trace, task.rank, comm_kernels=task.comm_kernels, links=links) if task.gpu else None
            _trim()  # the op tree's and the decoded args' pages, before the batches need more
        if task.timeline_names is not None:
            part.timeline = rank_timeline(trace, task.rank, task.place.clock, task.timeline_names, task.served)
        batches, part.rpc_spans = rank_batches(trace, task.place)
        del trace  # the batches hold what they need of it
        _trim()  # the trace's pages (the core's scan: ~45 MB of a 60 MB rank), before any batch is made
        if task.path is not None:
            part.rows = _write_parquet(batches, task.path)
        else:
            part.events = require_arrow().Table.from_batches(list(batches), schema=event_schema())
            part.rows = part.events.num_rows
    _trim()
    return part


def _trim() -> None:
    """Hand the heap the part freed back to the system: a worker waits, idle, while the
    parent makes the job's tables, and would hold its high-water mark meanwhile."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


@contextlib.contextmanager
def _returning_pool() -> Iterator[None]:
    """Arrow's allocations from the C library's malloc for the length of one part: the
    bundled mimalloc keeps the pages of every freed batch (~45 MB more at the peak of a 60 MB
    rank), malloc hands them back. The pool before is restored."""
    pa = require_arrow()
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def _write_parquet(batches: Iterator["pa.RecordBatch"], path: str) -> int:
    """Write the batches as one Parquet file, a row group per batch; returns the rows."""
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(path), exist_ok=True)
    # the rank is the partition (the folder rank=N): readers add it back from the path
    schema = event_schema()
    schema = schema.remove(schema.get_field_index("rank"))
    rows = 0
    # zstd without dictionary pages: smaller and cheaper than snappy with them on these
    # columns (a 60 MB rank: 1.0 MB in 0.08 s against 4 MB in 0.23 s)
    with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=False) as writer:
        for batch in batches:
            rows += batch.num_rows
            writer.write_batch(batch.drop_columns(["rank"]))
            del batch  # written: not held while the generator makes the next one (~11 MB)
    return rows


def _named(source: Source) -> str:
    first = source[0] if isinstance(source, tuple) else source
    return first if isinstance(first, str) else first.key if isinstance(first, Held) else first.path


def _read(source: Source) -> Tuple[RankTrace, str]:
    """(trace, core): the compiled core reads a file it takes (columns only: nothing here
    writes JSON), the Python path the rest; a rank's cycle files are joined."""
    if isinstance(source, tuple):
        read = [_read(s) for s in source]
        return joined_trace([t for t, _ in read]), next((c for _, c in read if c != "native"), "native")
    if isinstance(source, RankTrace):
        return source, native.core_of(source)
    # (a Held source is the trace itself by the time a worker runs this)
    return native.read_rank(source.key if isinstance(source, Held) else source, columns_only=True)


@dataclass
class Built:
    """The per-rank pass's results and the job-level tables."""

    parts: List[RankPart]
    tables: Dict[str, "pa.Table"]
    alignment: Alignment
    places: Dict[int, Placement]


def build(job: Job, alignment: Optional[Alignment] = None, selection: Optional[select.Selection] = None,
          events_dir: Optional[str] = None, group_by: str = "name", remote_ops: bool = False,
          critical_path: bool = False, gpu: bool = False, comm_kernels: Sequence[str] = ()) -> Built:
    """Every part's events (files under ``events_dir``, else tables in memory) and the job's tables."""
    plan = make_plan(job, alignment, selection)
    alignment, places = plan.alignment, plan.places
    # the window is measured in output ns (after out_base), as the merge measures it
    task = functools.partial(PartTask, selection=plan.selection, window=plan.window, remote_ops=remote_ops, gpu=gpu,
                             comm_kernels=tuple(comm_kernels))

    def where(rank: int, part: int) -> Optional[str]:
        return None if events_dir is None else os.path.join(events_dir, f"rank={rank}", f"part-{part}.parquet")

    sources: List[Source] = []
    tasks: List[PartTask] = []
    paired = served_spans(job.infos) if critical_path else {}
    for info in plan.kept:
        rank = rank_of(info)
        own = job.sources(rank)
        sources.append(own[0] if len(own) == 1 else tuple(own))
        names = tuple(sorted({r.get("name", "") for r in info.rpcs})) if critical_path else None
        tasks.append(task(rank=rank, part=0, place=places[rank], path=where(rank, 0), report=True,
                          timeline_names=names, served=paired.get(rank)))
    # the callee spans the merge draws from callers' records: rows of the callee's rank
    for trace, place in remote_spans(job.infos, plan.sides, alignment.clocks, places).jobs:
        sources.append(trace)
        tasks.append(task(rank=place.rank, part=1, place=place, path=where(place.rank, 1), report=False,
                          timeline_names=None))
    # a job opened without an engine keeps small inputs in memory (a core-read trace maps its
    # file and does not pickle): its parts are made here, as the job has no workers anyway
    runner = job.engine or LocalEngine(1)
    parts: List[RankPart] = runner.map(rank_part, sources, tasks)
    return Built(parts, job_level(job, alignment, parts, group_by, critical_path), alignment, places)


def job_level(job: Job, alignment: Alignment, parts: List[RankPart], group_by: str = "name",
              critical_path: bool = False) -> Dict[str, "pa.Table"]:
    """The job's tables from its joins and the parts' small results: every report section's
    ``export`` tables, in the registry's order (read when called: a section registered after
    import is walked too)."""
    made = job_tables.products(job, alignment, parts, group_by, critical_path)
    tables: Registry[Callable[[job_tables.Products], "pa.Table"]] = Registry(
        {name: where for s in sections.SECTIONS for name, where in s.export})
    return {name: tables[name](made) for name in tables}
