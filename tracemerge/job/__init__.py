"""The job: every input file read and described, its ranks joined and aligned, once per
command; afterwards only read.

:meth:`Job.open` is the whole front of the pipeline (read → describe → correlate → align):

- each file is described completely up front (:mod:`tracemerge.job.describe_files`: its rank,
  worker, anchors and window, RPC and collective records, and what only its events tell:
  pids, threads, first and last event, warnings), so no later stage learns or changes a
  rank's facts, and a writer places every rank before it writes the first byte;
- the records of all ranks are joined once (:func:`tracemerge.correlate.match.correlate`:
  RPC calls with both sides, collectives grouped), and every consumer — the clock model,
  the causality review, the job checks, the flow arrows, the summary, the reports, the
  analyses — reads that one :class:`~tracemerge.correlate.match.Correlation`;
- the clock model (:class:`Alignment`) is solved once, when asked for (``align=``).

How the files are read is the strategy the command picks (:mod:`tracemerge.job.reads`):
by default the events are kept in memory only while the inputs are small, or by the local
engine's workers that read them where memory holds them; otherwise each rank is read again,
by the worker that needs it, so memory stays bounded by the largest rank.

``Session`` is the same class under the name of the library's first releases.
"""

import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from tracemerge.clocks.causality import review
from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.joint import pair_jointly
from tracemerge.clocks.methods import align as align_clocks
from tracemerge.correlate.match import Correlation, correlate
from tracemerge.errors import TracemergeError
from tracemerge.inputs.admit import admit
from tracemerge.inputs.cycles import join_cycles, joined_trace, keep_cycle
from tracemerge.inputs.flight_recorder import join_dumps
from tracemerge.inputs.journal import prefer_rank_files
from tracemerge.inputs.rankinfo import RankInfo, assign_ranks, rank_of
from tracemerge.job import reads
from tracemerge.job.checks import check_job, check_links, check_windows, rpc_peers
from tracemerge.job.job_ids import agreed_job_ids
from tracemerge.job.reads import ReadStrategy
from tracemerge.model import RankTrace
from tracemerge.native import read_file
from tracemerge.runtime.engine import Engine, Held, gc_paused


@dataclass(frozen=True)
class Alignment:
    method: str                          # what was asked for
    reference: int
    clocks: Dict[int, ClockModel]        # {rank: ClockModel}
    causality: Optional[Dict[str, Any]] = None  # violations before/after, time moved (tracemerge.clocks.causality.review)


@dataclass(frozen=True)
class AlignRequest:
    """How to align a job: ``--align``, ``--reference``, ``--offset``, ``--enforce-causality``."""

    method: str = "auto"
    reference: Optional[int] = None
    offsets: Mapping[int, int] = field(default_factory=dict)
    enforce_causality: bool = False


