"""Combine: every rank into one trace on the reference clock, one process group per rank."""

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, Set, Tuple, Union

import tracemerge
from tracemerge import formats, native
from tracemerge.files.output import check_output
from tracemerge.formats import output_format
from tracemerge.formats.base import Body, Counts, Format
from tracemerge.formats.perfetto import time_shift
from tracemerge.inputs.cycles import pids_agree, recoded
from tracemerge.inputs.journal import is_journal
from tracemerge.inputs.rankinfo import RankInfo, rank_of
from tracemerge.merge.assembly import Source, write_merged
from tracemerge.model import RankTrace
from tracemerge.place import selection as select
from tracemerge.place.arrows import Arrows, P2pFlows, RpcFlows
from tracemerge.place.in_flight import in_flight_calls, in_flight_jobs, marked, never_completed
from tracemerge.place.placement import Placement
from tracemerge.place.plan import make_plan
from tracemerge.place.remote_spans import remote_spans
from tracemerge.runtime.engine import LocalEngine

if TYPE_CHECKING:
    from tracemerge.job import Alignment, Job
from tracemerge.clocks.clock import ClockModel
from tracemerge.inputs.chrome import build
from tracemerge.job.checks import rpc_sides


class Drawn(Protocol):
    """One more process drawn after the ranks' (``combine --critical-path``'s path, made by
    :mod:`tracemerge.commands.compose`, which may import the analyses: this package does not)."""

    @property
    def process(self) -> str:
        """Its name, and the placement's label."""

    @property
    def pid(self) -> int:
        """The pid of its events."""

    @property
    def key(self) -> str:
        """Its entry in the summary."""

    def events(self, base_ns: int) -> List[Dict[str, Any]]:
        """Its events, in µs after ``base_ns`` (the output's ts 0)."""

    def summary(self) -> Dict[str, Any]:
        """Its summary entry, after the pid."""


@dataclass(frozen=True)
class Written:
    """What :func:`write` made: the output's summary, and which core read each file."""

    summary: Dict[str, Any]
    cores: List[Tuple[str, str]]   # [(path, "native" or "python[: why]")], in the order written


def combine(job: "Job", alignment: Optional["Alignment"], output: Union[str, "os.PathLike[str]"], force: bool = False,
            fmt: Optional[str] = None, selection: Optional[select.Selection] = None,
            drawn: Optional[Drawn] = None) -> Dict[str, Any]:
    """Write the merged trace to ``output`` ("-" for stdout); returns its summary.

    ``alignment``: the clock model to place the ranks by (None: the job's own, from
    ``Job.open(align=...)``). ``fmt`` is "json" or "perfetto" (default: perfetto for
    .pftrace names); ``selection`` (:class:`~tracemerge.place.selection.Selection`) keeps
    some ranks, a window, longer events.

    ``drawn``: one more process after the ranks' (:class:`Drawn`: the critical path of
    ``combine --critical-path``, :func:`tracemerge.commands.compose.combine`); the summary says where.
    """
    return write(job, alignment, os.fspath(output), force, fmt, selection, drawn).summary


