"""Compressed traces: gzip and zstd, the one place that knows codecs.

Outputs are compressed by their name (``.gz``, ``.zst``), inputs are recognised by their
magic bytes whatever their name. Both formats define a stream as complete pieces one after
another (gzip members, zstd frames), so pieces compressed apart — each worker's shard, the
parent's header and footer — are joined by copying their bytes.
"""

import contextlib
import gzip
import os
import zlib
from typing import Any, BinaryIO, Callable, ContextManager, Iterator, Optional, Union

from tracemerge.errors import OutputError, TraceError, UsageError

# a writable binary stream: a file, a gzip.GzipFile, zstandard's stream writer
Stream = Any

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
INSTALL_ZSTD = "pip install 'tracemerge[zstd]'"


class Gzip:
    """gzip members at level 1, without a name or time in the header, so equal input gives
    equal bytes."""

    name = "gzip"
    level = 1  # gzip-1 costs ~1/3 of gzip-6 for ~3/4 of its ratio on trace JSON

    def compress(self, data: bytes) -> bytes:
        """``data`` as one complete member."""
        return gzip.compress(data, self.level, mtime=0)

    @contextlib.contextmanager
    def writer(self, fileobj: BinaryIO) -> Iterator[gzip.GzipFile]:
        """A stream that writes one member into ``fileobj``, ended on exit."""
        with gzip.GzipFile(filename="", fileobj=fileobj, mode="wb", compresslevel=self.level, mtime=0) as out:
            yield out


class Zstd:
    """zstd frames at level 1 (zstandard is imported when a frame is made: an optional
    dependency, checked by :func:`codec_for`).

    Level 1 rather than zstd's default 3: on a merged trace of two 60 MB bench ranks (99 MB
    of JSON) level 1 took 0.13 s for ratio 16.3, level 3 0.29 s for 13.9 and level 6 1.6 s
    for 16.2 (gzip-1: 0.59 s, 9.9); the merged sample traces also compress better at level 1
    (docs/performance.md, "Compression").
    """

    name = "zstd"
    level = 1

    def compress(self, data: bytes) -> bytes:
        """``data`` as one complete frame."""
        return self._compressor().compress(data)

    @contextlib.contextmanager
    def writer(self, fileobj: BinaryIO) -> Iterator[Stream]:
        """A stream that writes one frame into ``fileobj``, ended on exit."""
        with self._compressor().stream_writer(fileobj, closefd=False) as out:
            yield out

    def _compressor(self) -> Any:
        # the checksum (as the zstd tool writes by default) is what finds corrupt data, as
        # gzip's CRC does; without it a changed byte may just decode to other bytes
        return _zstandard(OutputError).ZstdCompressor(level=self.level, write_checksum=True)


Codec = Union[Gzip, Zstd]
CODECS: dict[str, Codec] = {".gz": Gzip(), ".zst": Zstd()}


def _suffix(path: str) -> str:
    return next((s for s in CODECS if path.endswith(s)), "")


def plain_name(path: str) -> str:
    """``path`` without its compression suffix: ``t.pftrace.zst`` -> ``t.pftrace``."""
    return path[:len(path) - len(_suffix(path))]


def codec_for(path: str) -> Optional[Codec]:
    """The codec an output name asks for, None for an uncompressed name or "-" (stdout).

    A ``.zst`` name without the zstandard module is refused here, before any work is done.
    """
    codec = CODECS.get(_suffix(path))
    if isinstance(codec, Zstd):
        _zstandard(lambda message: OutputError(f"{path}: {message}"))
    return codec


def writer(codec: Optional[Codec], fileobj: BinaryIO) -> ContextManager[Stream]:
    """``codec.writer(fileobj)``, or ``fileobj`` itself when ``codec`` is None."""
    return codec.writer(fileobj) if codec else contextlib.nullcontext(fileobj)


def decompress(path: str, data: bytes) -> tuple[bytes, str]:
    """(bytes, cut) of the contents of file ``path``: gzip and zstd are undone, found by their
    magic; ``cut`` names the codec when its stream ends early (what it decompressed to is
    returned, for the reader to salvage), else it is "". Corrupt data is a TraceError."""
    if data[:2] == GZIP_MAGIC:
        return _gunzip(path, data)
    if data[:4] == ZSTD_MAGIC:
        return _unzstd(path, data)
    return data, ""


