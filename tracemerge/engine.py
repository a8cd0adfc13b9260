"""Parallel per-rank execution: each rank is read, described, transformed and encoded by a
worker that writes its own shard file; only small records travel back.

Two passes over the inputs:

1. :func:`scan` — the typed reader without the extra keys (and without ``args`` when the
   rank file's block lists its collectives), returning a :class:`RankInfo`. Anything the typed reader does not accept
   goes through the full reader, so errors, salvage and warnings are the reader's own.
2. :func:`encode_rank` — the full read, the caller's per-rank function (transform and
   counts) and the format's encoder, written to a shard file beside the output; returns
   the counts and the shard's size.

The parent solves the clock model from the RankInfos between the passes and concatenates
the shards into the atomic output. Engines only have to map a top-level function over
argument lists: :class:`LocalEngine` (processes on this machine, or inline with one job)
and :class:`DaskEngine` (a Dask cluster; a LocalCluster when no scheduler is given).
"""

import contextlib
import gc
import io
import multiprocessing
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool


from tracemerge import chrome
from tracemerge.compress import codec_for, writer
from tracemerge.errors import OutputError, TracemergeError
from tracemerge.model import RankTrace
from tracemerge.output import atomic_output
from tracemerge.rankinfo import describe
from tracemerge.read import read_data, read_trace, read_typed

class Format:
    """How one output format is cut into independently encoded pieces.

    ``encode(events) -> bytes`` runs in the workers, once per rank; ``open(header)``,
    ``separator`` (between non-empty shards) and ``close(footer)`` are written by the parent.
    """

    def __init__(self, encode, open, separator, close):
        self.encode, self.open, self.separator, self.close = encode, open, separator, close


FORMATS = {"chrome": Format(chrome.encode_events, chrome.open_document, chrome.SEPARATOR, chrome.close_document)}


# ---- pass 1: describe ------------------------------------------------------------------

def scan(path):
    """The :class:`RankInfo` of ``path``, equal to ``describe(read_trace(path))``: the typed
    reader without the keys describe() does not use (flow ids, scopes); a file it does not
    take goes through the full reader, which explains or salvages it."""
    with _gc_paused():
        path = os.fspath(path)
        data, cut = read_data(path)
        trace = None if cut else read_typed(path, data, extra=False, describing=True)
        del data
        return describe(trace if trace is not None else read_trace(path))


# ---- pass 2: transform and encode ------------------------------------------------------

def encode_rank(rank_fn, fmt, source, place, shard_path, output):
    """Write one rank's shard to ``shard_path``; its counts plus ``bytes`` (the shard's size).

    ``source`` is a path or an already read RankTrace; ``rank_fn(trace, place)`` returns
    (an iterable of event lists or encoded bytes, counts); the shard is a gzip member or a
    zstd frame when ``output``'s name asks for compression, so shards concatenate into one
    stream.
    """
    with _gc_paused():
        trace = source if isinstance(source, RankTrace) else read_trace(source)
        events, counts = rank_fn(trace, place)
        del trace
        with open(shard_path, "wb") as f, writer(codec_for(output), f) as out:
            written = _write_chunked(FORMATS[fmt], events, out)
    return {**counts, "bytes": os.path.getsize(shard_path) if written else 0}


def _write_chunked(form, events, out):
    """Write ``events`` — an iterable of event lists, each encoded, written and dropped
    before the next is made, so a rank's events and its encoding are never in memory
    whole; or an already encoded body (protobuf bytes). Whether anything was written."""
    if isinstance(events, (bytes, bytearray)):
        out.write(events)
        return bool(events)
    sep, written = b"", False
    for chunk in events:
        if chunk:
            out.write(sep + form.encode(chunk))
            sep, written = form.separator, True
        del chunk
    return written


def write_sharded(engine, rank_fn, fmt, jobs, output, header, footer, counts):
    """Run ``encode_rank`` for every (source, placement) of ``jobs`` on ``engine`` and write
    the assembled document to the atomic ``output``; per-rank counts are added to ``counts``
    before ``footer()`` is called."""
    form = FORMATS[fmt]
    with shard_dir(output) as tmp:
        shards = [os.path.join(tmp, f"shard{n:06d}") for n in range(len(jobs))]
        results = engine.map(encode_rank, [rank_fn] * len(jobs), [fmt] * len(jobs),
                             [s for s, _ in jobs], [p for _, p in jobs], shards, [output] * len(jobs))
        for r in results:
            for k, v in r.items():
                if k != "bytes":
                    counts[k] = counts.get(k, 0) + v
        with atomic_output_pieces(output) as out:
            out.write(form.open(header))
            first = True
            for shard, r in zip(shards, results):
                if not r["bytes"]:
                    continue
                if not first and form.separator:
                    out.write(form.separator)
                out.copy(shard)
                first = False
            out.write(form.close(footer()))


