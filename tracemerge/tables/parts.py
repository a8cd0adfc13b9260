"""Export's pass over the ranks and the job-level tables after it.

Each rank is read once, by a worker of the job's engine (:func:`rank_part`), in the per-rank
pass every command shares (:mod:`tracemerge.place.rank_pass`): placed and selected as the
job's :class:`~tracemerge.place.plan.Plan` says, the products the exported report sections
ask of it (their ``per_rank``: key-average rows, RPC server threads, GPU time with
``--gpu``, the timeline with ``--critical-path``, …) made, then its ``events``
(:mod:`tracemerge.tables.events`). A worker writes its events as a Parquet file of its own
(``export``) or hands them back (``load``); everything else it returns is small. The parent
then makes the job's tables from those and the job's joins.

The plan is the merge's own (placements, window, drawn callee spans), so rows and merged
JSON agree.
"""

import contextlib
import ctypes
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tracemerge.errors import reading
from tracemerge.job import Alignment, Job
from tracemerge.place import selection as select
from tracemerge.place.placement import Placement
from tracemerge.place.plan import make_plan
from tracemerge.place.rank_pass import Ask, Options, Source, asks, named, placed, products_of, read_source, source_of
from tracemerge.place.remote_spans import remote_spans
from tracemerge.registry import Registry
from tracemerge.report import sections
from tracemerge.runtime.engine import LocalEngine, gc_paused
from tracemerge.tables import job_tables
from tracemerge.tables.events import event_schema, rank_batches, require_arrow

if TYPE_CHECKING:
    import pyarrow as pa

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
    products: Dict[str, Any] = field(default_factory=dict)   # the sections' per-rank products (own parts)
    events: Optional["pa.Table"] = None         # kept when no file was written
    core: str = "python"


@dataclass(frozen=True)
class PartTask:
    """One worker's task: the per-rank pass's ask (where the part goes, what is kept of it, the
    products it makes: none for the drawn callee spans), and where its events go."""

    part: int
    ask: Ask
    path: Optional[str]                        # the Parquet file to write, None: hand the table back


def rank_part(source: Source, task: PartTask) -> RankPart:
    """The worker of one part (runs in the engine's processes): read once, place, make the
    sections' products (:mod:`tracemerge.place.rank_pass`), tabulate the events."""
    ask = task.ask
    with gc_paused(), reading(named(source)), _returning_pool():
        trace, core = read_source(source)
        trace, counts = placed(trace, ask)
        part = RankPart(ask.rank, task.part, 0, counts, core=core)
        if ask.products:
            part.products = products_of(trace, ask)
            _trim()  # the op tree's and the decoded args' pages, before the batches need more
        batches, part.rpc_spans = rank_batches(trace, ask.place, ask.served)
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
    options = Options(remote_ops=remote_ops, comm_kernels=tuple(comm_kernels), gpu=gpu, timelines=critical_path)

    def where(rank: int, part: int) -> Optional[str]:
        return None if events_dir is None else os.path.join(events_dir, f"rank={rank}", f"part-{part}.parquet")

    # each kept rank's own file(s), with what the exported sections ask of it
    own = asks(job, plan, sections.per_rank_products(exported=True), options)
    sources: List[Source] = [source_of(job, a.rank) for a in own]
    tasks = [PartTask(0, a, where(a.rank, 0)) for a in own]
    # the callee spans the merge draws from callers' records: rows of the callee's rank
    for trace, place in remote_spans(job.infos, plan.sides, plan.clocks, plan.places).jobs:
        sources.append(trace)
        tasks.append(PartTask(1, Ask(place.rank, place, (), options, plan.selection, plan.window),
                              where(place.rank, 1)))
    # a job opened without an engine keeps small inputs in memory (a core-read trace maps its
    # file and does not pickle): its parts are made here, as the job has no workers anyway
    runner = job.engine or LocalEngine(1)
    parts: List[RankPart] = runner.map(rank_part, sources, tasks)
    return Built(parts, job_level(job, plan.alignment, parts, group_by, critical_path), plan.alignment,
                 plan.places)


def job_level(job: Job, alignment: Alignment, parts: List[RankPart], group_by: str = "name",
              critical_path: bool = False) -> Dict[str, "pa.Table"]:
    """The job's tables from its joins and the parts' small results: every report section's
    ``export`` tables, in the registry's order (read when called: a section registered after
    import is walked too)."""
    made = job_tables.products(job, alignment, parts, group_by, critical_path)
    tables: Registry[Callable[[job_tables.Products], "pa.Table"]] = Registry(
        {name: where for s in sections.SECTIONS for name, where in s.export})
    return {name: tables[name](made) for name in tables}