def write(job: "Job", alignment: Optional["Alignment"], output: str, force: bool = False, fmt: Optional[str] = None,
          selection: Optional[select.Selection] = None, drawn: Optional[Drawn] = None) -> Written:
    """:func:`combine`, also saying which core read each file (for the CLI's core line).

    Every rank is placed before the first byte is written: the job describes each rank
    completely up front, so what the workers read cannot move a placement."""
    alignment = job.clock_model(alignment)
    check_output(output, job.inputs, force)
    fmt = output_format(output, fmt)
    plan = make_plan(job, alignment, selection)
    selection, kept, places, window, sides = plan.selection, list(plan.kept), plan.places, plan.window, plan.sides
    spans = {(s["rpc_id"], s["role"], rank_of(info)) for info in kept
             for s, keep in zip(info.rpc_spans, select.kept_spans(info.rpc_spans, places[rank_of(info)], selection,
                                                                   window))
             if keep}
    drawn_ids = {r["rpc_id"] for recs in sides.values() for r in recs}
    shown = {rank_of(i) for i in kept} | set(sides)  # the ranks whose spans the output holds
    between = job.links.rpcs.calls.between(shown)  # the calls an arrow may join, found once
    rpc = RpcFlows.plan(between, spans, drawn_ids)
    # sends and receives: the output's own ranks' spans (no side of them is drawn from another's file)
    records = {rank_of(info): info.p2p for info in kept}
    p2p = P2pFlows.plan(job.links.p2p, records,
                        {rank: _kept_p2p(recs, places[rank], selection, window) for rank, recs in records.items()})
    never = never_completed(job.infos)
    in_flight = in_flight_calls(never)  # the calls never completed: marked, and said of a dead rank
    arrows = _arrows(job, rpc, between, spans, drawn_ids, shown, in_flight)
    counts: Dict[str, Any] = {"in": 0, "out": 0, "added": 0, "filtered": 0, "dropped": 0}
    for info in job.infos:
        if info not in kept:
            counts["in"] += info.events
            counts["filtered"] += info.events
            by = counts.setdefault("filtered_by", {})
            by["ranks"] = by.get("ranks", 0) + info.events
    by_rank = Arrows(rpc, p2p).by_rank()
    none = Arrows(RpcFlows({}), P2pFlows({}))

    jobs, owners = rank_jobs(job, kept, places, formats.FORMATS[fmt])
    cores: List[Tuple[str, str]] = []

    def footer(results: List[Dict[str, Any]]) -> Dict[str, Any]:
        cores.extend((part.path, r.get("core", "python")) for own, r in zip(owners, results) for part in own)
        for r in results[len(owners):]:  # the drawn callee spans and path are added, not input
            c = r["counts"]
            c["added"] = c.get("added", 0) + c.pop("in", 0)
        for r in results:
            add_counts(counts, r["counts"])
        summary = build_summary(job, alignment, places, counts)
        summary["rpc_sides"].update(arrows)
        shift = time_shift(plan.out_base_ns) if fmt == "perfetto" else 0
        return {**summary, "format": fmt, **({"time_shift_ns": shift} if shift else {}),
                "selection": select.describe(selection), **(extra or {}),
                **({"remote_spans": {str(r): n for r, n in remote.ranks.items()}} if remote.ranks else {})}

    header = {"schemaVersion": 1, "displayTimeUnit": "ms",
              "baseTimeNanoseconds": plan.out_base_ns}
    # each rank is transformed and encoded by the job's engine, into its part of the output
    remote = remote_spans(job.infos, sides, alignment.clocks, places)
    jobs += remote.jobs
    jobs += in_flight_jobs(never, job.infos, places, {rank_of(i) for i in kept})  # a failed job's unanswered calls
    extra = None
    if drawn is not None:
        job_, extra = _drawn_job(drawn, places, [p for _, p in jobs])
        jobs.append(job_)
    rank_fns = [functools.partial(rank_output, fmt=fmt, selection=selection, window=window,
                                  arrows=by_rank.get(place.rank, none), in_flight=in_flight) for _, place in jobs]
    summary = write_merged(job.engine or LocalEngine(1), rank_fns, fmt, jobs, output, header, footer, force=force)
    return Written(summary, cores)


def _kept_p2p(records: List[Dict[str, Any]], place: Placement, selection: Optional[select.Selection],
              window: Tuple[Optional[int], Optional[int]]) -> List[bool]:
    """Which of a rank's point-to-point records' spans the size controls keep, by record
    (False for a record that names no span: it gets no arrow)."""
    named = [k for k, r in enumerate(records) if isinstance(r.get("span"), dict)]
    out = [False] * len(records)
    for k, keep in zip(named, select.kept_spans([records[k]["span"] for k in named], place, selection,
                                                window).tolist()):
        out[k] = keep
    return out


