"""A Session: the input files of one job, their ranks and clocks, handed to writers and reports.

Loading reads each file once to learn its rank, anchors and RPC/collective records
(:class:`~tracemerge.inputs.rankinfo.RankInfo`); the events are kept only while the inputs are
small and are otherwise re-read rank by rank when a writer asks, so memory stays bounded
by the largest rank, not the job.
"""

import os
from dataclasses import dataclass

from tracemerge.clocks.methods import align
from tracemerge.clocks.causality import review
from tracemerge.inputs.jobchecks import check_job, rpc_peers
from tracemerge.inputs.scan import scan, scan_head
from tracemerge.merge.executors import LocalEngine
from tracemerge.errors import TraceError, TracemergeError
from tracemerge.inputs.rankinfo import EVENT_FACTS, assign_ranks, describe, learn
from tracemerge.inputs.chrome import read_trace

KEEP_IN_MEMORY_BYTES = 64 << 20  # on-disk input size below which events stay loaded


@dataclass
class Alignment:
    method: str          # what was asked for
    reference: int
    clocks: dict         # {rank: ClockModel}
    causality: dict = None  # violations before/after, time moved (tracemerge.clocks.causality.review)


class Session:
    def __init__(self, infos, traces, engine=None, inputs=None, skipped=(), warnings=()):
        self.infos = sorted(infos, key=lambda i: i.rank)
        self._traces = traces  # {rank: RankTrace} kept in memory
        self.engine = engine   # runs per-rank work (tracemerge.merge.executors); None: inline
        self.inputs = list(inputs) if inputs is not None else [i.path for i in self.infos]  # every file given
        self.skipped = list(skipped)    # [(path, problem)] of files left out by skip_bad
        self.warnings = list(warnings)  # job-wide warnings (tracemerge.inputs.jobchecks)

    @classmethod
    def open(cls, paths, rank_from="auto", engine=None, skip_bad=False, strict=False, head=False):
        """With an ``engine``, files are described by its workers and events are never kept.

        ``skip_bad`` leaves out files that cannot be read (listed in ``skipped``) instead
        of failing; ``strict`` refuses files of different jobs instead of warning.
        ``head``: rank files are described from their heads alone (``RankInfo.partial``),
        for a caller that reads the events later anyway (combine); not with ``skip_bad``,
        which must have found every bad event before the merge starts.
        """
        paths = [os.fspath(p) for p in paths]
        keep = engine is None and sum(_size(p) for p in paths) <= KEEP_IN_MEMORY_BYTES
        if not keep:
            # events will be read again when needed: a head, else a light scan describes each file
            runner = engine or LocalEngine(1)
            heads = runner.map_light(scan_head, paths) if head and not skip_bad else [None] * len(paths)
            rest = [p for p, info in zip(paths, heads) if info is None]
            scanned = iter(runner.map(_attempt, [scan] * len(rest), rest, [skip_bad] * len(rest)))
            found = [(info, None) if info is not None else next(scanned) for info in heads]
            kept = {}
        else:
            found, kept = [], {}
            for path in paths:
                trace, problem = _attempt(read_trace, path, skip_bad)
                found.append((None if trace is None else describe(trace), problem))
                if trace is not None:
                    kept[path] = trace
        infos = [info for info, _ in found if info is not None]
        skipped = [(path, problem) for path, (_, problem) in zip(paths, found) if problem is not None]
        if not infos:
            raise TracemergeError(f"no readable input: all {len(paths)} files were skipped as bad")
        assign_ranks(infos, rank_from)
        warnings = check_job(infos, strict) + rpc_peers(infos)
        return cls(infos, {i.rank: kept[i.path] for i in infos if i.path in kept}, engine, paths, skipped, warnings)

    @property
    def ranks(self):
        return [i.rank for i in self.infos]

    def info(self, rank):
        return next(i for i in self.infos if i.rank == rank)

    def trace(self, rank):
        """The events of ``rank``, from memory or read again."""
        trace = self._traces.get(rank)
        return trace if trace is not None else read_trace(self.info(rank).path)

    def source(self, rank):
        """What a worker reads ``rank`` from: the events already in memory, else the path."""
        trace = self._traces.get(rank)
        return trace if trace is not None else self.info(rank).path

    def complete(self, ranks):
        """Read the events of the partial infos of ``ranks`` for what only events tell."""
        todo = [i for i in self.infos if i.partial and i.rank in ranks]
        if todo:
            for info, full in zip(todo, (self.engine or LocalEngine(1)).map(scan, [i.path for i in todo])):
                learn(info, {key: getattr(full, key) for key in EVENT_FACTS})

    def align(self, method="auto", reference=None, offsets=None, enforce_causality=False):
        reference, clocks = align(self.infos, method, reference, offsets)
        clocks, causality = review(self.infos, clocks, enforce_causality)
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
