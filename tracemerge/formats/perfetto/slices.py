"""Slices of one thread on Perfetto's tracks: which lane (the thread track or an overlap
track) each goes to, and the order of a lane's begin and end packets, properly nested.
The slices come in the shared nesting order (:func:`tracemerge.algorithms.nesting.nest_order`)."""

import heapq
from typing import List, Sequence, Tuple

SLICE_BEGIN, SLICE_END = 1, 2   # TrackEvent.Type


def nest(start: Sequence[int], end: Sequence[int]) -> List[int]:
    """Lane of each slice of one thread (0 = the thread track, k = overlap track k).

    Slices must come sorted by (start, -end). A slice nests in a lane when it starts at or
    after the end of the lane's innermost open slice or ends within it: the first lane
    where no open slice ends strictly inside it, else a new lane.

    A lane's open ends decrease from its outermost slice in, so what decides is its
    innermost slice still open at the start (the smallest end past it). Those are kept in
    a max-tree over the lanes (the leftmost lane whose innermost open end is at or past the
    slice's end, found in log(lanes)); a heap of the lanes' innermost ends says which lanes
    a start closes. n log n: a scan of every lane per slice was quadratic when all spans
    of a thread are open at once (100k crossing spans: 100k lanes).
    """
    size = 1
    tree = [_NO_LANE, _NO_LANE]   # tree[size + k]: lane k's innermost open end (_EMPTY: none open)
    stacks: List[List[int]] = []  # per lane: its open slices' ends, outermost first
    tops: List[Tuple[int, int]] = []   # (innermost open end, lane), possibly stale
    out: List[int] = []
    for s, e in zip(start, end):
        while tops and tops[0][0] <= s:
            k = heapq.heappop(tops)[1]
            stack = stacks[k]
            while stack and stack[-1] <= s:
                stack.pop()
            _set(tree, size, k, stack[-1] if stack else _EMPTY)
            if stack:
                heapq.heappush(tops, (stack[-1], k))
        k = _first_at_least(tree, size, e)
        if k < 0:
            k = len(stacks)
            stacks.append([])
            if k == size:
                tree = _grown(tree, size)
                size *= 2
        stacks[k].append(e)
        _set(tree, size, k, e)
        heapq.heappush(tops, (e, k))
        out.append(k)
    return out


_EMPTY = float("inf")      # a lane with nothing open takes any slice
_NO_LANE = float("-inf")   # a leaf past the last lane takes none


def _set(tree: List[float], size: int, k: int, value: float) -> None:
    i = size + k
    tree[i] = value
    i //= 2
    while i:
        tree[i] = max(tree[2 * i], tree[2 * i + 1])
        i //= 2


def _first_at_least(tree: List[float], size: int, e: int) -> int:
    """The leftmost lane whose value is at least ``e``, else -1."""
    if tree[1] < e:
        return -1
    i = 1
    while i < size:
        i = 2 * i if tree[2 * i] >= e else 2 * i + 1
    return i - size


def _grown(tree: List[float], size: int) -> List[float]:
    """The tree over twice as many lanes (the new ones: none)."""
    leaves = tree[size:] + [_NO_LANE] * size
    grown = [_NO_LANE] * (2 * size) + leaves
    for i in range(2 * size - 1, 0, -1):
        grown[i] = max(grown[2 * i], grown[2 * i + 1])
    return grown


def slice_order(start: Sequence[int], end: Sequence[int]) -> List[Tuple[int, int, int]]:
    """(ts, kind, slice) records of one lane in emission order: properly nested begins/ends."""
    records: List[Tuple[int, int, int]] = []
    stack: List[int] = []
    for n, (s, e) in enumerate(zip(start, end)):
        while stack and end[stack[-1]] <= s:
            j = stack.pop()
            records.append((end[j], SLICE_END, j))
        stack.append(n)
        records.append((s, SLICE_BEGIN, n))
    while stack:
        j = stack.pop()
        records.append((end[j], SLICE_END, j))
    return records
