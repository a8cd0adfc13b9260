"""Parallel per-rank execution: each rank is read, transformed and encoded by a worker that
writes its own part of the output; only small records travel back.

Two passes over the inputs:

1. :func:`scan_head` / :func:`scan` — what the clock model needs of a rank (a
   :class:`RankInfo`): a rank file's head alone when it carries its block, else the typed
   reader without the extra keys. Anything the typed reader does not accept goes through
   the full reader, so errors, salvage and warnings are the reader's own.
2. :func:`encode_rank` — the one full read of a rank, the caller's per-rank function
   (transform and counts) and the format's encoder; returns the counts, the size written
   and, for a rank described from its head, the facts only its events tell.

The parent solves the clock model from the RankInfos between the passes. Local workers
write each rank's body straight into the output file at its offset, taking turns in rank
order (:class:`OutputSlot`); Dask workers and stdout outputs go through shard files that
the parent concatenates (:class:`Shard`). Engines only have to map a top-level function
over argument lists: :class:`LocalEngine` (processes on this machine, or inline with one
job) and :class:`DaskEngine` (a Dask cluster; a LocalCluster when no scheduler is given).
"""

import contextlib
import gc
import io
import multiprocessing
# imported now, not on the first RawValue: this module builds its properties with exec(),
# and a Ctrl-C that lands inside an exec() makes CPython 3.11 end the process by SIGINT
# even after tracemerge has caught the KeyboardInterrupt (exit -2 instead of 130)
import multiprocessing.sharedctypes  # noqa: F401
import multiprocessing.synchronize  # noqa: F401
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool


from tracemerge.formats import chrome
from tracemerge.codecs import codec_for
from tracemerge.errors import OutputError, TracemergeError
from tracemerge.model import RankTrace
from tracemerge.output import atomic_output
from tracemerge.inputs.head import read_head
from tracemerge.inputs.rankinfo import describe, describe_head, event_facts
from tracemerge.inputs.chrome import read_data, read_trace, read_typed

class Format:
    """How one output format is cut into independently encoded pieces.

    ``encode(events) -> bytes`` runs in the workers, once per rank; ``open(header)``,
    ``separator`` (between non-empty shards) and ``close(footer)`` are written by the parent.
    """

    def __init__(self, encode, open, separator, close):
        self.encode, self.open, self.separator, self.close = encode, open, separator, close


FORMATS = {"chrome": Format(chrome.encode_events, chrome.open_document, chrome.SEPARATOR, chrome.close_document)}


# ---- pass 1: describe ------------------------------------------------------------------

def scan_head(path):
    """The partial :class:`RankInfo` of a rank file whose head carries its block
    (:func:`rankinfo.describe_head`), without decoding its events; None for other files."""
    path = os.fspath(path)
    found = read_head(path)
    return describe_head(path, found) if found is not None else None


def scan(path):
    """The :class:`RankInfo` of ``path``, equal to ``describe(read_trace(path))``: the typed
    reader without the keys describe() does not use (flow ids, scopes); a file it does not
    take goes through the full reader, which explains or salvages it."""
    path = os.fspath(path)
    with _gc_paused():
        data, cut = read_data(path)
        trace = None if cut else read_typed(path, data, extra=False, describing=True)
        del data
        return describe(trace if trace is not None else read_trace(path))


# ---- pass 2: transform and encode ------------------------------------------------------

def encode_rank(rank_fn, fmt, source, place, sink, codec, facts=False):
    """Encode one rank into ``sink`` (a :class:`Shard` or an :class:`OutputSlot`); returns
    {"counts", "bytes": the encoded size, "facts": the rank's event facts when asked}.

    ``source`` is a path or an already read RankTrace; ``rank_fn(trace, place, consume)``
    returns (an iterable of event lists or encoded bytes, counts), and may use up a trace
    read here (``consume``). With a ``codec`` (:mod:`tracemerge.codecs`) the rank is one
    gzip member or zstd frame, so the ranks concatenate into one stream.
    """
    try:
        with _gc_paused():
            owned = not isinstance(source, RankTrace)
            trace = read_trace(source) if owned else source
            known = event_facts(trace) if facts else None
            events, counts = rank_fn(trace, place, consume=owned)
            del trace
            size = sink.write(_encoded(FORMATS[fmt], events, codec))
    except BaseException:
        sink.abandon()
        raise
    return {"counts": counts, "bytes": size, "facts": known}


def _encoded(form, events, codec):
    """The pieces of one rank's body: each chunk of ``events`` (an iterable of event lists,
    each encoded and dropped before the next is made, so a rank's events and its encoding
    are never in memory whole) or an already encoded body (protobuf bytes)."""
    if isinstance(events, (bytes, bytearray)):
        pieces = [bytes(events)] if events else []
    else:
        pieces = []
        for chunk in events:
            if chunk:
                pieces += [form.separator, form.encode(chunk)] if pieces else [form.encode(chunk)]
            del chunk
    if codec and pieces:
        member = io.BytesIO()
        with codec.writer(member) as out:
            for piece in pieces:  # zstandard's writer has no writelines
                out.write(piece)
        pieces = [member.getvalue()]
    return pieces


