"""Causality after alignment, checked on RankInfo records alone (no event pass).

Violations: an RPC whose callee span (t2, t3) does not lie inside its caller's window
(t1, t4), and a synchronising collective that ended on one rank before it started on
another. :func:`enforce` removes them with the smallest local correction, in the spirit
of Scalasca's controlled logical clock: each offending span is moved by the least amount
that fits it (squeezed only if it is longer than the window), other exchange points of
that rank keep their times, and the rank's time between them is stretched linearly; the
knots are made monotone by weighted isotonic regression (pool adjacent violators), which
pushes neighbours forward or back only as far as order requires.
"""

from dataclasses import dataclass, replace
from typing import Dict

import numpy as np

from tracemerge.clocks.bands import synchronised
from tracemerge.clocks.clock import ClockModel
from tracemerge.correlate.match import correlate

PASSES = 50          # each pass fixes every current violation; pushes may create a few new ones
PINNED_WEIGHT = 1e9  # isotonic weight of a point that must land where it was moved to


@dataclass
class Points:
    """Exchange points of all ranks: rpc (caller, callee, t1..t4) and collective members."""

    rpc: np.ndarray     # int64 rows: caller, callee, t1, t2, t3, t4 (own clocks)
    coll: np.ndarray    # int64 rows: rank, start, end (own clock) of each member, by collective, ranks ascending
    first: np.ndarray   # the row in ``coll`` where each collective's members start


def points(infos, links=None):
    links = links or correlate(infos)
    calls = links.rpcs.calls
    # a call whose records name a rank no file has (they disagree with the files) has no clock
    have = np.array(sorted(i.rank for i in infos), np.int64)
    use = calls.quadruples & np.isin(calls.caller, have) & np.isin(calls.callee, have)
    rpc = np.column_stack([calls.caller[use], calls.callee[use], *calls.times[:, use]]).reshape(-1, 6)
    collectives = links.collectives
    row, rank, start, end = synchronised(collectives)
    keep = np.bincount(row, minlength=len(collectives))[row] > 1
    row = row[keep]
    coll = np.column_stack([rank[keep], start[keep], end[keep]]).reshape(-1, 3)
    return Points(rpc, coll, np.flatnonzero(np.diff(row, prepend=-1)))


