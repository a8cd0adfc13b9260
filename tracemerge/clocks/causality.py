"""Causality after alignment, checked on the ranks' records and drawn RPC spans (no event pass).

Violations: an RPC whose callee side (t2, t3) does not lie inside its caller's window
(t1, t4); a drawn RPC whose callee span does not lie inside its caller span (what the
merged trace shows: ``RankInfo.rpc_spans``); and a synchronising collective that ended on
one rank before it started on another.

:func:`enforce` removes them by moving whole ranks: each rank's clock gets one constant
shift, the smallest that satisfies every exchange it takes part in (difference
constraints ``lo <= s_callee - s_caller <= hi`` per call and span pair, ``s_i - s_j <=
end_j - start_i`` per collective, the reference pinned at 0), found rank by rank by
clamping 0 into the interval its neighbours leave it until nothing moves. A constant
shift keeps every span's duration and every nesting; where no constant shift can satisfy
a rank's exchanges (a clock that drifts under a drift-free method), the violations that
remain are counted and said, never hidden.
"""

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tracemerge.clocks.bands import synchronised
from tracemerge.clocks.clock import ClockModel, to_reference_by_rank
from tracemerge.correlate.match import Correlation, correlate

SWEEPS = 200   # rounds of the rank-by-rank shift search; a feasible system settles in a few


@dataclass
class Points:
    """Exchange points of all ranks: rpc (caller, callee, t1..t4) and collective members."""

    rpc: np.ndarray     # int64 rows: caller, callee, t1, t2, t3, t4 (own clocks)
    coll: np.ndarray    # int64 rows: rank, start, end (own clock) of each member, by collective, ranks ascending
    first: np.ndarray   # the row in ``coll`` where each collective's members start
    spans: np.ndarray   # int64 rows: caller, callee, caller span start, end, callee span start, end (own clocks)


def points(infos: Sequence[Any], links: Optional[Correlation] = None) -> Points:
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
    return Points(rpc, coll, np.flatnonzero(np.diff(row, prepend=-1)), _span_pairs(infos, calls))


def _span_pairs(infos: Sequence[Any], calls: Any) -> np.ndarray:
    """Rows (caller, callee, caller span start, end, callee span start, end) of the calls
    whose two spans a merge shows: the caller's span in its rank's events
    (``RankInfo.rpc_spans``), and the callee's there or, for a call its callee did not
    record, the ``#remote`` span drawn from the side its caller's file carries or that
    the pairing found (``remote_rpcs``, :mod:`tracemerge.place.remote_spans`)."""
    at = {(sp["rpc_id"], sp["role"], info.rank): (sp["ts_ns"], sp["ts_ns"] + max(sp["dur_ns"], 0))
          for info in infos for sp in getattr(info, "rpc_spans", ())}
    own = {r["rpc_id"] for info in infos for r in info.rpcs if r["role"] == "callee"}
    present = {info.rank for info in infos}  # a callee with no file has no clock to check it on
    drawn = {(r["rpc_id"], "callee", r["callee"]): (r["start_ns"], max(r["end_ns"], r["start_ns"]))
             for info in infos for r in getattr(info, "remote_rpcs", ())
             if r["rpc_id"] not in own and r["callee"] in present and isinstance(r.get("start_ns"), int)
             and isinstance(r.get("end_ns"), int)}
    rows = []
    if at:
        for rec, a, b in zip(calls.first, calls.caller.tolist(), calls.callee.tolist()):
            key = (rec["rpc_id"], "callee", b)
            caller, callee = at.get((rec["rpc_id"], "caller", a)), at.get(key, drawn.get(key))
            if caller is not None and callee is not None:
                rows.append((a, b, *caller, *callee))
    return np.array(rows, dtype=np.int64).reshape(-1, 6)


Aligned = Tuple[Tuple[np.ndarray, ...], Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, ...]]


def _aligned(p: Points, clocks: Dict[int, ClockModel]) -> Aligned:
    """(t1, t2, t3, t4) on the reference clock; (start, end) of the collective members; and
    (caller start, caller end, callee start, callee end) of the drawn span pairs, likewise."""
    r, c, sp = p.rpc, p.coll, p.spans
    rpc = (to_reference_by_rank(clocks, r[:, 0], r[:, 2]), to_reference_by_rank(clocks, r[:, 1], r[:, 3]),
           to_reference_by_rank(clocks, r[:, 1], r[:, 4]), to_reference_by_rank(clocks, r[:, 0], r[:, 5]))
    spans = (to_reference_by_rank(clocks, sp[:, 0], sp[:, 2]), to_reference_by_rank(clocks, sp[:, 0], sp[:, 3]),
             to_reference_by_rank(clocks, sp[:, 1], sp[:, 4]), to_reference_by_rank(clocks, sp[:, 1], sp[:, 5]))
    return rpc, (to_reference_by_rank(clocks, c[:, 0], c[:, 1]), to_reference_by_rank(clocks, c[:, 0], c[:, 2])), spans


