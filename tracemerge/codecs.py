"""Compressed traces: gzip and zstd, the one place that knows codecs.

Outputs are compressed by their name (``.gz``, ``.zst``), inputs are recognised by their
magic bytes whatever their name. Both formats define a stream as complete pieces one after
another (gzip members, zstd frames), so pieces compressed apart — each worker's shard, the
parent's header and footer — are joined by copying their bytes.
"""

import contextlib
import gzip
import zlib

from tracemerge.errors import OutputError, TraceError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
INSTALL_ZSTD = "pip install 'tracemerge[zstd]'"


class Gzip:
    """gzip members at level 1, without a name or time in the header, so equal input gives
    equal bytes."""

    name = "gzip"
    level = 1  # gzip-1 costs ~1/3 of gzip-6 for ~3/4 of its ratio on trace JSON

    def compress(self, data):
        """``data`` as one complete member."""
        return gzip.compress(data, self.level, mtime=0)

    @contextlib.contextmanager
    def writer(self, fileobj):
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

    def compress(self, data):
        """``data`` as one complete frame."""
        return self._compressor().compress(data)

    @contextlib.contextmanager
    def writer(self, fileobj):
        """A stream that writes one frame into ``fileobj``, ended on exit."""
        with self._compressor().stream_writer(fileobj, closefd=False) as out:
            yield out

    def _compressor(self):
        # the checksum (as the zstd tool writes by default) is what finds corrupt data, as
        # gzip's CRC does; without it a changed byte may just decode to other bytes
        return _zstandard(OutputError).ZstdCompressor(level=self.level, write_checksum=True)


CODECS = {".gz": Gzip(), ".zst": Zstd()}


def _suffix(path):
    return next((s for s in CODECS if path.endswith(s)), "")


def plain_name(path):
    """``path`` without its compression suffix: ``t.pftrace.zst`` -> ``t.pftrace``."""
    return path[:len(path) - len(_suffix(path))]


def codec_for(path):
    """The codec an output name asks for, None for an uncompressed name or "-" (stdout).

    A ``.zst`` name without the zstandard module is refused here, before any work is done.
    """
    codec = CODECS.get(_suffix(path))
    if isinstance(codec, Zstd):
        _zstandard(lambda message: OutputError(f"{path}: {message}"))
    return codec


def writer(codec, fileobj):
    """``codec.writer(fileobj)``, or ``fileobj`` itself when ``codec`` is None."""
    return codec.writer(fileobj) if codec else contextlib.nullcontext(fileobj)


def decompress(path, data):
    """(bytes, cut) of the contents of file ``path``: gzip and zstd are undone, found by their
    magic; ``cut`` names the codec when its stream ends early (what it decompressed to is
    returned, for the reader to salvage), else it is "". Corrupt data is a TraceError."""
    if data[:2] == GZIP_MAGIC:
        return _gunzip(path, data)
    if data[:4] == ZSTD_MAGIC:
        return _unzstd(path, data)
    return data, ""


def decompressor(path, start):
    """An object whose ``decompress(chunk)`` undoes the stream that begins with the bytes
    ``start`` one chunk at a time (its ``eof`` is true after the first member or frame), or
    None when ``start`` is not compressed: for reading the head of a file without the rest."""
    if start[:2] == GZIP_MAGIC:
        return _Stream(path, "gzip", zlib.decompressobj(wbits=31), zlib.error)
    if start[:4] == ZSTD_MAGIC:
        zstandard = _zstandard(lambda message: TraceError(path, message))
        return _Stream(path, "zstd", zstandard.ZstdDecompressor().decompressobj(), zstandard.ZstdError)
    return None


class _Stream:
    """A decompressor whose corrupt data is a TraceError, whatever the codec."""

    def __init__(self, path, name, inflate, errors):
        self.path, self.name, self.inflate, self.errors = path, name, inflate, errors

    def decompress(self, chunk):
        try:
            return self.inflate.decompress(chunk)
        except self.errors as e:
            raise TraceError(self.path, f"corrupt {self.name}: {e}") from None

    @property
    def eof(self):
        return self.inflate.eof


def _gunzip(path, data):
    try:
        return gzip.decompress(data), ""
    except EOFError:
        return _gunzip_prefix(path, data), "gzip"
    except (OSError, zlib.error) as e:
        raise TraceError(path, f"corrupt gzip: {e}") from None


def _gunzip_prefix(path, data):
    """Everything a truncated gzip stream decompresses to, member after member."""
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(data))
        except zlib.error as e:
            raise TraceError(path, f"corrupt gzip: {e}") from None
        data = d.unused_data if d.eof else b""
    return b"".join(out)


def _unzstd(path, data):
    """Every frame, one decompressor each: zstandard's multi-frame mode cannot tell a stream
    that ends inside a frame from a whole one, so it would hide a cut."""
    zstandard = _zstandard(lambda message: TraceError(path, message))
    dctx, out = zstandard.ZstdDecompressor(), []
    while data:
        d = dctx.decompressobj()
        try:
            out.append(d.decompress(data))
        except zstandard.ZstdError as e:
            raise TraceError(path, f"corrupt zstd: {e}") from None
        if not d.eof:
            return b"".join(out), "zstd"
        # zero padding after a frame (a crash can zero-fill a file's end) is skipped, as
        # gzip.decompress skips it after a member
        data = d.unused_data.lstrip(b"\0")
    return b"".join(out), ""


def _zstandard(fail):
    """The zstandard module; without it, the exception ``fail(message)`` is raised."""
    try:
        import zstandard
    except ImportError:
        raise fail(f"zstd needs the zstandard module: {INSTALL_ZSTD}") from None
    return zstandard
