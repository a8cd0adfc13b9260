"""The head of a trace file: its top-level keys before ``traceEvents``, read without the events.

A rank file puts its ``"tracemerge"`` block first (docs/rank-file-format.md) and Kineto
writes its own top-level keys (``baseTimeNanoseconds``, ``distributedInfo`` …) before
``traceEvents``, so everything a clock model needs is in the first few percent of the file.
Reading only that part lets ``combine`` solve the clocks before any worker decodes a rank,
and decode each rank once.
"""

from typing import Any, Iterator, Optional

import msgspec

from tracemerge.codecs import decompressor
from tracemerge.errors import TraceError

_KEY = b'"traceEvents"'
_READ = 1 << 20
# A head is kilobytes to a few MB (the block's RPC and collective records); a file with
# more than this before its events has an unusual layout and is read whole instead.
MAX_HEAD_BYTES = 256 << 20


def read_head(path: str) -> Optional[dict[str, Any]]:
    """The top-level keys of ``path`` written before ``traceEvents`` as a dict, or None when
    the file does not start that way (a bare array, the events first, not JSON)."""
    start = 0
    for buf in _prefixes(path):
        while True:
            at = buf.find(_KEY, start)
            if at < 0:
                start = max(0, len(buf) - len(_KEY))
                break
            head = _object_before(buf, at)
            if head is not None:
                return head
            start = at + 1  # the key's name inside a string of the block: look further
        if len(buf) > MAX_HEAD_BYTES:
            return None
    return None


def first_bytes(path: str) -> bytes:
    """The first decompressed bytes of ``path`` (up to about a MB), for sniffing formats."""
    return bytes(next(iter(_prefixes(path)), b""))


def _object_before(buf: bytearray, at: int) -> Optional[dict[str, Any]]:
    """The object ``buf[:at]`` opens, when ``at`` is where its next key starts."""
    body = buf[:at].rstrip()
    if not body.endswith(b","):
        return None
    try:
        head = msgspec.json.decode(body[:-1] + b"}")
    except (msgspec.DecodeError, UnicodeDecodeError):  # the full reader explains what is wrong
        return None
    return head if isinstance(head, dict) else None


def _prefixes(path: str) -> Iterator[bytearray]:
    """Ever longer decompressed prefixes of ``path`` (gzip or zstd by their magic, as the
    reader does)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        data = f.read(_READ)
        inflate = decompressor(path, data)
        buf = bytearray()  # grows in place: a long head is not copied once per read
        while data:
            if inflate is not None:
                try:
                    data = inflate.decompress(data)
                except TraceError:
                    return  # the full reader explains a corrupt stream
            buf += data
            yield buf
            if inflate is not None and inflate.eof:
                return
            data = f.read(_READ)
