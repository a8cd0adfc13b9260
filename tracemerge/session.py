"""A Session: the input files of one job, their ranks and clocks, handed to writers and reports.

Loading reads each file once to learn its rank, anchors and RPC/collective records
(:class:`~tracemerge.inputs.rankinfo.RankInfo`); the events are kept only while the inputs are
small and are otherwise re-read rank by rank when a writer asks, so memory stays bounded
by the largest rank, not the job.
"""

import functools
import os
from dataclasses import dataclass
from typing import Any, Collection, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from tracemerge.clocks.causality import review
from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.correlate import RpcMemo
from tracemerge.clocks.methods import align
from tracemerge.errors import TraceError, TracemergeError
from tracemerge.inputs.cycles import join_cycles, joined_trace, keep_cycle, refresh
from tracemerge.inputs.jobchecks import check_job, check_windows, rpc_peers
from tracemerge.inputs.rankinfo import EVENT_FACTS, RankInfo, assign_ranks, describe, learn
from tracemerge.inputs.scan import scan, scan_head
from tracemerge.merge.executors import LocalEngine
from tracemerge.model import RankTrace
from tracemerge.native import read_file

KEEP_IN_MEMORY_BYTES = 64 << 20  # on-disk input size below which events stay loaded


@dataclass
class Alignment:
    method: str                          # what was asked for
    reference: int
    clocks: Dict[int, ClockModel]        # {rank: ClockModel}
    causality: Optional[Dict[str, Any]] = None  # violations before/after, time moved (tracemerge.clocks.causality.review)