def _to_ref(clocks: Dict[int, ClockModel], ranks: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``times`` (each on its rank's clock) on the reference clock: one sort, then a slice per
    rank, so the cost grows with the points, not with points times ranks."""
    out = np.empty_like(times)
    order = np.argsort(ranks, kind="stable")
    sorted_ranks = ranks[order]
    edges = np.flatnonzero(np.diff(sorted_ranks)) + 1
    for part in np.split(order, edges) if len(order) else []:
        out[part] = clocks[int(ranks[part[0]])].to_reference(times[part])
    return out


def _aligned(p, clocks):
    """(t1, t2, t3, t4) on the reference clock, and (start, end) of the collective members likewise."""
    r, c = p.rpc, p.coll
    rpc = (_to_ref(clocks, r[:, 0], r[:, 2]), _to_ref(clocks, r[:, 1], r[:, 3]),
           _to_ref(clocks, r[:, 1], r[:, 4]), _to_ref(clocks, r[:, 0], r[:, 5]))
    return rpc, (_to_ref(clocks, c[:, 0], c[:, 1]), _to_ref(clocks, c[:, 0], c[:, 2]))


def _violations(p, rpc, coll):
    t1, t2, t3, t4 = rpc
    bad_rpc = (t2 < t1) | (t3 > t4)
    (s, e), first = coll, p.first
    bad_coll = (np.maximum.reduceat(s, first) > np.minimum.reduceat(e, first)) if len(first) else np.zeros(0, bool)
    return bad_rpc, bad_coll


def count(infos, clocks, p=None):
    """{"rpc": n, "collective": m, "total": n + m} violations under ``clocks``."""
    p = p or points(infos)
    bad_rpc, bad_coll = _violations(p, *_aligned(p, clocks))
    n, m = int(bad_rpc.sum()), int(bad_coll.sum())
    return {"rpc": n, "collective": m, "total": n + m}


def review(infos, clocks, enforce_causality=False, links=None):
    """(clocks, report): violations under ``clocks`` and, when asked, the corrected clocks."""
    p = points(infos, links)
    before = count(infos, clocks, p)
    report = {"checked": {"rpc": len(p.rpc), "collective": len(p.first)}, "violations_before": before,
              "enforced": bool(enforce_causality)}
    if enforce_causality and before["total"]:
        clocks, moved = enforce(infos, clocks, p)
        report.update(moved)
    report["violations_after"] = count(infos, clocks, p) if enforce_causality else before
    return clocks, report


def enforce(infos, clocks, p=None):
    """(corrected clocks, {"moved_ns_max", "moved_ns_total", "points_moved", "ranks_moved"})."""
    p = p or points(infos)
    base = {r: replace(c, corrections=[]) for r, c in clocks.items()}
    # Every exchange point of a rank is a knot, at its aligned time before any correction.
    knots = {r: set() for r in clocks}
    r = p.rpc
    for col, time in ((0, 2), (1, 3), (1, 4), (0, 5)):
        for rank, t in zip(r[:, col].tolist(), _to_ref(base, r[:, col], r[:, time]).tolist()):
            knots[rank].add(t)
    members = p.coll
    for time in (1, 2):
        for rank, t in zip(members[:, 0].tolist(), _to_ref(base, members[:, 0], members[:, time]).tolist()):
            knots[rank].add(t)
    span = {i.rank: (base[i.rank].to_reference(i.start_ns), base[i.rank].to_reference(i.stop_ns)) for i in infos}
    xs = {rank: np.array(sorted(ts | {min(ts | {span[rank][0]}) - 1, max(ts | {span[rank][1]}) + 1}), np.int64)
          for rank, ts in knots.items() if ts}
    shift = {rank: np.zeros(len(x), np.int64) for rank, x in xs.items()}
    rpc_x, coll_x = _aligned(p, base)  # each point's knot
    size = np.diff(np.append(p.first, len(members)))  # members of each collective
    current = dict(base)
    for _ in range(PASSES):
        rpc, coll = _aligned(p, current)
        bad_rpc, bad_coll = _violations(p, rpc, coll)
        if not bad_rpc.any() and not bad_coll.any():
            break
        wanted = {rank: {} for rank in xs}
        t1, t2, t3, t4 = (t[bad_rpc] for t in rpc)
        for callee, a, b, c, d, kb, kc in zip(r[bad_rpc, 1].tolist(), t1.tolist(), t2.tolist(), t3.tolist(),
                                              t4.tolist(), rpc_x[1][bad_rpc].tolist(), rpc_x[2][bad_rpc].tolist()):
            if c - b <= d - a:   # fits: move the whole span the least way
                s = a - b if b < a else d - c
                moves = (s, s)
            else:                # longer than the window (timestamp noise): squeeze it in
                moves = (a - b, d - c)
            wanted[callee][kb], wanted[callee][kc] = moves
        starts, ends = coll
        last_start = np.repeat(np.maximum.reduceat(starts, p.first), size) if len(starts) else starts
        early = np.repeat(bad_coll, size) & (ends < last_start)  # left before the last member arrived
        for rank, move, k0, k1 in zip(members[early, 0].tolist(), (last_start - ends)[early].tolist(),
                                      coll_x[0][early].tolist(), coll_x[1][early].tolist()):
            wanted[rank][k0] = wanted[rank][k1] = move
        for rank, moves in wanted.items():
            if moves:
                shift[rank] = _isotonic_shift(xs[rank], shift[rank], moves)
                current[rank] = replace(base[rank], corrections=[[int(x), int(v)] for x, v in zip(xs[rank], shift[rank])])
    moved = np.concatenate([np.abs(v) for v in shift.values()]) if shift else np.zeros(0, np.int64)
    return current, {"moved_ns_max": int(moved.max()) if len(moved) else 0, "moved_ns_total": int(moved.sum()),
                     "points_moved": int((moved > 0).sum()),
                     "ranks_moved": sorted(rank for rank, v in shift.items() if v.any())}


def _isotonic_shift(x, shift, moves):
    """New knot shifts: the knots in ``moves`` ({knot: extra shift}) moved, the corrected
    times x + shift kept non-decreasing with the least total change elsewhere."""
    origin = x[0]  # epoch ns do not fit a double
    y = (x + shift - origin).astype(np.float64)
    w = np.ones(len(y))
    index = {t: i for i, t in enumerate(x.tolist())}
    for t, mv in moves.items():
        i = index[t]
        y[i] += mv
        w[i] = PINNED_WEIGHT
    return np.rint(_pav(y, w)).astype(np.int64) + origin - x


def _pav(y, w):
    """Weighted least-squares non-decreasing fit (pool adjacent violators)."""
    vals, wts, sizes = [], [], []
    for v, wt in zip(y.tolist(), w.tolist()):
        vals.append(v)
        wts.append(wt)
        sizes.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v2, w2, n2 = vals.pop(), wts.pop(), sizes.pop()
            vals[-1] = (vals[-1] * wts[-1] + v2 * w2) / (wts[-1] + w2)
            wts[-1] += w2
            sizes[-1] += n2
    return np.repeat(vals, sizes)