def _arrows(job: "Job", rpc: RpcFlows, between: List[Tuple[int, str, int, int, bool]],
            spans: Set[Tuple[str, str, int]], drawn: Set[str], ranks: Set[int],
            in_flight: Dict[int, Dict[str, int]]) -> Dict[str, Any]:
    """What the output holds of the calls with both records between ranks it holds: how many
    are drawn (both spans, and the arrows between them), and how many spans of the others
    are not there (the events lack them — a cut file — or the size controls left them out).

    A rank read from its journal alone (it died before writing its rank file) never wrote a
    span: its sides are not counted missing but said of it, once (``journal_only``: per
    such rank, whether it died, the calls to it that never completed, the spans of its
    calls with both records that were never written)."""
    missing = {"caller": 0, "callee": 0}
    journal_only = {rank_of(i): i for i in job.infos if is_journal(i) and not i.parts and rank_of(i) in ranks}
    unwritten = {r: {"caller": 0, "callee": 0} for r in journal_only}
    for _, rpc_id, caller, callee, _ in between:  # the job's calls between ``ranks``
        for role, rank, absent in (("caller", caller, (rpc_id, "caller", caller) not in spans),
                                   ("callee", callee, (rpc_id, "callee", callee) not in spans
                                    and rpc_id not in drawn)):
            (unwritten[rank] if rank in unwritten else missing)[role] += absent
    out: Dict[str, Any] = {"drawn": len(rpc.calls), "spans_missing": missing}
    if journal_only:
        to = [callee for caller, calls in in_flight.items() if caller in ranks
              for callee in calls.values()]
        out["journal_only"] = {str(r): {"died": not info.ending["journal"]["closed"], "in_flight_to": to.count(r),
                                        "spans_never_written": unwritten[r]}
                               for r, info in sorted(journal_only.items())}
    return out


def rank_jobs(job: "Job", kept: List[RankInfo], places: Dict[int, Placement], form: Format,
              ) -> Tuple[List[Tuple[Source, Placement]], List[List[RankInfo]]]:
    """(the (source, Placement) jobs of the ranks ``kept``, the infos of the files each job
    reads). A rank of several cycle files is a job per file, written one after the other,
    each by the compiled core where it can; for a format that encodes a rank whole
    (``columns_only``: Perfetto's tracks and interning are per rank), one job that reads and
    joins its cycles (a tuple of sources; its facts were learned before)."""
    jobs: List[Tuple[Source, Placement]] = []
    owners: List[List[RankInfo]] = []
    for info in kept:
        sources = job.sources(rank_of(info))
        if info.parts and form.columns_only:
            jobs.append((tuple(sources), places[rank_of(info)]))
            owners.append(info.parts)
        else:
            jobs += [(source, places[rank_of(info)]) for source in sources]
            owners += [[part] for part in info.files]
    return jobs, owners


def _drawn_job(drawn: Drawn, places: Dict[int, Placement], taken: List[Placement],
               ) -> Tuple[Tuple[RankTrace, Placement], Dict[str, Any]]:
    """((the drawn process as a RankTrace, its Placement): one more process after the
    ranks' (and every placement in ``taken``), on the reference clock; its summary entry)."""
    base = next(iter(places.values())).out_base_ns
    trace = build(drawn.process, drawn.events(base), {"baseTimeNanoseconds": base}, None)
    stride = min(places.values(), key=lambda p: p.pid_base).pid_base
    pid_base = max(p.pid_base for p in taken) // stride * stride + stride
    place = Placement(rank=-1, label=drawn.process, pid_base=pid_base,
                      clock=ClockModel(rank=-1, method="reference"), out_base_ns=base)
    return (trace, place), {drawn.key: {"pid": pid_base + trace.pids.index(drawn.pid), **drawn.summary()}}