class Session:
    def __init__(self, infos: List[RankInfo], traces: Dict[str, RankTrace], engine: Any = None,
                 inputs: Optional[Sequence[str]] = None, skipped: Iterable[Tuple[str, str]] = (),
                 warnings: Iterable[str] = (), rpc_memo: Optional[RpcMemo] = None) -> None:
        self.infos = sorted(infos, key=_rank)
        self._traces = traces  # {path: RankTrace} kept in memory
        self.engine = engine   # runs per-rank work (tracemerge.merge.executors); None: inline
        self.inputs = list(inputs) if inputs is not None else [i.path for i in self.infos]  # every file given
        self.skipped = list(skipped)    # [(path, problem)] of files left out by skip_bad
        self.warnings = list(warnings)  # job-wide warnings (tracemerge.inputs.jobchecks)
        self.rpc_memo = rpc_memo or RpcMemo()  # the RPC join of these infos, made once
        # [(path, core)] of the last combine: which core read each rank (tracemerge.native)
        self.cores: List[Tuple[str, str]] = []

    @classmethod
    def open(cls, paths: Iterable[Union[str, "os.PathLike[str]"]], rank_from: str = "auto", engine: Any = None,
             skip_bad: bool = False, strict: bool = False, head: bool = False,
             columns_only: bool = False, cycle: Optional[int] = None) -> "Session":
        """With an ``engine``, files are described by its workers and events are never kept.

        ``skip_bad`` leaves out files that cannot be read (listed in ``skipped``) instead
        of failing; ``strict`` refuses files of different jobs instead of warning.
        ``head``: rank files are described from their heads alone (``RankInfo.partial``),
        for a caller that reads the events later anyway (combine); not with ``skip_bad``,
        which must have found every bad event before the merge starts.
        ``columns_only``: events kept in memory are columns and args only, without the
        typed reader's per-event structs (for reports: not for a merge, whose JSON writer
        encodes those structs).
        The cycle files of one rank (``rank{R}.cycle{N}``) are one rank made of several
        files (:mod:`tracemerge.inputs.cycles`); ``cycle`` keeps only cycle N of each.
        """
        files: List[str] = [os.fspath(p) for p in paths]
        keep = engine is None and sum(_size(p) for p in files) <= KEEP_IN_MEMORY_BYTES
        if not keep:
            # events will be read again when needed: a head, else a light scan describes each file
            runner = engine or LocalEngine(1)
            heads = runner.map_light(scan_head, files) if head and not skip_bad else [None] * len(files)
            rest = [p for p, info in zip(files, heads) if info is None]
            scanned = iter(runner.map(_attempt, [scan] * len(rest), rest, [skip_bad] * len(rest)))
            found = [(info, None) if info is not None else next(scanned) for info in heads]
            kept: Dict[str, RankTrace] = {}
        else:
            found, kept = [], {}
            for path in files:
                trace, problem = _attempt(functools.partial(read_file, columns_only=columns_only), path, skip_bad)
                found.append((None if trace is None else describe(trace), problem))
                if trace is not None:
                    kept[path] = trace
        infos = [info for info, _ in found if info is not None]
        skipped = [(path, problem) for path, (_, problem) in zip(files, found) if problem is not None]
        if not infos:
            raise TracemergeError(f"no readable input: all {len(files)} files were skipped as bad")
        if cycle is not None:
            infos = keep_cycle(infos, cycle)
        if rank_from != "order":  # numbered in the order given, every file is a rank of its own
            infos = join_cycles(infos)
        assign_ranks(infos, rank_from)
        memo = RpcMemo()
        warnings = check_job(infos, strict) + check_windows(infos, memo, strict) + rpc_peers(infos, memo)
        taken = {part.path for i in infos for part in i.files}
        return cls(infos, {p: t for p, t in kept.items() if p in taken}, engine, files, skipped, warnings, memo)

    @property
    def ranks(self) -> List[int]:
        return [_rank(i) for i in self.infos]

    def info(self, rank: int) -> RankInfo:
        return next(i for i in self.infos if i.rank == rank)

    def trace(self, rank: int, columns_only: bool = False) -> RankTrace:
        """The events of ``rank``, from memory or read again (``columns_only``: without the
        typed reader's per-event structs and extra keys, for readers of columns and args)."""
        return joined_trace([read_file(s, columns_only) if isinstance(s, str) else s for s in self.sources(rank)])

    def paths(self, rank: int) -> List[str]:
        """The files ``rank`` is read from: one, or its cycle files in cycle order."""
        return [part.path for part in self.info(rank).files]

    def source(self, rank: int) -> Union[RankTrace, str]:
        """What a worker reads ``rank`` from: the events already in memory, else the path
        (a rank of several cycle files: their events joined, read here)."""
        if len(self.info(rank).files) > 1:
            return self.trace(rank)
        return self.sources(rank)[0]

    def sources(self, rank: int) -> List[Union[RankTrace, str]]:
        """What workers read each file of ``rank`` from (:meth:`paths`): the events already
        in memory, else the path."""
        return [self._traces.get(p, p) for p in self.paths(rank)]

    def complete(self, ranks: Collection[Optional[int]]) -> None:
        """Read the events of the partial infos of ``ranks`` for what only events tell."""
        whole = [i for i in self.infos if i.partial and i.rank in ranks]
        todo = [part for i in whole for part in i.files if part.partial]
        if todo:
            for info, full in zip(todo, (self.engine or LocalEngine(1)).map(scan, [i.path for i in todo])):
                learn(info, {key: getattr(full, key) for key in EVENT_FACTS})
        for info in whole:
            if info.parts:
                refresh(info)

    def align(self, method: str = "auto", reference: Optional[int] = None,
              offsets: Optional[Dict[int, int]] = None, enforce_causality: bool = False) -> Alignment:
        reference, clocks = align(self.infos, method, reference, offsets, self.rpc_memo)
        clocks, causality = review(self.infos, clocks, enforce_causality, self.rpc_memo)
        return Alignment(method=method, reference=reference, clocks=clocks, causality=causality)


def _attempt(read, path, skip_bad):
    """(read(path), None); with ``skip_bad``, (None, problem) when the file is bad."""
    try:
        return read(path), None
    except TraceError as e:
        if not skip_bad:
            raise
        return None, e.problem if e.index is None else f"event {e.index}: {e.problem}"


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _rank(info: RankInfo) -> int:
    """A described file's rank (assigned by Session.open)."""
    assert info.rank is not None
    return info.rank
