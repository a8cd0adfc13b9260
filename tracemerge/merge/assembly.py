"""Output assembly: each rank is read, transformed and encoded by a worker that writes its
own part of the output; only small records travel back.

This is pass 2 over the inputs (pass 1, :mod:`tracemerge.job.describe_files`, describes each rank
for the clock model, which the parent solves between the passes): :func:`encode_rank` is
the one full read of a rank, the caller's per-rank function (transform and counts) and the
format's encoder; it returns the counts and the size written. Every rank was described
completely before (:class:`~tracemerge.job.Job`), so nothing learned here can move a
placement: the output is written once.

Local workers write each rank's body straight into the output file at its offset, taking
turns in rank order (:class:`OutputSlot`); Dask workers and stdout outputs go through
shard files that the parent concatenates (:class:`Shard`). The engines that run the
workers are in :mod:`tracemerge.runtime.engine`.
"""

import contextlib
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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

import msgspec

from tracemerge import formats, native
from tracemerge.errors import OutputError, TraceError, reading
from tracemerge.files.codecs import Codec, Stream, codec_for
from tracemerge.files.output import atomic_output
from tracemerge.formats.base import Body, Counts, Format
from tracemerge.inputs import read_trace
from tracemerge.inputs.cycles import joined_trace
from tracemerge.model import RankTrace
from tracemerge.place.placement import Placement
from tracemerge.runtime.engine import Abandoned, Engine, Held, LocalEngine, gc_paused, turns

# what a worker reads a rank from: a path, a trace in memory, or (a rank of several cycle
# files, for a format that encodes a rank whole) a tuple of those
Source = Union[str, RankTrace, Held, Tuple[Union[str, RankTrace, Held], ...]]
# (trace, place, consume=...) -> (body, counts): the caller's per-rank function
RankOutput = Callable[..., Tuple[Body, Counts]]

# ---- pass 2: transform and encode ------------------------------------------------------

def encode_rank(rank_fn: RankOutput, fmt: str, source: Source, place: Placement,
                sink: Union["Shard", "OutputSlot"], codec: Optional[Codec]) -> Dict[str, Any]:
    """Encode one rank into ``sink`` (a :class:`Shard` or an :class:`OutputSlot`); returns
    {"counts", "bytes": the encoded size, "core": which core read it, "native" or
    "python[: why the core did not]"}.

    ``source`` is a path or an already read RankTrace; ``rank_fn(trace, place, consume)``
    returns (an iterable of event lists or encoded bytes, counts), and may use up a trace
    read here (``consume``). With a ``codec`` (:mod:`tracemerge.files.codecs`) the rank is one
    gzip member or zstd frame, so the ranks concatenate into one stream.
    """
    try:
        with gc_paused(), reading(_named(source)):
            owned = not isinstance(source, RankTrace)
            if isinstance(source, tuple):  # the cycle files of one rank, encoded whole
                read = [(s, native.core_of(s)) if isinstance(s, RankTrace) else native.read_rank(_named(s))
                        for s in source]
                trace = joined_trace([t for t, _ in read])
                core = next((c for _, c in read if c != "native"), "native")
            else:
                # the compiled core reads a file it takes; the Python path the others (and the
                # traces a Session keeps in memory): the same columns, the same output bytes
                # (a Held source is the trace itself by the time a worker runs this)
                trace, core = (source, native.core_of(source)) if isinstance(source, RankTrace) else \
                    native.read_rank(_named(source))
            path = trace.path
            try:
                try:
                    events, counts = rank_fn(trace, place, consume=owned)
                except native.Declined as e:  # the source may be a trace the core read and a Session kept
                    trace, core = read_trace(path), f"python: {e}"
                    events, counts = rank_fn(trace, place, consume=owned)
                del trace
                size = sink.write(_encoded(formats.FORMATS[fmt], events, codec))
            except (msgspec.ValidationError, msgspec.DecodeError) as e:
                # raw args are decoded only where the output needs them (process metadata,
                # Perfetto's debug annotations): a number beyond a double is found here
                raise TraceError(path, f"an event's args cannot be decoded: {e}") from None
    except BaseException:
        sink.abandon()
        raise
    return {"counts": counts, "bytes": size, "core": core}


def _named(source: Source) -> str:
    """The file a source is read from, for messages (a rank's cycles: its first)."""
    if isinstance(source, tuple):
        source = source[0]
    return source if isinstance(source, str) else source.key if isinstance(source, Held) else source.path


def _encoded(form: Format, events: Body, codec: Optional[Codec]) -> List[bytes]:
    """The pieces of one rank's body: each chunk of ``events`` (an iterable of event lists,
    each encoded and dropped before the next is made, so a rank's events and its encoding
    are never in memory whole, or of bodies the compiled core wrote) or an already encoded
    body (protobuf bytes)."""
    if isinstance(events, (bytes, bytearray)):
        pieces = [bytes(events)] if events else []
    else:
        pieces = []
        for chunk in events:
            if chunk:
                piece = chunk if chunk.__class__ is bytes else form.encode(cast(list, chunk))
                pieces += [form.separator, piece] if pieces else [piece]
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

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, pieces: List[bytes]) -> int:
        with open(self.path, "wb") as f:
            f.writelines(pieces)
        return sum(map(len, pieces))

    def abandon(self) -> None:
        pass