def rank_output(trace: RankTrace, place: Placement, fmt: str = "json", selection: Optional[select.Selection] = None,
                window: Tuple[Optional[int], Optional[int]] = (None, None), arrows: Optional[Arrows] = None,
                consume: bool = False, in_flight: Optional[Dict[int, Dict[str, int]]] = None,
                ) -> Tuple[Body, Counts]:
    """(an iterable of event lists, or protobuf bytes; counts) of one rank; runs in the
    engine's workers. ``arrows``: the flow arrows' plan (RPC calls, sends and receives), whose
    ends on this rank's spans it writes. ``consume``: the caller will not use ``trace`` again, so the events
    are freed as they are encoded. ``in_flight``: {caller rank: {rpc_id: callee rank}} of
    the calls that never completed, whose caller spans get the mark (place.in_flight)."""
    n_in = len(trace)
    if place.pids and not pids_agree(trace, place.pids):  # a cycle of a rank of several
        if native.core_of(trace) == "native":  # its splice writer writes the pid codes it read
            raise native.Declined("a cycle whose pids are not in the order of the rank's other cycles")
        trace = recoded(trace, place.pids)
    form = formats.FORMATS[fmt]
    if form.columns_only and consume:
        trace.drop_events()  # the encoder reads the columns
    trace, counts = select.apply(trace, place, selection, window)
    found, flow_counts = arrows.find(trace, place.rank) if arrows else ({}, {})
    counts.update(flow_counts, **{"in": n_in})
    trace = marked(trace, (in_flight or {}).get(place.rank, {}))
    return form.rank(trace, place, arrows, found, counts, consume)


def build_summary(job: "Job", alignment: "Alignment", places: Dict[int, Placement], counts: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "version": tracemerge.__version__,
        "inputs": [
            {"path": i.path, "rank": i.rank, "rank_source": i.rank_source, "worker_name": i.worker_name,
             "hostname": i.hostname, "events": i.events, "truncated": i.truncated, "warnings": i.warnings,
             **({"cycles": [{"cycle": p.cycle, "path": p.path, "events": p.events} for p in i.parts]}
                if i.parts else {})}
            for i in job.infos
        ],
        "skipped": [{"path": path, "problem": problem} for path, problem in job.skipped],
        "warnings": list(job.warnings),
        "pids": {str(r): {str(p): places[r].pid_base + code for code, p in enumerate(i.pids)}
                 for r, i in zip(job.ranks, job.infos)},
        "reference": alignment.reference,
        "align": alignment.method,
        "alignment": [alignment.clocks[r].as_dict() for r in job.ranks],
        "causality": alignment.causality,
        "rpc_sides": rpc_sides(job.links.rpcs),
        # what `tracemerge report` needs of the inputs to report on the merged trace alone
        "records": [{"rank": i.rank, "has_block": i.has_block, "rpcs": i.rpcs, "collectives": i.collectives,
                     **({"remote_rpcs": i.remote_rpcs} if i.remote_rpcs else {}),
                     **({"job_id": i.job_id} if i.job_id is not None else {})}
                    for i in job.infos],
        "events": {**{k: v for k, v in counts.items() if k not in BY_REASON and not k.startswith(DETAIL)},
                   **{group: counts.get(group, {}) for group in BY_REASON}},
        **{group: detail for group, prefix in DETAIL_GROUPS.items()
           if (detail := {k[len(prefix):]: v for k, v in counts.items() if k.startswith(prefix)})},
    }


# per-rank counts beyond in/out/added/filtered/dropped, reported in their own summary groups
DETAIL_GROUPS = {"rpc_flows": "rpc_", "p2p_flows": "p2p_", "perfetto": "perfetto_", "lanes": "lanes_"}
DETAIL = tuple(DETAIL_GROUPS.values())


# per-rank counts by reason ({reason: n}) of the events filtered out and dropped
BY_REASON = ("filtered_by", "dropped_by")


def add_counts(total: Counts, counts: Counts) -> None:
    """Add one rank's counts into ``total``: numbers, and the by-reason groups reason by
    reason (a reason keeps the place it was first seen in)."""
    for k, v in counts.items():
        if k in BY_REASON:
            into = total.setdefault(k, {})
            for reason, n in v.items():
                into[reason] = into.get(reason, 0) + n
        else:
            total[k] = total.get(k, 0) + v
