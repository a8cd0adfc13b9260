"""Salvage of a trace whose JSON ends early (a rank crashed mid-write, a copy was cut off).

One vectorised pass over the bytes finds the JSON structure (brackets outside strings and
their depth); the document is closed right after the last complete element of the events
array and parsed once. Cost: a ``bytes.translate`` and a few numpy passes over the file,
then one ordinary parse of the kept prefix — never a parse per event.
"""

from dataclasses import dataclass

import numpy as np

_STRUCTURAL = b'{}[]"\\'
_TABLE = bytes(c if c in _STRUCTURAL else 0 for c in range(256))
QUOTE, BACKSLASH = ord('"'), ord("\\")


@dataclass
class Cut:
    text: bytes          # a complete JSON document: the kept prefix, closed
    events: int          # complete events kept
    kept_bytes: int      # bytes of the input kept


class Unsalvageable(ValueError):
    """The input ends before anything worth keeping; the message says where."""


class NotCut(ValueError):
    """The input closes every bracket it opens: whatever is wrong with it, it is not cut off."""


def _brackets(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, +1/-1 deltas) of the brackets of ``data`` that are outside strings."""
    arr = np.frombuffer(data.translate(_TABLE), dtype=np.uint8)
    pos = np.flatnonzero(arr)
    ch = arr[pos]
    quotes = pos[ch == QUOTE]
    slashes = pos[ch == BACKSLASH]
    if len(slashes) and len(quotes):
        # a quote is escaped when an odd-length run of backslashes ends right before it
        run_start = np.maximum.accumulate(np.where(np.diff(slashes, prepend=-2) != 1, slashes, -1))
        i = np.minimum(np.searchsorted(slashes, quotes - 1), len(slashes) - 1)
        escaped = (slashes[i] == quotes - 1) & ((quotes - run_start[i]) % 2 == 1)
        quotes = quotes[~escaped]
    is_bracket = (ch != QUOTE) & (ch != BACKSLASH)
    bpos, bch = pos[is_bracket], ch[is_bracket]
    outside = np.searchsorted(quotes, bpos) % 2 == 0
    bpos, bch = bpos[outside], bch[outside]
    delta = np.where((bch == ord("{")) | (bch == ord("[")), 1, -1).astype(np.int32)
    return bpos, bch, delta


def salvage(data: bytes) -> Cut:
    """The :class:`Cut` of ``data`` (bytes of a trace that ends early).

    An object document keeps every key before ``traceEvents`` and loses those after it; a
    bare array keeps its complete elements.
    """
    bpos, bch, delta = _brackets(data)
    depth = np.cumsum(delta)  # depth after each bracket
    if not len(bpos):
        raise Unsalvageable("no JSON structure before the end of the data")
    if depth[-1] <= 0:
        raise NotCut("every bracket is closed")
    if bch[0] == ord("["):
        start, level, closer = 0, 1, b"]"
    else:
        start, level, closer = _events_array(data, bpos, bch, depth), 2, b"]}"
    after = slice(start + 1, None)
    closed = np.flatnonzero(depth[after] < level)
    if len(closed):  # the array itself is whole; the cut is in a later key
        end = start + 1 + int(closed[0])
        ends = np.flatnonzero((depth[start + 1:end] == level) & (bch[start + 1:end] == ord("}")))
        kept = int(bpos[end]) + 1
        return Cut(text=data[:kept] + closer[1:], events=len(ends), kept_bytes=kept)
    ends = np.flatnonzero((depth[after] == level) & (bch[after] == ord("}")))
    if not len(ends):
        raise Unsalvageable("the data ends before the first complete event")
    kept = int(bpos[start + 1 + int(ends[-1])]) + 1
    return Cut(text=data[:kept] + closer, events=len(ends), kept_bytes=kept)


def _events_array(data: bytes, bpos: np.ndarray, bch: np.ndarray, depth: np.ndarray) -> int:
    """Index (into the bracket arrays) of the '[' that opens the top-level traceEvents."""
    key = data.find(b'"traceEvents"')
    while key >= 0:
        i = int(np.searchsorted(bpos, key))
        if i < len(bpos) and bch[i] == ord("[") and depth[i] == 2 and (i == 0 or depth[i - 1] == 1):
            between = data[key + len(b'"traceEvents"'):int(bpos[i])].strip()
            if between == b":":
                return i
        key = data.find(b'"traceEvents"', key + 1)
    raise Unsalvageable("the data ends before the 'traceEvents' array")
