"""tracemerge.algorithms.arrays gives what numpy's own set operations give (the oracle here), on the
integer codes, indices and ranks it is used for: empty, one value, repeats, negatives."""

import numpy as np
import pytest

from tracemerge.algorithms.arrays import distinct, distinct_rows, percentiles, union

CASES = [np.zeros(0, np.int64), np.array([7]), np.array([3, 3, 3]), np.array([-1, 5, -1, 2, 5, 0]),
         np.random.default_rng(1).integers(-50, 50, 10_000), np.arange(1000)[::-1].copy()]


@pytest.mark.parametrize("a", CASES)
def test_distinct_is_numpys_unique(a):
    got = distinct(a)
    assert got.dtype == a.dtype and got.tolist() == np.unique(a).tolist()


@pytest.mark.parametrize("a", CASES)
def test_union_is_numpys_union1d(a):
    b = np.random.default_rng(len(a)).integers(-60, 60, 37)
    assert union(a, b).tolist() == np.union1d(a, b).tolist()


@pytest.mark.parametrize("n", [0, 1, 2, 500])
def test_distinct_rows_is_numpys_unique_by_row(n):
    rows = np.random.default_rng(n).integers(0, 6, (n, 2))
    want = np.unique(rows, axis=0) if n else rows
    assert distinct_rows(rows).tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_percentiles_are_numpys_to_the_last_bit(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    values = rng.integers(0, 10**9, n) / 1000.0 if seed % 2 else rng.exponential(1e3, n)
    ps = (0, 1, 25, 50, 95, 99, 99.9, 100)
    assert percentiles(values, ps) == [float(np.percentile(values, p)) for p in ps]