def decompressor(path: str, fileobj: BinaryIO, start: bytes) -> Optional["_Stream"]:
    """A reader whose ``read(n)`` gives at most ``n`` more decompressed bytes of the first
    gzip member or zstd frame of ``fileobj`` (b"" at its end), when ``start`` (its first
    bytes) says it is compressed, else None: for reading the head of a file without the
    rest. Its output is bounded by what is asked, never by what the input holds — a chunk
    of a zip bomb would otherwise inflate a thousandfold (zstd: ~32000x) in one call."""
    if start[:2] == GZIP_MAGIC:
        return _Stream(path, "gzip", _GzipReader(_Prepended(start, fileobj)), zlib.error)
    if start[:4] == ZSTD_MAGIC:
        zstandard = _zstandard(lambda message: TraceError(path, message))
        reader = zstandard.ZstdDecompressor().stream_reader(_Prepended(start, fileobj), read_size=_ZSTD_SLICE,
                                                             read_across_frames=False, closefd=False)
        return _Stream(path, "zstd", reader, zstandard.ZstdError)
    return None


class _Prepended:
    """``fileobj`` read after the bytes ``start`` already taken from it (a pipe cannot seek back)."""

    def __init__(self, start: bytes, fileobj: BinaryIO) -> None:
        self.start, self.fileobj = memoryview(start), fileobj

    def read(self, n: int = -1) -> bytes:
        if len(self.start):
            n = len(self.start) if n < 0 else n
            piece, self.start = bytes(self.start[:n]), self.start[n:]
            return piece
        return self.fileobj.read(n)


class _GzipReader:
    """One gzip member of a file, inflated ``max_length`` bytes at a time."""

    def __init__(self, fileobj: "_Prepended") -> None:
        self.fileobj, self.inflate, self.tail = fileobj, zlib.decompressobj(wbits=31), b""

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n and not self.inflate.eof:
            if not self.tail:
                self.tail = self.fileobj.read(64 << 10)
                if not self.tail:
                    break  # the stream ends early: what came before is the head
            out += self.inflate.decompress(self.tail, n - len(out))
            self.tail = self.inflate.unconsumed_tail
        return bytes(out)


class _Stream:
    """A bounded decompressing reader whose corrupt data is a TraceError, whatever the codec."""

    def __init__(self, path: str, name: str, reader: Any, errors: "type[Exception]") -> None:
        self.path, self.name, self.reader, self.errors = path, name, reader, errors

    def read(self, n: int) -> bytes:
        try:
            return self.reader.read(n)
        except self.errors as e:
            raise TraceError(self.path, f"corrupt {self.name}: {e}") from None


# ---- the inflation bound ----------------------------------------------------------------
# A small compressed file can stand for a huge one (23 MB of gzip for 5 GB of zeros): what
# one input may inflate to is bounded before it is parsed, and the file is named.

MAX_INFLATE_ENV = "TRACEMERGE_MAX_INFLATE"
MAX_INFLATE_RATIO = 64          # real trace JSON inflates 5-30x (gzip-1 ~11x, zstd-1 ~16x)
MAX_INFLATE_FLOOR = 256 << 20   # small files may inflate this far whatever their ratio
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# the largest bound a size may set: an inflate limit travels to zlib and zstd as a C size
# (`inf`, `1e30`, `9999...G` were accepted, then ended the gzip reader in an internal error),
# and no trace comes near a pebibyte
MAX_SIZE = 1 << 50


def parse_size(text: Union[str, int]) -> int:
    """Bytes of a size like ``512M``, ``8G``, ``1000000``; 0 means no bound."""
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    try:
        n = float(t[:len(t) - len(unit)])
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 512M, 8G, 0 for no limit)") from None
    if n < 0 or n != n:
        raise ValueError(f"{text!r} is not a size (e.g. 512M, 8G, 0 for no limit)")
    if n * _UNITS[unit] > MAX_SIZE:  # inf too
        raise ValueError(f"{text!r} is beyond the largest bound, 1024T (2**50 bytes; 0 for no limit)")
    return int(n * _UNITS[unit])


