"""A Session: the input files of one job, their ranks and clocks, handed to writers and reports.

Loading reads each file once to learn its rank, anchors and RPC/collective records
(:class:`~tracemerge.rankinfo.RankInfo`); the events are kept only while the inputs are
small and are otherwise re-read rank by rank when a writer asks, so memory stays bounded
by the largest rank, not the job.
"""

import os
from dataclasses import dataclass

from tracemerge.align import align
from tracemerge.engine import scan
from tracemerge.rankinfo import assign_ranks, describe
from tracemerge.read import read_trace

KEEP_IN_MEMORY_BYTES = 64 << 20  # on-disk input size below which events stay loaded


@dataclass
class Alignment:
    method: str          # what was asked for
    reference: int
    clocks: dict         # {rank: ClockModel}


class Session:
    def __init__(self, infos, traces, engine=None):
        self.infos = sorted(infos, key=lambda i: i.rank)
        self._traces = traces  # {rank: RankTrace} kept in memory
        self.engine = engine   # runs per-rank work (tracemerge.engine); None: inline

    @classmethod
    def open(cls, paths, rank_from="auto", engine=None):
        """With an ``engine``, files are described by its workers and events are never kept."""
        paths = [os.fspath(p) for p in paths]
        if engine is not None:
            infos = engine.map(scan, paths)
            assign_ranks(infos, rank_from)
            return cls(infos, {}, engine)
        keep = sum(_size(p) for p in paths) <= KEEP_IN_MEMORY_BYTES
        infos, traces = [], []
        for path in paths:
            trace = read_trace(path)
            infos.append(describe(trace))
            traces.append(trace if keep else None)
        assign_ranks(infos, rank_from)
        return cls(infos, {i.rank: t for i, t in zip(infos, traces) if t is not None})

    @property
    def ranks(self):
        return [i.rank for i in self.infos]

    @property
    def paths(self):
        return [i.path for i in self.infos]

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

    def align(self, method="wall", reference=None, offsets=None):
        reference, clocks = align(self.infos, method, reference, offsets)
        return Alignment(method=method, reference=reference, clocks=clocks)


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