@dataclass(frozen=True)
class Job:
    """One job's inputs, described, joined and (when asked) aligned; see the module's doc."""

    infos: Tuple[RankInfo, ...]          # one per rank, by rank, complete (``partial`` only read by reads.heads)
    links: Correlation                   # the RPC and collective joins of ``infos``, made once
    inputs: Tuple[str, ...]              # every file given, in the order given
    skipped: Tuple[Tuple[str, str], ...] = ()   # (path, problem) of files left out by skip_bad
    warnings: Tuple[str, ...] = ()       # job-wide warnings (tracemerge.job.checks)
    alignment: Optional[Alignment] = None        # the clock model, when the job was opened with align=
    engine: Optional[Engine] = None      # runs per-rank work (tracemerge.runtime.engine); None: inline
    # {path: events} kept in memory, or by the engine's worker that read them (Held)
    traces: Mapping[str, Union[RankTrace, Held]] = field(default_factory=dict, repr=False)

    @classmethod
    @gc_paused()  # the workers' descriptions arrive as thousands of fresh acyclic records:
    # the cyclic collector only rescans them (8 ranks x 20 MB: 114 collections, 48 ms, none found)
    def open(cls, paths: Union[str, "os.PathLike[str]", Iterable[Union[str, "os.PathLike[str]"]]], rank_from: str = "auto",
             engine: Optional[Engine] = None, skip_bad: bool = False, strict: bool = False,
             cycle: Optional[int] = None, align: Optional[AlignRequest] = None,
             read: ReadStrategy = reads.events) -> "Job":
        """Read, describe, rank, check and correlate ``paths``; with ``align``, solve the clocks too.

        ``read`` is how the files are read (:mod:`tracemerge.job.reads`: ``events``, the
        default, ``columns``, ``descriptions`` or ``heads``), each command picking the one
        it needs. With an ``engine``, files are described by its workers (a local engine's
        workers may keep what they read, ``LocalEngine.hold``, for the work that follows).
        ``skip_bad`` leaves out files that cannot be read (listed in ``skipped``) instead
        of failing; ``strict`` refuses files of different jobs instead of warning.
        The cycle files of one rank (``rank{R}.cycle{N}``) are one rank made of several
        files (:mod:`tracemerge.inputs.cycles`); ``cycle`` keeps only cycle N of each.
        """
        if isinstance(paths, (str, os.PathLike)):  # one file: not the characters of its name
            paths = [paths]
        given: List[str] = [os.fspath(p) for p in paths]
        # devices, sockets, FIFOs and merged traces turned away before any reader opens them
        files, turned_away = admit(given, skip_bad)
        found = read(files, engine, skip_bad)
        infos = [info for info, _ in found.found if info is not None]
        skipped = turned_away + tuple((path, problem) for path, (_, problem) in zip(files, found.found)
                                      if problem is not None)
        if not infos:
            raise TracemergeError(f"no readable input: all {len(given)} files were skipped as bad")
        infos = _ranked(infos, rank_from, strict, cycle)
        links, warnings = _joined(infos, strict)
        taken = {part.path for i in infos for part in i.files}
        job = cls(tuple(infos), links, tuple(given), skipped, tuple(warnings), None, engine,
                  {p: t for p, t in found.kept.items() if p in taken})
        return job if align is None else job.aligned(align)

    @property
    def ranks(self) -> List[int]:
        return [rank_of(i) for i in self.infos]

    def info(self, rank: int) -> RankInfo:
        return next(i for i in self.infos if i.rank == rank)

    def align(self, method: str = "auto", reference: Optional[int] = None,
              offsets: Optional[Mapping[int, int]] = None, enforce_causality: bool = False) -> Alignment:
        """The clock model of this job under ``method`` (a pure function of the job: the
        commands ask for it once, through ``Job.open(align=...)``)."""
        reference, clocks = align_clocks(list(self.infos), method, reference, dict(offsets or {}), self.links)
        clocks, causality = review(list(self.infos), clocks, enforce_causality, self.links, reference)
        return Alignment(method=method, reference=reference, clocks=clocks, causality=causality)

    def aligned(self, request: AlignRequest) -> "Job":
        """This job with its clock model solved (``alignment``)."""
        return replace(self, alignment=self.align(request.method, request.reference, request.offsets,
                                                  request.enforce_causality))

    def clock_model(self, alignment: Optional[Alignment] = None) -> Alignment:
        """``alignment``, else the job's own (a job opened without ``align=`` has none)."""
        found = alignment or self.alignment
        if found is None:
            raise TracemergeError("the job was opened without an alignment: pass align= to Job.open")
        return found

    def trace(self, rank: int, columns_only: bool = False) -> RankTrace:
        """The events of ``rank``, from memory or read again (``columns_only``: without the
        typed reader's per-event structs and extra keys, for readers of columns and args);
        a rank a worker holds is read again here (per-rank work goes to that worker instead:
        the engine's ``map`` with :meth:`source`)."""
        return joined_trace([s if isinstance(s, RankTrace) else read_file(s.key if isinstance(s, Held) else s,
                                                                            columns_only)
                             for s in self.sources(rank)])

    def paths(self, rank: int) -> List[str]:
        """The files ``rank`` is read from: one, or its cycle files in cycle order."""
        return [part.path for part in self.info(rank).files]

    def source(self, rank: int) -> Union[RankTrace, Held, str]:
        """What a worker reads ``rank`` from: the events already in memory, else the path
        (a rank of several cycle files: their events joined, read here)."""
        if len(self.info(rank).files) > 1:
            return self.trace(rank)
        return self.sources(rank)[0]

    def sources(self, rank: int) -> List[Union[RankTrace, Held, str]]:
        """What workers read each file of ``rank`` from (:meth:`paths`): the events already
        in memory or held by a worker, else the path (the cycle files of one rank held by
        workers are read again: they are joined in one process)."""
        paths = self.paths(rank)
        found = [self.traces.get(p, p) for p in paths]
        if len(paths) > 1:
            return [p if isinstance(s, Held) else s for p, s in zip(paths, found)]
        return found


Session = Job  # the library's name for it in its first releases (README, docs/architecture.md)


def _ranked(infos: List[RankInfo], rank_from: str, strict: bool, cycle: Optional[int]) -> List[RankInfo]:
    """The ranks of the files described, each numbered, in rank order: a journal and a
    Flight Recorder dump joined with their rank's files, cycle files as one rank (only cycle
    ``cycle`` of each, when given)."""
    # a rank's journal is joined with its files before any filter, so that with --cycle N
    # it adds only what none of its cycle files holds, not the other cycles' records
    infos = prefer_rank_files(infos)  # a journal beside its rank's file adds nothing twice
    if cycle is not None:
        infos = keep_cycle(infos, cycle)
    if rank_from != "order":  # numbered in the order given, every file is a rank of its own
        infos = join_dumps(join_cycles(infos))  # a Flight Recorder dump beside its rank's files: one process
    assign_ranks(infos, rank_from, strict)
    infos.sort(key=rank_of)
    for info, agreed in zip(infos, agreed_job_ids(infos)):  # a rank that never heard its job's token
        if agreed != info.job_id:
            info.job_id, info.job = agreed, {**info.job, "job_id": agreed}
    return infos


def _joined(infos: List[RankInfo], strict: bool) -> Tuple[Correlation, List[str]]:
    """(the ranks' records joined, the job-wide warnings). Builtins sent as themselves get
    their callee side from the callee's ops first, once (paired on the callee's clock,
    jointly with the clocks across machines): like the sides a caller fetched, for every
    stage after this one."""
    pairing = pair_jointly(infos)
    for info in infos:
        if info.rank in pairing.records:
            info.remote_rpcs = info.remote_rpcs + pairing.records[info.rank]
    links = correlate(infos)
    warnings = pairing.notes + check_job(infos, strict) + check_windows(infos, links, strict) + rpc_peers(infos, links) + list(links.order_warnings)
    return links, warnings + check_links(infos, links, strict)


__all__: Sequence[str] = ("AlignRequest", "Alignment", "Job", "Session")
