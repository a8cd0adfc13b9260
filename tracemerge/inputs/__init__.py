"""Reading rank files. The registry :data:`READERS` lists the input formats (each an
:class:`~tracemerge.inputs.base.InputFormat`); :func:`read_trace` and pass 1
(:mod:`~tracemerge.job.describe_files`) pick the reader by :func:`reader_for`. A new input format
is one new module and one line here.

Modules: the Chrome/Kineto JSON reader (chrome), a rank file's head (head), cut-file
salvage (salvage), PyTorch Flight Recorder dumps (flight_recorder), what a file says about its rank (rankinfo, kineto_collectives) and
checks over one rank and over the job (rankchecks, jobchecks).
"""

import io
import os
from typing import Tuple, Union

from tracemerge.errors import TraceError
from tracemerge.files.codecs import decompressor
from tracemerge.inputs import chrome, flight_recorder, journal
from tracemerge.inputs.base import InputFormat
from tracemerge.model import RankTrace

# formats with a sniff first, in order; the last, without one, takes the rest
READERS: Tuple[InputFormat, ...] = (
    journal.FORMAT,
    flight_recorder.FORMAT,
    chrome.FORMAT,
)


def reader_for(path: Union[str, "os.PathLike[str]"]) -> InputFormat:
    """The format of ``path``: the first whose sniff claims its first decompressed bytes,
    else the fallback. The head is only read when some format sniffs."""
    if not any(f.sniff is not None for f in READERS):
        return _fallback()
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return reader_of(path, f.read(SNIFF_BYTES))
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None


def reader_of(path: str, start: bytes) -> InputFormat:
    """:func:`reader_for` of ``path`` from its first SNIFF_BYTES (``start``), already read by
    a caller that goes on reading the file it opened (the compiled core's read)."""
    first = _inflated_start(path, start)
    for form in READERS:
        sniff = form.sniff
        if sniff is not None and sniff(first):
            return form
    return _fallback()


def _fallback() -> InputFormat:
    return next(f for f in READERS if f.sniff is None)


SNIFF_BYTES = 4096


def _first_bytes(path: str) -> bytes:
    """The first decompressed bytes of ``path`` from its first SNIFF_BYTES: enough to tell
    a format by its first line, without inflating a rank file's first megabyte (every
    input is sniffed; its reader reads it again)."""
    try:
        with open(path, "rb") as f:
            data = f.read(SNIFF_BYTES)
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    return _inflated_start(path, data)


def _inflated_start(path: str, data: bytes) -> bytes:
    """The decompressed bytes of a file's first bytes ``data`` (those bytes when it is not compressed)."""
    inflate = decompressor(path, io.BytesIO(), data)  # the first bytes alone: a stream cut there is fine
    if inflate is None:
        return data
    try:
        return inflate.read(SNIFF_BYTES << 4)
    except TraceError:
        return b""  # the full reader explains a corrupt stream


def read_trace(path: Union[str, "os.PathLike[str]"]) -> RankTrace:
    """Read one trace file into a :class:`~tracemerge.model.RankTrace`, by its format's reader."""
    path = os.fspath(path)
    return reader_for(path).read(path)
