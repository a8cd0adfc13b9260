"""numpy set operations and percentiles that stay off the path that imports ``numpy.ma``.

numpy 2's ``np.unique`` (and ``union1d``, ``unique(..., axis=0)`` and ``percentile``, which
call it) asks ``np.ma.is_masked`` whenever no index, inverse or count is wanted, and that
first attribute access imports ``numpy.ma``: ~12 ms of CPU in every process that takes a
distinct set or a percentile, the parent and each worker of a merge. A sort and a neighbour
compare give the same sorted distinct values without it (and for the integer codes here,
faster than numpy's hash path); one sort gives every percentile asked.
"""

import math
from typing import Any, Iterable, List

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-d array: ``np.unique(values)``."""
    s = np.sort(np.asarray(values).ravel())
    if len(s) < 2:
        return s
    keep = np.empty(len(s), bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted distinct values of both arrays: ``np.union1d(a, b)``."""
    return distinct(np.concatenate((np.asarray(a).ravel(), np.asarray(b).ravel())))


def distinct_rows(rows: np.ndarray) -> np.ndarray:
    """The distinct rows of a 2-d integer array in lexicographic order: ``np.unique(rows, axis=0)``."""
    rows = np.asarray(rows)
    if len(rows) < 2:
        return rows
    order = np.lexsort(rows.T[::-1])
    s = rows[order]
    keep = np.empty(len(s), bool)
    keep[0] = True
    np.any(s[1:] != s[:-1], axis=1, out=keep[1:])
    return s[keep]


def percentiles(values: np.ndarray, ps: Iterable[float]) -> List[float]:
    """``np.percentile(values, p)`` for each ``p`` (its default, linear method; no NaN in
    ``values``, at least one value), to the last bit: the same virtual index, neighbours and
    interpolation (numpy's ``_lerp``, which takes the upper neighbour's side from t = 0.5 on)."""
    s = np.sort(np.asarray(values, np.float64).ravel())
    last = len(s) - 1
    out = []
    for p in ps:
        at = last * (p / 100)
        if at >= last:
            out.append(float(s[-1]))
            continue
        lo = math.floor(at)
        a, b, t = float(s[lo]), float(s[lo + 1]), at - lo
        out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    return out


def median(values: Any) -> float:
    """``np.median(values)`` to the last bit (the 50th percentile, :func:`percentiles`): numpy's
    own median imports its masked-array module on first use (~12 ms of a process's start)."""
    return percentiles(values, (50,))[0]
