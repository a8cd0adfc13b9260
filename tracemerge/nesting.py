"""Slice order shared by everything that nests slices per thread (key averages' op tree,
Perfetto's tracks and lanes, the binding of input flows to their enclosing slices).

Slices sorted by (thread, start, -end) come with every slice after the slices that
enclose it, so one walk per thread finds parents, lanes or enclosing slices; ties keep
their given order (the sort is stable), as torch keeps its own.
"""

import numpy as np


def nest_order(thread, start, end):
    """The order that sorts slices by (``thread``, ``start``, -``end``)."""
    return np.lexsort((-end, start, thread))


def thread_runs(thread):
    """[(first row, end row)] of the runs of equal keys of sorted ``thread`` keys."""
    cuts = np.flatnonzero(np.diff(thread)) + 1
    firsts = np.concatenate(([0], cuts)).tolist()
    ends = np.concatenate((cuts, [len(thread)])).tolist()
    return [(a, b) for a, b in zip(firsts, ends) if b > a]