def _violations(p: Points, rpc: Tuple[np.ndarray, ...], coll: Tuple[np.ndarray, np.ndarray],
                spans: Tuple[np.ndarray, ...]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    t1, t2, t3, t4 = rpc
    bad_rpc = (t2 < t1) | (t3 > t4)
    (s, e), first = coll, p.first
    bad_coll = (np.maximum.reduceat(s, first) > np.minimum.reduceat(e, first)) if len(first) else np.zeros(0, bool)
    c0, c1, s0, s1 = spans
    return bad_rpc, bad_coll, (s0 < c0) | (s1 > c1)


def count(infos: Sequence[Any], clocks: Dict[int, ClockModel], p: Optional[Points] = None) -> Dict[str, int]:
    """{"rpc": n, "collective": m, "spans": k, "total": n + m + k} violations under ``clocks``
    (``spans``: drawn callee spans outside their caller spans)."""
    p = p or points(infos)
    bad_rpc, bad_coll, bad_span = _violations(p, *_aligned(p, clocks))
    n, m, k = int(bad_rpc.sum()), int(bad_coll.sum()), int(bad_span.sum())
    return {"rpc": n, "collective": m, "spans": k, "total": n + m + k}


def review(infos: Sequence[Any], clocks: Dict[int, ClockModel], enforce_causality: bool = False,
           links: Optional[Correlation] = None,
           reference: Optional[int] = None) -> Tuple[Dict[int, ClockModel], Dict[str, Any]]:
    """(clocks, report): violations under ``clocks`` and, when asked, the corrected clocks;
    ``violations_after`` is counted again under the clocks returned."""
    p = points(infos, links)
    before = count(infos, clocks, p)
    report: Dict[str, Any] = {"checked": {"rpc": len(p.rpc), "collective": len(p.first), "spans": len(p.spans)},
              "violations_before": before, "enforced": bool(enforce_causality)}
    if enforce_causality and before["total"]:
        clocks, moved = enforce(infos, clocks, p, reference)
        report.update(moved)
    report["violations_after"] = count(infos, clocks, p) if enforce_causality else before
    return clocks, report


def enforce(infos: Sequence[Any], clocks: Dict[int, ClockModel], p: Optional[Points] = None,
            reference: Optional[int] = None) -> Tuple[Dict[int, ClockModel], Dict[str, Any]]:
    """(clocks moved by a constant shift each, {"moved_ns_max", "moved_ns_total",
    "points_moved", "ranks_moved"}); see the module's doc. ``reference`` (default: the rank
    whose clock is the reference, else the lowest) stays where it is."""
    p = p or points(infos)
    if reference is None:
        reference = next((r for r, c in sorted(clocks.items()) if c.method == "reference"), min(clocks))
    bound = _bounds(p, _aligned(p, clocks))   # {(a, b): w}: s_b - s_a <= w
    ranks = sorted(clocks)
    start = _feasible(ranks, bound, reference)
    feasible = start is not None
    shift = dict(zip(ranks, start if start is not None else [0] * len(ranks)))
    _nearest_zero(ranks, reference, bound, shift)
    out_clocks = {r: _shifted(c, shift[r]) for r, c in clocks.items()}
    if not feasible and count(infos, out_clocks, p)["total"] >= count(infos, clocks, p)["total"]:
        shift, out_clocks = {r: 0 for r in clocks}, dict(clocks)   # no better than as aligned: nothing moves
    ranks_moved = sorted(r for r, v in shift.items() if v)
    on_moved = (np.isin(p.rpc[:, :2], ranks_moved).sum() + np.isin(p.coll[:, 0], ranks_moved).sum()
                + np.isin(p.spans[:, :2], ranks_moved).sum())
    values = np.abs(np.array(list(shift.values()), dtype=np.int64))
    return out_clocks, {"moved_ns_max": int(values.max()) if len(values) else 0, "moved_ns_total": int(values.sum()),
                        "points_moved": int(on_moved), "ranks_moved": ranks_moved}


def _nearest_zero(ranks: List[int], reference: int, bound: Dict[Tuple[int, int], int], shift: Dict[int, int]) -> None:
    """From a point ``shift`` that satisfies every bound, each rank in turn takes the value
    nearest 0 that its neighbours allow (in place, SWEEPS at most): every step keeps every
    bound, and the shifts only shrink."""
    into: Dict[int, List[Tuple[int, int]]] = {}
    out: Dict[int, List[Tuple[int, int]]] = {}
    for (a, b), w in bound.items():
        into.setdefault(b, []).append((a, w))
        out.setdefault(a, []).append((b, w))
    for _ in range(SWEEPS):
        moved = False
        for r in ranks:
            if r == reference:
                continue
            new = _allowed(min((shift[a] + w for a, w in into.get(r, ())), default=None),   # s_r <= s_a + w
                           max((shift[b] - w for b, w in out.get(r, ())), default=None))    # s_r >= s_b - w
            if new != shift[r]:
                shift[r], moved = new, True
        if not moved:
            return


def _allowed(hi: Optional[int], lo: Optional[int]) -> int:
    """The shift nearest 0 within [lo, hi] (None: unbounded)."""
    if hi is not None and lo is not None and lo > hi:
        # only where the bounds contradict each other: split the difference, as
        # close to every neighbour as one shift gets
        return (lo + hi) // 2
    new = max(0, lo) if lo is not None else 0
    return min(new, hi) if hi is not None else new


def _feasible(ranks: List[int], bound: Dict[Tuple[int, int], int], reference: int) -> Optional[List[int]]:
    """Shifts (one per rank of ``ranks``) that satisfy every ``s_b - s_a <= w`` of ``bound``,
    with the reference's 0: shortest paths from a source joined to every rank by 0
    (Bellman-Ford over numpy columns), moved so the reference reads 0. Where the bounds
    contradict each other (a cycle of negative weight: clocks that drift apart under a
    method that fits no drift) there is no such point: None."""
    if not bound:
        return [0] * len(ranks)
    at = {r: k for k, r in enumerate(ranks)}
    src = np.array([at[a] for a, _ in bound], dtype=np.int64)
    dst = np.array([at[b] for _, b in bound], dtype=np.int64)
    w = np.array(list(bound.values()), dtype=np.int64)
    dist = np.zeros(len(ranks), dtype=np.int64)
    for _ in range(len(ranks) + 1):
        relaxed = dist.copy()
        np.minimum.at(relaxed, dst, dist[src] + w)
        if np.array_equal(relaxed, dist):
            return (dist - dist[at[reference]]).tolist()
        dist = relaxed
    return None


def _bounds(p: Points, aligned: Aligned) -> Dict[Tuple[int, int], int]:
    """{(a, b): w}, the tightest ``s_b - s_a <= w`` over every exchange of ranks a and b.

    A call whose callee side is longer than its caller's window (timestamp noise) fits no
    shift and is left out: it stays counted."""
    (t1, t2, t3, t4), (cs, ce), (c0, c1, s0, s1) = aligned
    bound: Dict[Tuple[int, int], int] = {}

    def tighten(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> None:
        for pa, pb, pw in zip(a.tolist(), b.tolist(), w.tolist()):
            if pa != pb and pw < bound.get((pa, pb), pw + 1):
                bound[pa, pb] = pw

    for caller, callee, lo, hi in ((p.rpc[:, 0], p.rpc[:, 1], t1 - t2, t4 - t3),
                                   (p.spans[:, 0], p.spans[:, 1], c0 - s0, c1 - s1)):
        fits = lo <= hi
        tighten(caller[fits], callee[fits], hi[fits])     # s_callee - s_caller <= hi
        tighten(callee[fits], caller[fits], -lo[fits])    # s_caller - s_callee <= -lo
    members = p.coll[:, 0]
    for k, start in enumerate(p.first.tolist()):
        end = p.first[k + 1] if k + 1 < len(p.first) else len(members)
        rank, s, e = members[start:end], cs[start:end], ce[start:end]
        # every member starts before every other ends: s_i - s_j <= e_j - s_i for i != j
        a, b = np.meshgrid(np.arange(len(rank)), np.arange(len(rank)), indexing="ij")
        tighten(rank[b.ravel()], rank[a.ravel()], (e[b] - s[a]).ravel())
    return bound


def _shifted(clock: ClockModel, ns: int) -> ClockModel:
    """``clock`` reading ``ns`` later on the reference clock, exactly: offset and anchor
    move together, so a drifting clock keeps its rate and every duration."""
    if not ns:
        return clock
    return replace(clock, offset_ns=clock.offset_ns - ns, anchor_ns=clock.anchor_ns + ns, corrections=[])