class OutputSlot:
    """A rank's place in the output file itself: the worker writes its body at its offset
    once every rank before it has written (ranks take turns in order, so the output is the
    same bytes for any number of workers). The output is written once, with no shard to copy.

    ``owner`` is the process that opened ``fd``: a worker reopens the file through
    /proc (a pool's workers were forked before the output was opened)."""

    def __init__(self, fd: int, index: int, separator: bytes, owner: int = 0) -> None:
        self.fd, self.index, self.separator, self.owner = fd, index, separator, owner or os.getpid()

    def write(self, pieces: List[bytes]) -> int:
        shared = turns()
        with shared.cond:
            shared.cond.wait_for(lambda: shared.next.value == self.index or shared.failed.value)
            if shared.failed.value:
                raise Abandoned()
            if pieces and shared.written.value and self.separator:
                pieces = [self.separator] + pieces
            size = sum(map(len, pieces))
            with self._opened() as fd:
                _pwrite_all(fd, pieces, shared.offset.value)
            shared.offset.value += size
            shared.written.value += bool(size)
            shared.next.value += 1
            shared.cond.notify_all()
        return size

    @contextlib.contextmanager
    def _opened(self) -> Iterator[int]:
        if self.owner == os.getpid():
            yield self.fd
            return
        fd = os.open(f"/proc/{self.owner}/fd/{self.fd}", os.O_WRONLY)
        try:
            yield fd
        finally:
            os.close(fd)

    def abandon(self) -> None:
        """Release the ranks waiting behind this one: the merge has failed."""
        shared = turns()
        with shared.cond:
            shared.failed.value = 1
            shared.cond.notify_all()


def _pwrite_all(fd: int, pieces: Sequence[bytes], offset: int) -> None:
    iov_max = os.sysconf("SC_IOV_MAX")
    views = [memoryview(p) for p in pieces if p]
    while views:
        done = os.pwritev(fd, views[:iov_max], offset)
        offset += done
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if done:
            views[0] = views[0][done:]


def write_merged(engine: Engine, rank_fns: Sequence[RankOutput], fmt: str, jobs: Sequence[Tuple[Source, Placement]],
                 output: str, header: Dict[str, Any], footer: Callable[[List[Dict[str, Any]]], Dict[str, Any]],
                 force: bool = True) -> Dict[str, Any]:
    """Run ``encode_rank`` for every (source, placement) of ``jobs`` with its ``rank_fns``
    (one each, in order: each carries what its rank needs) on ``engine`` and write
    the assembled document to the atomic ``output``; ``footer(results)`` makes the closing
    summary from the per-rank results. Returns the summary. Without ``force`` an output that another run wrote meanwhile is not replaced."""
    form = formats.FORMATS[fmt]
    codec = codec_for(output)
    n = len(jobs)
    common: List[List[Any]] = [list(rank_fns), [fmt] * n, [s for s, _ in jobs], [p for _, p in jobs]]
    with atomic_output_pieces(output, codec, force) as out:
        # the output's temporary file, written at offsets (stdout may be a pipe, or append-only)
        if isinstance(engine, LocalEngine) and output != "-":
            out.write(form.open(header))
            out.raw.flush()
            shared = turns().reset(out.raw.tell())
            separator = out.made(form.separator) if form.separator else b""
            sinks = [OutputSlot(out.raw.fileno(), k, separator) for k in range(n)]
            results = engine.map(encode_rank, *common, sinks, [codec] * n)
            out.raw.seek(shared.offset.value)
            summary = footer(results)
        else:
            with shard_dir(output) as tmp:
                shards = [Shard(os.path.join(tmp, f"shard{k:06d}")) for k in range(n)]
                results = engine.map(encode_rank, *common, shards, [codec] * n)
                summary = footer(results)
                out.write(form.open(header))
                first = True
                for sink, r in zip(shards, results):
                    if r["bytes"]:
                        if not first and form.separator:
                            out.write(form.separator)
                        out.copy(sink.path)
                        first = False
        out.write(form.close(summary))
    return summary


class _Pieces:
    """The output stream: parent-made pieces are compressed as members or frames of their
    own when the output is compressed; shard files (already compressed) are copied as they are."""

    def __init__(self, raw: Stream, codec: Optional[Codec]) -> None:
        self.raw, self.codec = raw, codec

    def made(self, data: bytes) -> bytes:
        """``data`` as the parent writes it: a member or frame of its own when compressed."""
        return self.codec.compress(data) if self.codec else data

    def write(self, data: bytes) -> None:
        self.raw.write(self.made(data))

    def copy(self, path: str) -> None:
        with open(path, "rb") as f:
            done = 0
            try:
                # in the core: the shard's bytes make no trip through this process
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
def atomic_output_pieces(output: str, codec: Optional[Codec], force: bool = True) -> Iterator[_Pieces]:
    with atomic_output(output, compress=False, force=force) as raw:
        yield _Pieces(raw, codec)


@contextlib.contextmanager
def shard_dir(output: str) -> Iterator[str]:
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