def inflate_limit(compressed_size: int) -> Optional[int]:
    """The most bytes an input of ``compressed_size`` may inflate to (None: unbounded):
    ``TRACEMERGE_MAX_INFLATE`` (set by ``--max-inflate``), else 64x its size, at least 256 MiB."""
    given = os.environ.get(MAX_INFLATE_ENV)
    if given:
        try:
            return parse_size(given) or None
        except ValueError as e:  # a bound the user set and mistyped is refused, not ignored
            raise UsageError(f"{MAX_INFLATE_ENV}={given!r}: {e}") from None
    return max(MAX_INFLATE_FLOOR, MAX_INFLATE_RATIO * compressed_size)


def _too_big(path: str, name: str, limit: int) -> TraceError:
    return TraceError(path, f"the {name} stream inflates to more than {_size(limit)} (the bound for this input; "
                            f"--max-inflate SIZE or {MAX_INFLATE_ENV} raises it, 0 lifts it)")


def _size(n: int) -> str:
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = 1 << {"TiB": 40, "GiB": 30, "MiB": 20, "KiB": 10}[unit]
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


def _gunzip(path: str, data: bytes) -> tuple[bytes, str]:
    """Every member, each inflated by one call bounded by what is left of the limit (the
    same single pass as gzip.decompress, which cannot be bounded)."""
    limit = inflate_limit(len(data))
    out, total = [], 0
    while data:
        d = zlib.decompressobj(wbits=31)
        room = limit - total + 1 if limit is not None else 0
        try:
            piece = d.decompress(data, room) if room else d.decompress(data)
        except zlib.error as e:
            raise TraceError(path, f"corrupt gzip: {e}") from None
        total += len(piece)
        if limit is not None and (total > limit or d.unconsumed_tail):
            raise _too_big(path, "gzip", limit)
        out.append(piece)
        if not d.eof:
            return b"".join(out) if len(out) > 1 else out[0], "gzip"  # cut: what came before, salvaged
        data = d.unused_data
        if not data.strip(b"\0"):
            break  # zero padding after the last member (a crash can zero-fill a file's end)
    return (b"".join(out) if len(out) > 1 else out[0]), ""


# zstd's decompressobj takes no output bound: the input goes in slices small enough that
# even a run-length frame (~32000x) cannot overshoot what is left of the bound by much
# (a fixed 8 KiB slice could inflate 256 MiB past it)
_ZSTD_SLICE = 8 << 10
_ZSTD_RATIO = 1 << 15     # the most a zstd frame inflates (run-length blocks: 128 KiB from ~4 bytes)
_ZSTD_MIN_SLICE = 64      # past the bound by at most 64 * _ZSTD_RATIO = 2 MiB


def _unzstd(path: str, data: bytes) -> tuple[bytes, str]:
    """Every frame, one decompressor each: zstandard's multi-frame mode cannot tell a stream
    that ends inside a frame from a whole one, so it would hide a cut."""
    zstandard = _zstandard(lambda message: TraceError(path, message))
    limit = inflate_limit(len(data))
    dctx, out, total = zstandard.ZstdDecompressor(), [], 0
    view = memoryview(data)
    while len(view):
        d = dctx.decompressobj()
        pos = 0
        try:
            while pos < len(view) and not d.eof:
                size = max(_ZSTD_MIN_SLICE, (limit - total) // _ZSTD_RATIO) if limit is not None else len(view)
                step = view[pos:pos + size]
                piece = d.decompress(step)
                pos += len(step)
                total += len(piece)
                if limit is not None and total > limit:
                    raise _too_big(path, "zstd", limit)
                out.append(piece)
        except zstandard.ZstdError as e:
            raise TraceError(path, f"corrupt zstd: {e}") from None
        if not d.eof:
            return b"".join(out), "zstd"
        # what the frame did not use: the unused part of the last slice, then the rest
        rest = bytes(d.unused_data) + bytes(view[pos:])
        # zero padding after a frame (a crash can zero-fill a file's end) is skipped, as
        # gzip.decompress skips it after a member
        view = memoryview(rest.lstrip(b"\0"))
    return b"".join(out), ""


def _zstandard(fail: Callable[[str], Exception]) -> Any:
    """The zstandard module; without it, the exception ``fail(message)`` is raised."""
    try:
        import zstandard
    except ImportError:
        raise fail(f"zstd needs the zstandard module: {INSTALL_ZSTD}") from None
    return zstandard
