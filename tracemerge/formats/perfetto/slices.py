"""Slices of one thread on Perfetto's tracks: which lane (the thread track or an overlap
track) each goes to, and the order of a lane's begin and end packets, properly nested.
The slices come in the shared nesting order (:func:`tracemerge.nesting.nest_order`)."""

from typing import List, Sequence, Tuple

SLICE_BEGIN, SLICE_END = 1, 2   # TrackEvent.Type


def nest(start: Sequence[int], end: Sequence[int]) -> List[int]:
    """Lane of each slice of one thread (0 = the thread track, k = overlap track k).

    Slices must come sorted by (start, -end). A slice nests in a lane when it starts at or
    after the end of the lane's innermost open slice or ends within it.
    """
    lanes: List[List[int]] = []   # per lane: stack of open slice ends
    out: List[int] = []
    for s, e in zip(start, end):
        for k, stack in enumerate(lanes):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                out.append(k)
                break
        else:
            lanes.append([e])
            out.append(len(lanes) - 1)
    return out


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