class Shard:
    """A rank's body in a file of its own, copied into the output by the parent (engines
    whose workers cannot write into the output: other machines, stdout)."""

    def __init__(self, path):
        self.path = path

    def write(self, pieces):
        with open(self.path, "wb") as f:
            f.writelines(pieces)
        return sum(map(len, pieces))

    def abandon(self):
        pass


class OutputSlot:
    """A rank's place in the output file itself: the worker writes its body at its offset
    once every rank before it has written (ranks take turns in order, so the output is the
    same bytes for any number of workers). The output is written once, with no shard to copy."""

    def __init__(self, fd, index, separator):
        self.fd, self.index, self.separator = fd, index, separator

    def write(self, pieces):
        turns = _TURNS
        with turns.cond:
            turns.cond.wait_for(lambda: turns.next.value == self.index or turns.failed.value)
            if turns.failed.value:
                raise Abandoned()
            if pieces and turns.written.value and self.separator:
                pieces = [self.separator] + pieces
            size = sum(map(len, pieces))
            _pwrite_all(self.fd, pieces, turns.offset.value)
            turns.offset.value += size
            turns.written.value += bool(size)
            turns.next.value += 1
            turns.cond.notify_all()
        return size

    def abandon(self):
        """Release the ranks waiting behind this one: the merge has failed."""
        turns = _TURNS
        with turns.cond:
            turns.failed.value = 1
            turns.cond.notify_all()


class Abandoned(Exception):
    """An earlier rank failed: this rank's body is not written (the earlier error is reported)."""


class _Turns:
    """Which rank writes next and where; shared with forked workers by inheritance."""

    def __init__(self, offset):
        ctx = multiprocessing.get_context("fork")
        self.cond = ctx.Condition()
        self.next, self.offset = ctx.RawValue("q", 0), ctx.RawValue("q", offset)
        self.written, self.failed = ctx.RawValue("q", 0), ctx.RawValue("q", 0)


_TURNS = None


def _pwrite_all(fd, pieces, offset):
    iov_max = os.sysconf("SC_IOV_MAX")
    views = [memoryview(p) for p in pieces if p]
    while views:
        done = os.pwritev(fd, views[:iov_max], offset)
        offset += done
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if done:
            views[0] = views[0][done:]


def write_merged(engine, rank_fn, fmt, jobs, output, header, footer, facts=False):
    """Run ``encode_rank`` for every (source, placement) of ``jobs`` on ``engine`` and write
    the assembled document to the atomic ``output``; ``footer(results)`` makes the closing
    summary from the per-rank results (and may raise to abandon the output). Returns the
    summary."""
    global _TURNS
    form = FORMATS[fmt]
    codec = codec_for(output)
    n = len(jobs)
    common = [[rank_fn] * n, [fmt] * n, [s for s, _ in jobs], [p for _, p in jobs]]
    with atomic_output_pieces(output, codec) as out:
        out.write(form.open(header))
        # the output's temporary file, written at offsets (stdout may be a pipe, or append-only)
        if isinstance(engine, LocalEngine) and output != "-":
            out.raw.flush()
            _TURNS = _Turns(out.raw.tell())
            try:
                separator = out.made(form.separator) if form.separator else b""
                sinks = [OutputSlot(out.raw.fileno(), k, separator) for k in range(n)]
                results = engine.map(encode_rank, *common, sinks, [codec] * n, [facts] * n)
                out.raw.seek(_TURNS.offset.value)
            finally:
                _TURNS = None
        else:
            with shard_dir(output) as tmp:
                sinks = [Shard(os.path.join(tmp, f"shard{k:06d}")) for k in range(n)]
                results = engine.map(encode_rank, *common, sinks, [codec] * n, [facts] * n)
                first = True
                for sink, r in zip(sinks, results):
                    if r["bytes"]:
                        if not first and form.separator:
                            out.write(form.separator)
                        out.copy(sink.path)
                        first = False
        summary = footer(results)
        out.write(form.close(summary))
    return summary


class _Pieces:
    """The output stream: parent-made pieces are compressed as members or frames of their
    own when the output is compressed; shard files (already compressed) are copied as they are."""

    def __init__(self, raw, codec):
        self.raw, self.codec = raw, codec

    def made(self, data):
        """``data`` as the parent writes it: a member or frame of its own when compressed."""
        return self.codec.compress(data) if self.codec else data

    def write(self, data):
        self.raw.write(self.made(data))

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
def atomic_output_pieces(output, codec):
    with atomic_output(output, compress=False) as raw:
        yield _Pieces(raw, codec)


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

    def map_light(self, fn, *columns):
        """``map`` for calls cheaper than sending their results between processes."""
        return list(map(fn, *columns))

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

    def map_light(self, fn, *columns):
        return self.map(fn, *columns)  # the files are on the workers' side of the network

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
