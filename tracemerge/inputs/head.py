"""The head of a trace file: its top-level keys before ``traceEvents``, read without the events.

A rank file puts its ``"tracemerge"`` block first (docs/rank-file-format.md) and Kineto
writes its own top-level keys (``baseTimeNanoseconds``, ``distributedInfo`` …) before
``traceEvents``, so everything a clock model needs is in the first few percent of the file.
Reading only that part lets ``combine`` solve the clocks before any worker decodes a rank,
and decode each rank once.
"""

import os
from typing import Any, Iterator, Optional

import msgspec

from tracemerge.errors import TraceError
from tracemerge.files.codecs import decompressor, inflate_limit

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
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # the full reader explains what is wrong
        return None
    return head if isinstance(head, dict) else None


def _prefixes(path: str) -> Iterator[bytearray]:
    """Ever longer decompressed prefixes of ``path`` (gzip or zstd by their magic, as the
    reader does), each at most a read longer than the last: a compressed head is inflated
    a MB at a time (the inflation bound of the full reader does not apply here, and a
    chunk of a zip bomb inflates to GBs in one call), and read_head stops at
    MAX_HEAD_BYTES."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        data = f.read(_READ)
        inflate = decompressor(path, f, data) if data else None
        # the full reader's bound holds here too (the head stops at MAX_HEAD_BYTES anyway):
        # past it, the full reader names the file with the documented error
        limit = inflate_limit(os.fstat(f.fileno()).st_size) if inflate is not None else None
        buf = bytearray()  # grows in place: a long head is not copied once per read
        while data:
            if inflate is not None:
                try:
                    data = inflate.read(_READ)
                except TraceError:
                    return  # the full reader explains a corrupt stream
                if not data or (limit is not None and len(buf) + len(data) > limit):
                    return
            buf += data
            yield buf
            if inflate is None:
                data = f.read(_READ)
