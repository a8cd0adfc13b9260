"""The per-rank pass: what the registered report sections ask of one rank, made once, where
its events are.

A section (``report.sections.Section.per_rank``) names the per-rank products it reads as
:data:`Product` pairs, ``(NAME, "module:function")``: a function of one :class:`RankView`
returning small plain data. ``report``, ``combine --report``, ``export`` and the analyses'
timelines all run this one pass; a new analysis that needs new per-rank data is its module
(with the function) plus its section's registry line.

Per rank, in the engine's worker that holds (or reads) the rank (:func:`rank_products`):

1. read its events once (:func:`read_source`: a path by the compiled core, columns only; a
   trace held or in memory as it is; a rank's cycle files read and joined);
2. put them as the :class:`~tracemerge.place.plan.Plan` says (:func:`placed`): the pids of
   one cycle of several re-coded to the rank's order, the selection (``--window``,
   ``--min-duration``, …) applied;
3. call each asked product's function, in the order asked, with a :class:`RankView`;
   products share what more than one of them builds through :meth:`RankView.shared` (the op
   tree, the correlations: made by whichever asks first, once);
4. hand back ``{NAME: value}``, never the events.

The parent gathers them as ``{NAME: {rank: value}}`` (:func:`gather`).
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, TypeVar, Union

from tracemerge import native
from tracemerge.errors import reading
from tracemerge.inputs.cycles import joined_trace, pids_agree, recoded
from tracemerge.model import RankTrace
from tracemerge.place import selection as select
from tracemerge.place.placement import Placement
from tracemerge.place.served import ServedOps, served_spans
from tracemerge.registry import Deferred
from tracemerge.runtime.engine import Engine, Held, LocalEngine, gc_paused, map_where_held

if TYPE_CHECKING:
    from tracemerge.clocks.clock import ClockModel
    from tracemerge.job import Job
    from tracemerge.place.plan import Plan

T = TypeVar("T")

# (NAME, "module:function"): a per-rank product, the function taking a RankView (named, not
# imported: a product's module may sit in a layer above this one, and a task pickles small)
Product = Tuple[str, str]
Source = Union[str, RankTrace, Held, Tuple[Union[str, RankTrace, Held], ...]]


@dataclass(frozen=True)
class Options:
    """What the products are asked with, the same for every rank of a job."""

    remote_ops: bool = False                  # the key averages keep RPC callee ops (--remote-ops)
    comm_kernels: Tuple[str, ...] = ()        # regexes of further communication kernels (--comm-kernel)
    gpu: bool = True                          # the GPU time (~0.2 s of a 60 MB rank: export asks with --gpu)
    timelines: bool = False                   # the analyses' timelines (report --analysis, --critical-path)


@dataclass(frozen=True)
class Ask:
    """One rank's task: where it goes, what of it is kept, and what to make of it."""

    rank: int
    place: Placement
    products: Tuple[Product, ...]
    options: Options = Options()
    selection: Optional[select.Selection] = None
    window: Tuple[Optional[int], Optional[int]] = (None, None)   # output ns (Plan.window)
    rpc_names: Tuple[str, ...] = ()            # the caller span names of its RPC records (timelines)
    served: Optional[ServedOps] = None   # the ops of paired builtins it served: their calls' callee spans


@dataclass
class RankView:
    """What a product's function is given: one rank's events, placed and selected, and the ask."""

    trace: RankTrace
    ask: Ask
    _shared: Dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.ask.rank

    @property
    def clock(self) -> "ClockModel":
        return self.ask.place.clock

    @property
    def options(self) -> Options:
        return self.ask.options

    def shared(self, key: str, make: Callable[[RankTrace], T]) -> T:
        """``make(trace)``, made once per rank under ``key`` for every product that asks."""
        if key not in self._shared:
            self._shared[key] = make(self.trace)
        found: T = self._shared[key]
        return found


def source_of(job: "Job", rank: int) -> Source:
    """What a worker reads ``rank`` from: its one source, or its cycle files' (joined there)."""
    own = job.sources(rank)
    return own[0] if len(own) == 1 else tuple(own)


def named(source: Source) -> str:
    """The file a source is read from, for its errors."""
    first = source[0] if isinstance(source, tuple) else source
    return first if isinstance(first, str) else first.key if isinstance(first, Held) else first.path


def read_source(source: Source) -> Tuple[RankTrace, str]:
    """(trace, core): the compiled core reads a file it takes (columns only: nothing here
    writes JSON), the Python path the rest; a rank's cycle files are joined."""
    if isinstance(source, tuple):
        read = [read_source(s) for s in source]
        return joined_trace([t for t, _ in read]), next((c for _, c in read if c != "native"), "native")
    if isinstance(source, RankTrace):
        return source, native.core_of(source)
    # (a Held source is the trace itself by the time a worker runs this)
    return native.read_rank(source.key if isinstance(source, Held) else source, columns_only=True)


def placed(trace: RankTrace, ask: Ask) -> Tuple[RankTrace, Dict[str, Any]]:
    """(the rank's events as the plan keeps them, {"in", "filtered", "filtered_by"} counts)."""
    if ask.place.pids and not pids_agree(trace, ask.place.pids):  # a cycle of a rank of several
        trace = recoded(trace, ask.place.pids)
    n_in = len(trace)
    trace, counts = select.apply(trace, ask.place, ask.selection, ask.window)
    return trace, {**counts, "in": n_in}


def products_of(trace: RankTrace, ask: Ask) -> Dict[str, Any]:
    """``{NAME: value}`` of every product ``ask`` names, from one rank's placed events."""
    view = RankView(trace, ask)
    out: Dict[str, Any] = {}
    for name, where in ask.products:
        module, _, function = where.partition(":")
        out[name] = Deferred(module, function)(view)
    return out


def rank_products(source: Source, ask: Ask) -> Dict[str, Any]:
    """The worker of one rank (runs in the engine's processes): read once, place, make its products."""
    with gc_paused(), reading(named(source)):
        trace, _ = read_source(source)
        trace, _ = placed(trace, ask)
        return products_of(trace, ask)


def asks(job: "Job", plan: "Plan", products: Iterable[Product], options: Options = Options()) -> List[Ask]:
    """One :class:`Ask` per rank the plan keeps, in job order."""
    wanted = tuple(products)
    # the key averages and the timelines alike count them (place/served.py)
    paired = served_spans(job.infos)
    return [Ask(rank=rank, place=plan.places[rank], products=wanted, options=options,
                selection=plan.selection, window=plan.window,
                rpc_names=tuple(sorted({r.get("name", "") for r in info.rpcs})) if options.timelines else (),
                served=paired.get(rank))
            for info, rank in zip(plan.kept, plan.kept_ranks)]


def gather(job: "Job", plan: "Plan", products: Iterable[Product], options: Options = Options(),
           engine: Optional[Engine] = None) -> Dict[str, Dict[int, Any]]:
    """``{NAME: {rank: value}}`` of every rank the plan keeps: each rank's products made by the
    worker that holds (or reads) it, once (traces kept in this process are not sent to
    workers); ``engine``: where paths are read (None: the job's, else this process)."""
    wanted = tuple(products)
    tasks = asks(job, plan, wanted, options)
    runner = engine or job.engine or LocalEngine(1)
    made = map_where_held(runner, rank_products, [source_of(job, a.rank) for a in tasks], tasks)
    return {name: {a.rank: m[name] for a, m in zip(tasks, made)} for name, _ in wanted}