class _Pieces:
    """The output stream: parent-made pieces are compressed as members or frames of their
    own when the output is compressed; shard files (already compressed) are copied as they are."""

    def __init__(self, raw, codec):
        self.raw, self.codec = raw, codec

    def write(self, data):
        self.raw.write(self.codec.compress(data) if self.codec else data)

    def copy(self, path):
        with open(path, "rb") as f:
            done = 0
            try:
                # in the kernel: the shard's bytes make no trip through this process
                self.raw.flush()
                out, size = self.raw.fileno(), os.fstat(f.fileno()).st_size
                while done < size:
                    sent = os.sendfile(out, f.fileno(), done, size - done)
                    if not sent:
                        break
                    done += sent
            except (AttributeError, OSError, io.UnsupportedOperation):
                pass  # not a descriptor pair sendfile takes: copy the rest here
            f.seek(done)
            shutil.copyfileobj(f, self.raw, 8 << 20)


@contextlib.contextmanager
def atomic_output_pieces(output):
    with atomic_output(output, compress=False) as raw:
        yield _Pieces(raw, codec_for(output))


@contextlib.contextmanager
def shard_dir(output):
    """A temporary directory beside ``output`` (same filesystem, so no copy across disks)."""
    where = None if output == "-" else os.path.dirname(os.path.abspath(output))
    try:
        tmp = tempfile.mkdtemp(prefix=".tracemerge-shards-", dir=where)
    except OSError as e:
        raise OutputError(f"{output}: cannot write shards beside it: {e.strerror or e}") from None
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _gc_paused():
    """Trace documents are trees of fresh dicts without cycles: the cyclic collector would
    only rescan them (up to 2.8× the parse time), reference counting frees them anyway."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---- engines ---------------------------------------------------------------------------

class WorkerDied(TracemergeError):
    """A worker process ended without a result (the OOM killer, a signal)."""


class LocalEngine:
    """Per-rank tasks in up to ``jobs`` processes on this machine (inline with one job)."""

    def __init__(self, jobs=None):
        self.jobs = max(1, jobs or os.cpu_count() or 1)

    def map(self, fn, *columns):
        calls = list(zip(*columns))
        if self.jobs == 1 or len(calls) <= 1:
            return [fn(*c) for c in calls]
        # fork: workers start in milliseconds and share the parent's imports
        ctx = multiprocessing.get_context("fork")
        try:
            with ProcessPoolExecutor(min(self.jobs, len(calls)), mp_context=ctx) as pool:
                return list(pool.map(fn, *columns))
        except BrokenProcessPool:
            raise WorkerDied(f"a worker process died (killed, or out of memory) with --jobs {self.jobs}; "
                             "each needs ~5x its largest rank's JSON size: try fewer --jobs") from None

    def close(self):
        pass


class DaskEngine:
    """Per-rank tasks on a Dask cluster: ``scheduler`` is its address (``tcp://HOST:PORT``);
    without one, a LocalCluster of ``jobs`` single-threaded worker processes on loopback.

    Workers read the inputs and write the shards by path, so on a real cluster inputs and
    output must be on a filesystem every worker and the client share.
    """

    def __init__(self, scheduler=None, jobs=None):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise TracemergeError("--engine dask needs dask.distributed: pip install 'tracemerge[dask]'") from None
        from distributed.scheduler import KilledWorker
        self._killed = KilledWorker
        self.cluster = None
        try:
            if scheduler:
                self.client = Client(scheduler, timeout="30s")
            else:
                self.cluster = LocalCluster(n_workers=max(1, jobs or os.cpu_count() or 1), threads_per_worker=1,
                                            processes=True, host="127.0.0.1", dashboard_address=None)
                self.client = Client(self.cluster)
        except OSError as e:
            self.close()
            where = f"--scheduler {scheduler}: cannot connect" if scheduler else "cannot start a Dask LocalCluster"
            raise TracemergeError(f"{where}: {e}") from None

    def map(self, fn, *columns):
        # an argument shared by every call (the per-rank function with its RPC plan) is
        # sent to the workers once, not pickled into each of the ranks' tasks
        columns = [[self.client.scatter(c[0], broadcast=True, hash=False)] * len(c)
                   if len(c) > 1 and all(x is c[0] for x in c) and not isinstance(c[0], (str, int)) else c
                   for c in map(list, columns)]
        futures = self.client.map(fn, *columns, pure=False)
        try:
            return self.client.gather(futures)
        except self._killed as e:
            raise WorkerDied(f"a Dask worker died running a rank (killed, or out of memory): {e}") from None

    def close(self):
        for thing in (getattr(self, "client", None), self.cluster):
            if thing is not None:
                thing.close()


def make_engine(engine="local", jobs=None, scheduler=None):
    if engine == "local":
        if scheduler:
            raise TracemergeError("--scheduler needs --engine dask")
        return LocalEngine(jobs)
    if engine == "dask":
        return DaskEngine(scheduler, jobs)
    raise TracemergeError(f"unknown engine {engine!r} (choose from local, dask)")
