"""One job's plan: where every rank goes, decided once and then only read.

:func:`make_plan` takes a :class:`~tracemerge.job.Job`, a clock model and a selection and
decides, from the ranks' descriptions alone (kilobytes, no events):

1. the clock model (the job's own unless another is given) and the ranks the selection
   keeps (``--ranks``; one that matches no input is refused here);
2. the job's first event on the reference clock (:func:`reference_extent`: over the ranks
   with events, else over every rank);
3. each rank's :class:`~tracemerge.place.placement.Placement`: pid blocks in rank order, a
   stride above the most pids any rank has, ts 0 at the whole second before that first event;
4. the window (``--window``) in output ns, measured from that first event;
5. the callee sides the output draws from callers' records (``drawn_sides``).

``combine``, ``report``, ``export`` and the analyses read the same :class:`Plan`, so the
merged trace, the tables and the reports place and select every rank alike.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tracemerge.clocks.clock import ClockModel
from tracemerge.inputs.rankinfo import RankInfo, rank_of
from tracemerge.place import selection as select
from tracemerge.place.placement import Placement, rank_label
from tracemerge.place.remote_spans import drawn_sides

if TYPE_CHECKING:
    from tracemerge.job import Alignment, Job

SECOND_NS = 1_000_000_000


@dataclass(frozen=True)
class Plan:
    """Where each rank of a job goes in every output: made once (:func:`make_plan`), then only read."""

    alignment: "Alignment"
    selection: select.Selection
    kept: Tuple[RankInfo, ...]                       # the infos of the ranks the selection keeps, in job order
    first_ns: int                                    # the job's first event on the reference clock
    places: Dict[int, Placement]                     # {rank: Placement}, every rank of the job
    window: Tuple[Optional[int], Optional[int]]      # --window in output ns (None: unbounded)
    sides: Dict[int, List[Dict[str, Any]]]           # {callee rank: [remote record]} drawn from callers

    @property
    def clocks(self) -> Mapping[int, ClockModel]:
        return self.alignment.clocks

    @property
    def out_base_ns(self) -> int:
        """The output's ts 0 (every placement shares it)."""
        return next(iter(self.places.values())).out_base_ns

    @property
    def kept_ranks(self) -> List[int]:
        return [rank_of(i) for i in self.kept]


def reference_extent(infos: Sequence[RankInfo], clocks: Mapping[int, ClockModel]) -> Optional[Tuple[int, int]]:
    """(first, last) event of the ranks with events, on the reference clock; None when no
    rank has events (every one read from its journal alone)."""
    timed = [i for i in infos if i.timed]
    if not timed:
        return None
    return (min(clocks[rank_of(i)].to_reference(i.first_ns) for i in timed),
            max(clocks[rank_of(i)].to_reference(i.last_ns) for i in timed))


def aligned_start(infos: Sequence[RankInfo], clocks: Mapping[int, ClockModel]) -> int:
    """The first event of the job on the reference clock (of every rank when none has events)."""
    extent = reference_extent(infos, clocks)
    if extent is not None:
        return extent[0]
    return min(clocks[rank_of(i)].to_reference(i.first_ns) for i in infos)


def placements(ranks: Sequence[int], infos: Sequence[RankInfo], clocks: Mapping[int, ClockModel],
               first: int) -> Dict[int, Placement]:
    """{rank: Placement}: pid blocks ordered by rank, ts 0 at the whole second before ``first``."""
    stride = 1000 * (1 + max(len(i.pids) for i in infos) // 1000)
    out_base = first - first % SECOND_NS
    return {
        rank: Placement(rank=rank, label=rank_label(rank, info.worker_name, info.hostname),
                        pid_base=(n + 1) * stride, clock=clocks[rank], out_base_ns=out_base,
                        pids=tuple(info.pids) if info.parts else ())
        for n, (rank, info) in enumerate(zip(ranks, infos))
    }


def make_plan(job: "Job", alignment: Optional["Alignment"] = None,
              selection: Optional[select.Selection] = None) -> Plan:
    """The :class:`Plan` of ``job`` under ``alignment`` (None: the job's own) and ``selection``."""
    alignment = job.clock_model(alignment)
    selection = selection or select.Selection()
    select.check_ranks(selection, job.ranks)
    kept = tuple(i for i in job.infos if selection.keeps_rank(rank_of(i)))
    first = aligned_start(job.infos, alignment.clocks)
    places = placements(job.ranks, job.infos, alignment.clocks, first)
    window = selection.window_ns(first - next(iter(places.values())).out_base_ns)
    sides = drawn_sides(job.infos, {rank_of(i) for i in kept})
    return Plan(alignment, selection, kept, first, places, window, sides)
