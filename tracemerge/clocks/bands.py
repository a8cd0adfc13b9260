"""Pairwise clock estimation from causal constraints (NTP quadruples, collectives).

Every exchange between ranks ``a`` and ``b`` bounds the offset line of ``b`` relative to
``a``, ``g(x) = local_b - local_a`` at ``a``'s local time ``x``, modelled as
``g(x) = b0 + s*(x - anchor)``:

- an RPC a→b (t1, t4 on a; t2, t3 on b): ``g(t1) <= t2 - t1`` and ``g(t4) >= t3 - t4`` —
  NTP's ``θ ± δ/2`` for one sample, exact for any linear clock;
- an RPC b→a: ``g(t2) >= t1 - t2`` and ``g(t3) <= t4 - t3``;
- a synchronising collective (nobody leaves before everybody arrived):
  ``g(start_a) <= end_b - start_a`` and ``g(end_a) >= start_b - end_a``;
- a send a→b matched with its receive (a receive cannot end before its send started),
  one way only: ``g(send_start) <= recv_end - send_start``; a send b→a gives
  ``g(recv_end) >= send_start - recv_end``. One direction alone bounds ``g`` on one side:
  such a pair is used only where sends go both ways or other exchanges bound the other
  side (:func:`merge_one_way`).

The lines satisfying all of them form a convex set (Duda's two hulls). Intersecting them
is at least as tight as NTP's minimum-δ filter, and with a slope it fits drift too. The
estimate is the line through the thickest part of that set, so it satisfies every
constraint (no causality violation); its error bound is the largest distance to any
feasible line over the span it is used on, so it holds for the true clock whenever the
clock is linear with ``|drift| <= DRIFT_LIMIT_PPM``.

The band's top and bottom at a slope are a minimum and a maximum over one side's points,
which only the points on or next to that side's convex hull can decide; :func:`fit_pairs`
searches every pair at once over those points and gets, bit for bit, what a search of
each pair over all of its points gets.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

# Prior on relative drift: crystal oscillators are specified at ±100 ppm, so two clocks
# differ by at most ~200 ppm; the margin keeps the bound honest for poor clocks.
DRIFT_LIMIT_PPM = 500.0
# Rounding to integer ns in the clock model and in Kineto's µs-with-3-decimals timestamps.
ROUNDING_NS = 2
# Kinds of collective after which nobody leaves before everybody arrived; broadcast and
# scatter roots may leave early, so they bound nothing.
SYNCHRONISING = frozenset((
    "allreduce", "allgather", "allgatherbase", "allgatherintotensor", "allgathercoalesced",
    "allreducecoalesced", "reducescatter", "reducescatterbase", "reducescattertensor",
    "reducescattertensorcoalesced", "barrier", "alltoall", "alltoallbase", "alltoallv",
))
_ITERATIONS = 90  # golden-section steps: (0.618)^90 shrinks a ±500 ppm bracket below 1e-21


def synchronising(op: Any) -> bool:
    return str(op).lower().replace("_", "").replace(" ", "") in SYNCHRONISING


@dataclass
class Constraints:
    """Bounds on ``g`` at ``a``'s local times: ``g(x_upper) <= upper``, ``g(x_lower) >= lower``."""

    a: int
    b: int
    x_upper: np.ndarray   # int64 ns on a's clock
    upper: np.ndarray     # int64 ns
    x_lower: np.ndarray
    lower: np.ndarray
    widths: np.ndarray    # δ of each exchange (upper - lower of its own pair)
    kinds: frozenset      # {"rpc", "collective"}
    # what names each exchange (an RPC's rpc_id), where the k-th upper and lower bounds are
    # the k-th exchange's two: () where they are not (one-way sends) or no name is known
    names: tuple = ()

    @property
    def samples(self) -> int:
        return len(self.widths)

    def __add__(self, other: "Constraints") -> "Constraints":
        cat = np.concatenate
        named = self.exchanges and other.exchanges
        return Constraints(self.a, self.b, cat([self.x_upper, other.x_upper]), cat([self.upper, other.upper]),
                           cat([self.x_lower, other.x_lower]), cat([self.lower, other.lower]),
                           cat([self.widths, other.widths]), self.kinds | other.kinds,
                           _names(self) + _names(other) if named else ())

    @property
    def exchanges(self) -> bool:
        """Whether the k-th upper and lower bounds are one exchange's (an RPC's, a collective's)."""
        return len(self.x_upper) == len(self.x_lower) == len(self.widths)

    def without(self, drop: np.ndarray) -> "Constraints":
        """These constraints less the exchanges ``drop`` (a bool mask over them; only where
        :attr:`exchanges`) or, else, less the upper bounds ``drop[:n_upper]`` and the lower
        bounds ``drop[n_upper:]``."""
        if self.exchanges:
            keep_u = keep_l = ~drop
            keep_w = ~drop
        else:
            keep_u, keep_l = ~drop[:len(self.x_upper)], ~drop[len(self.x_upper):]
            k = min(int(keep_u.sum()), int(keep_l.sum()))
            keep_w = np.arange(len(self.widths)) < k
        names = tuple(n for n, d in zip(self.names, drop.tolist()) if not d) if self.names else ()
        return Constraints(self.a, self.b, self.x_upper[keep_u], self.upper[keep_u], self.x_lower[keep_l],
                           self.lower[keep_l], self.widths[keep_w], self.kinds, names)


def _names(c: "Constraints") -> tuple:
    """The exchanges' names of ``c``, or their positions where it has none."""
    return c.names if c.names else tuple(f"#{k}" for k in range(len(c.widths)))


def rpc_constraints(calls: Any) -> Dict[Tuple[int, int], "Constraints"]:
    """{(a, b): Constraints} with a < b from the complete, successful calls of an
    :class:`~tracemerge.correlate.match.RpcCalls`, pairs in the order of their first call."""
    use = calls.quadruples & (calls.caller != calls.callee)
    caller, callee = calls.caller[use], calls.callee[use]
    t1, t2, t3, t4 = calls.times[:, use]
    out = caller < callee  # a called b; else b called a
    a, b = np.where(out, caller, callee), np.where(out, callee, caller)
    rows = np.stack([np.where(out, t1, t3), np.where(out, t2 - t1, t4 - t3), np.where(out, t4, t2),
                     np.where(out, t3 - t4, t1 - t2)])
    order = np.lexsort((b, a))  # stable: a pair's calls stay in call order
    a, b, rows = a[order], b[order], rows[:, order]
    ids = [calls.first[i]["rpc_id"] for i in np.flatnonzero(use)[order].tolist()]
    start = _runs(a, b)
    groups = np.split(rows, start[1:], axis=1)
    ends = start.tolist()[1:] + [len(ids)]
    return {(int(a[i]), int(b[i])): _constraints((a[i], b[i]), groups[k], "rpc", tuple(ids[i:ends[k]]))
            for k, i in sorted(enumerate(start.tolist()), key=lambda g: order[g[1]])}


def p2p_constraints(p2p: Any) -> Dict[Tuple[int, int], "Constraints"]:
    """{(a, b): Constraints} with a < b from the matched sends and receives of a
    :class:`~tracemerge.correlate.match.PointToPoint`: a send from a is an upper bound, one
    from b a lower bound. Its ``widths`` pair the k-th of each direction (a round trip),
    so ``samples`` counts round trips; a pair with sends one way only has none."""
    use = p2p.sender != p2p.receiver
    s, r, start, end = p2p.sender[use], p2p.receiver[use], p2p.send_start[use], p2p.recv_end[use]
    out: Dict[Tuple[int, int], Constraints] = {}
    empty = np.zeros(0, np.int64)
    for a, b in sorted(set(zip(np.minimum(s, r).tolist(), np.maximum(s, r).tolist()))):
        up, down = (s == a) & (r == b), (s == b) & (r == a)
        x_upper, upper = start[up], end[up] - start[up]
        x_lower, lower = end[down], start[down] - end[down]
        k = min(len(upper), len(lower))
        out[(a, b)] = Constraints(a, b, x_upper, upper, x_lower, lower,
                                  upper[:k] - lower[:k] if k else empty, frozenset(("p2p",)))
    return out


def merge_one_way(constraints: Dict[Tuple[int, int], "Constraints"],
                  one_way: Dict[Tuple[int, int], "Constraints"]) -> Dict[Tuple[int, int], "Constraints"]:
    """``constraints`` with ``one_way``'s added: to a pair they already bound, or as a pair of
    its own where it bounds both sides (a fit needs a top and a bottom)."""
    out = dict(constraints)
    for pair, c in one_way.items():
        if pair in out:
            out[pair] = out[pair] + c
        elif len(c.upper) and len(c.lower):
            out[pair] = c
    return out


def collective_constraints(collectives: Any, ranks: Optional[Iterable[int]] = None) -> Dict[Tuple[int, int], "Constraints"]:
    """{(a, b): Constraints} with a < b from the synchronising collectives of a
    :class:`~tracemerge.correlate.match.Collectives`, pairs in the order of their first
    collective, then by rank; ``ranks``: only these ranks' records count.

    A collective of N members is N - 1 links, each member to the collective's hub, not the
    N² pairs of its members: the members' constraints reach each other through the hub,
    looser only by the hub's own time in the collective. So the hub is the member that
    arrives last, which waits least: the one with the shortest time in it. One hub serves a
    whole group (the member most often last, ties to the lower rank), so a group of N ranks
    is N - 1 links however many collectives it ran, each fitted from all of them; a
    collective its hub did not see end is hubbed by its own last arriver. Everything is a
    sort or a pass over the member entries: time and memory grow with the records.
    """
    row, rank, start, end = synchronised(collectives)
    if ranks is not None:
        keep = np.isin(rank, np.fromiter(ranks, np.int64))
        row, rank, start, end = row[keep], rank[keep], start[keep], end[keep]
    several = np.bincount(row, minlength=len(collectives))[row] > 1
    row, rank, start, end = row[several], rank[several], start[several], end[several]
    if not len(row):
        return {}
    groups: Dict[Any, int] = {}
    group = np.fromiter((groups.setdefault(tuple(k[:-1]), len(groups)) for k in collectives.keys), np.int64,
                        len(collectives))
    # each collective's last arriver: its shortest time in it, ties to the lower rank
    by_time = np.lexsort((rank, end - start, row))
    last = by_time[_runs(row[by_time])]  # one member entry per collective that has members
    # each group's hub: the rank most often last, ties to the lower rank
    g, r = group[row[last]], rank[last]
    pairs, times = np.unique(np.stack([g, r]), axis=1, return_counts=True)
    best = np.lexsort((pairs[1], -times, pairs[0]))
    best = best[_runs(pairs[0][best])]
    group_hub = np.full(len(groups), -1, np.int64)
    group_hub[pairs[0][best]] = pairs[1][best]
    # the member entry of each collective's hub: the group's hub where it saw it end, else its last arriver
    top = int(rank.max()) + 1
    code = row * top + rank  # sorted: the entries are by collective, then rank
    wanted = row[last] * top + group_hub[group[row[last]]]
    at = np.minimum(np.searchsorted(code, wanted), len(code) - 1)
    hub_entry = np.full(len(collectives), -1, np.int64)
    hub_entry[row[last]] = np.where(code[at] == wanted, at, last)
    h = hub_entry[row]
    member = np.flatnonzero(np.arange(len(row)) != h)
    h = h[member]
    x_lower = rank[member] < rank[h]  # the member is a, the hub b; else the hub is a
    a, b = np.where(x_lower, member, h), np.where(x_lower, h, member)
    rows = np.stack([start[a], end[b] - start[a], end[a], start[b] - end[a]])
    a, b, row = rank[a], rank[b], row[member]
    order = np.lexsort((row, b, a))  # a pair's collectives stay in their order
    a, b, row, rows = a[order], b[order], row[order], rows[:, order]
    starts = _runs(a, b)
    parts = np.split(rows, starts[1:], axis=1)
    found = sorted(range(len(starts)), key=lambda k: (row[starts[k]], a[starts[k]], b[starts[k]]))
    return {(int(a[starts[k]]), int(b[starts[k]])): _constraints((a[starts[k]], b[starts[k]]), parts[k], "collective")
            for k in found}


def _runs(*columns: np.ndarray) -> np.ndarray:
    """Where each run of equal values (in all ``columns`` at once) starts."""
    change = np.zeros(len(columns[0]), dtype=bool)
    change[:1] = True
    for c in columns:
        change[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(change)


def _ends(*columns: np.ndarray) -> np.ndarray:
    """Which points are the first or the last of a run of equal values (in all ``columns``)."""
    start = _runs(*columns)
    end = np.zeros(len(columns[0]), dtype=bool)
    end[start] = end[np.append(start[1:], len(end)) - 1] = True
    return end


def synchronised(collectives: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(collective, rank, start, end) of every member entry of a
    :class:`~tracemerge.correlate.match.Collectives` that saw a synchronising collective
    end, by collective, then rank."""
    sync = np.fromiter(map(synchronising, collectives.ops), bool, len(collectives))
    keep = collectives.member_ended & sync[collectives.member_row]
    row = collectives.member_row[keep]
    rank = np.array(collectives.ranks, np.int64)[collectives.member_col[keep]]
    order = np.lexsort((rank, row))
    return row[order], rank[order], collectives.member_start[keep][order], collectives.member_end[keep][order]


def _constraints(pair: Tuple[Any, Any], rows: np.ndarray, kind: str, names: tuple = ()) -> Constraints:
    """Constraints of ``rows`` (x_upper, upper, x_lower, lower) between the ranks of ``pair``."""
    xu, u, xl, lo = rows
    return Constraints(int(pair[0]), int(pair[1]), xu, u, xl, lo, u - lo, frozenset((kind,)), names)


def merge(*sets: Dict[Tuple[int, int], Constraints]) -> Dict[Tuple[int, int], Constraints]:
    """Union of {(a, b): Constraints} maps."""
    out: Dict[Tuple[int, int], Constraints] = {}
    for s in sets:
        for pair, c in s.items():
            out[pair] = out[pair] + c if pair in out else c
    return out


def stack(constraints: List[Constraints]) -> Tuple["Side", "Side"]:
    """(upper, lower): both sides of every Constraints in the list ``constraints``, for
    :func:`fit_pairs`. Sorting and merging them once lets every round of the graph solve
    reuse them."""
    return (_side([c.x_upper for c in constraints], [c.upper for c in constraints], np.minimum),
            _side([c.x_lower for c in constraints], [c.lower for c in constraints], np.maximum))


@dataclass
class Side:
    """One side of the constraints of many pairs, ``g(x) <= y`` (``reduce`` is minimum) or
    ``g(x) >= y`` (maximum), sorted by pair then x. Only points that can be the extreme are
    kept: at a shared x the looser bound never is, not even after rounding (rounding is
    monotone), and neither is a point between two neighbours of the same bound."""

    pair: np.ndarray      # index of each point's pair
    x: np.ndarray         # int64 ns on a's clock
    y: np.ndarray         # int64 ns
    gap: np.ndarray       # ns outside the pair's convex hull on the loose side (above the lower hull of a minimum)
    reduce: np.ufunc


def _side(xs: List[np.ndarray], ys: List[np.ndarray], reduce: np.ufunc) -> "Side":
    size = np.array([len(x) for x in xs])
    # each pair's exchanges are nearly in time order already, which a stable sort exploits
    order = np.concatenate([np.argsort(x, kind="stable") for x in xs]) + np.repeat(np.cumsum(size) - size, size)
    pair, x, y = np.repeat(np.arange(len(xs)), size), np.concatenate(xs)[order], np.concatenate(ys)[order]
    run = _runs(pair, x)
    pair, x, y = pair[run], x[run], reduce.reduceat(y, run)
    # between two points of one bound (exchanges of constant delay), y - s*x at any s, also
    # rounded, lies between theirs: only the ends of such a run can be the extreme
    end = _ends(pair, y)
    pair, x, y = pair[end], x[end], y[end]
    local = (x - x[_runs(pair)][pair]).astype(np.float64)  # the hull is the same from any origin
    gap = _hull_gap(pair, local, y.astype(np.float64) if reduce is np.minimum else -y.astype(np.float64))
    return Side(pair, x, y, gap, reduce)


def _hull_gap(group: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Height of each point above the lower convex hull of its group (points sorted by
    group, then strictly increasing x).

    Quickhull on every group at once: each step splits every hull edge at the deepest point
    below it; points above an edge cannot be vertices and leave. A vertex that rounding
    hides only leaves its neighbours' heights near 0. Every edge joins two of the points,
    so a point at height d lies above the set's lowest line ``y - s*x`` by at least d at
    every slope s (the chord is above the hull).
    """
    vertex = _ends(group)
    alive = np.arange(len(x))
    while True:
        depth = _below_chords(x[alive], y[alive], vertex[alive])
        deepest = np.maximum.reduceat(depth, np.flatnonzero(vertex[alive]))[np.cumsum(vertex[alive]) - 1]
        split = (depth > 0) & (depth == deepest)
        if not split.any():
            return -_below_chords(x, y, vertex)
        vertex[alive[split]] = True
        alive = alive[depth >= 0]


def _below_chords(x: np.ndarray, y: np.ndarray, vertex: np.ndarray) -> np.ndarray:
    """How far each point lies below the chord of the nearest vertices at or before and at
    or after it (0 at a vertex)."""
    i = np.arange(len(x))
    left = np.maximum.accumulate(np.where(vertex, i, 0))
    right = np.minimum.accumulate(np.where(vertex, i, len(x) - 1)[::-1])[::-1]
    dx = x[right] - x[left]
    frac = np.divide(x - x[left], dx, out=np.zeros(len(x)), where=dx > 0)
    return y[left] + (y[right] - y[left]) * frac - y


class _Lines:
    """Per search k, ``reduce`` over its points of ``y + s_k*m``: at ``m = -x`` the top
    (minimum) or bottom (maximum) of the feasible intercepts at slope s_k."""

    def __init__(self, y: np.ndarray, m: np.ndarray, search: np.ndarray, reduce: np.ufunc) -> None:
        self.y, self.m, self.search, self.reduce = y, m, search, reduce
        self.starts = _runs(search)

    def __call__(self, s: np.ndarray) -> np.ndarray:
        return self.reduce.reduceat(self.y + s[self.search] * self.m, self.starts)

    def __neg__(self) -> "_Lines":
        """The negated values, bit for bit (rounding is symmetric), as the other extreme."""
        return _Lines(-self.y, -self.m, self.search, np.maximum if self.reduce is np.minimum else np.minimum)

    def join(self, other: "_Lines") -> "_Lines":
        """One set of searches: ``other``'s follow ours (same extreme)."""
        return _Lines(np.concatenate([self.y, other.y]), np.concatenate([self.m, other.m]),
                      np.concatenate([self.search, other.search + len(self.starts)]), self.reduce)

    def at(self, ends: np.ndarray) -> "_Lines":
        """The same lines read at a's times ``ends`` (pairs × 2, from the anchor) instead of
        at the anchor: searches ``k`` and ``k + pairs`` are pair k at its two ends."""
        pairs = len(ends)
        return _Lines(np.tile(self.y, 2), np.concatenate([ends[self.search, i] + self.m for i in (0, 1)]),
                      np.concatenate([self.search, self.search + pairs]), self.reduce)


def _lines(side: "Side", anchors: np.ndarray, ends: np.ndarray, limit: float) -> _Lines:
    """The :class:`_Lines` of ``side`` relative to each pair's anchor, on the points that can
    decide its extreme at a slope within ``limit``: the searches below give bit for bit
    what they would on all points. The others lie outside the hull by more than twice
    what evaluating ``y + s*m`` can round."""
    x = (side.x - anchors[side.pair]).astype(np.float64)
    y = side.y.astype(np.float64)
    start = _runs(side.pair)
    scale = (np.maximum.reduceat(np.abs(y), start)
             + 2 * limit * (np.maximum.reduceat(np.abs(x), start) + np.abs(ends).max(axis=1)))
    # evaluating rounds by at most 2^-52 * scale; 2^-40 also covers the rounding of the gaps
    keep = side.gap <= (scale * 2.0 ** -40)[side.pair]
    return _Lines(y[keep], -x[keep], side.pair[keep], side.reduce)


def _width(top: _Lines, bottom: _Lines) -> Callable[[np.ndarray], np.ndarray]:
    """The band's width as a function of the slope per search: top - bottom, computed bit
    for bit as top + (-bottom) in one reduction over both."""
    band = top.join(-bottom)

    def width(s: np.ndarray) -> np.ndarray:
        both = band(np.concatenate([s, s]))
        return both[:len(s)] + both[len(s):]
    return width


def _golden(f: Callable[[np.ndarray], np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmax of unimodal functions on [a, b], one per element: ``f`` maps an array of
    points, one per search, to their values."""
    g = (np.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(_ITERATIONS):
        left = fc >= fd
        a, b = np.where(left, a, c), np.where(left, d, b)
        step = g * (b - a)
        p = np.where(left, b - step, a + step)
        fp = f(p)
        c, d, fc, fd = np.where(left, p, d), np.where(left, c, p), np.where(left, fp, fd), np.where(left, fc, fp)
    return (a + b) / 2


def _edge(width: Callable[[np.ndarray], np.ndarray], inside: np.ndarray, outside: np.ndarray) -> np.ndarray:
    """The end of the feasible slopes between ``inside`` (feasible) and ``outside``,
    bisected from outside so the bound errs large."""
    open_end = width(outside) >= 0
    start = outside
    for _ in range(_ITERATIONS):
        mid = (inside + outside) / 2
        ok = width(mid) >= 0
        inside, outside = np.where(ok, mid, inside), np.where(ok, outside, mid)
    return np.where(open_end, start, outside)


@dataclass
class PairFit:
    """``local_b = local_a + offset_ns + drift_ppm*1e-6*(local_a - anchor_ns)``, valid over the span fitted for."""

    a: int
    b: int
    offset_ns: float
    drift_ppm: float
    anchor_ns: int
    samples: int
    min_delta_ns: int           # the tightest single exchange (NTP's clock-filter sample)
    feasible: bool              # some line satisfies every constraint
    kinds: frozenset
    bounds: Optional[tuple] = None  # largest |g_true - g| over feasible lines at the span's two ends; None when infeasible

    def at(self, x_ns: Any) -> Any:
        """g at a's local time(s) x (float ns)."""
        return self.offset_ns + self.drift_ppm * 1e-6 * (np.asarray(x_ns, dtype=np.float64) - self.anchor_ns) \
            if np.ndim(x_ns) else self.offset_ns + self.drift_ppm * 1e-6 * (x_ns - self.anchor_ns)


def fit_pairs(constraints: List[Constraints], sides: Optional[Tuple["Side", "Side"]], spans: List[Tuple[int, int]],
              drift: Optional[bool] = None, limit_ppm: float = DRIFT_LIMIT_PPM) -> List["PairFit"]:
    """[PairFit]: the offset line of ``c.b`` relative to ``c.a`` for each Constraints ``c``
    in the list ``constraints`` (``sides`` = :func:`stack` of them), for use over its span
    (a's clock) in ``spans``.

    The feasible lines form a band whose width is concave in the slope; the estimate is
    the line through its thickest part, and a pair's bound is the largest distance to any
    feasible line at the span's ends. ``drift``: True fits a slope, False holds it at 0,
    None fits it only where it is significant: where no constant offset satisfies every
    exchange (the feasible slopes exclude 0), else the offset is constant. A slope fitted
    where 0 is feasible is the exchanges' delays leaning, not drift (delays that lean like
    350 ppm on a constant offset were fitted 368 ppm: tests/test_drift_and_order.py), and
    the bound of either estimate holds for any feasible line. Every pair is searched at
    once, element by element.
    """
    if not constraints or sides is None:
        return []
    anchors = [(int(lo) + int(hi)) // 2 for lo, hi in spans]
    ends = np.array([[float(x - anchor) for x in span] for span, anchor in zip(spans, anchors)])
    limit = limit_ppm * 1e-6
    top, bottom = (_lines(side, np.array(anchors, dtype=np.int64), ends, limit) for side in sides)
    n = len(constraints)
    width = _width(top, bottom)
    full = np.full(n, limit)
    s_mid = _golden(width, -full, full)
    feasible = width(s_mid) >= 0
    # both ends of the feasible slopes in one bisection: searches k and k + n are pair k's
    edges = _edge(_width(top.at(np.zeros((n, 2))), bottom.at(np.zeros((n, 2)))), np.tile(s_mid, 2),
                  np.concatenate([-full, full]))
    slopes = np.where(feasible, edges.reshape(2, n), s_mid)
    # the highest and the lowest feasible g at each end, all as maxima of one search
    extreme = top.at(ends).join(-bottom.at(ends))
    g = extreme(_golden(extreme, np.tile(slopes[0], 4), np.tile(slopes[1], 4))).reshape(2, 2, n)
    extremes = zip((-g[1]).T.tolist(), g[0].T.tolist())
    zero = np.zeros(n)
    b0_mid, b0_zero = (((top(s) + bottom(s)) / 2).tolist() for s in (s_mid, zero))
    width_zero = width(zero).tolist()
    fits = []
    for k, c in enumerate(constraints):
        ok = bool(feasible[k])
        min_delta = int(c.widths.min()) if len(c.widths) else 0
        lo, hi = next(extremes)

        def candidate(b0: float, s: float) -> PairFit:
            fit = PairFit(c.a, c.b, b0, s * 1e6, anchors[k], c.samples, min_delta, ok, c.kinds)
            if ok:
                est = [fit.at(x) for x in spans[k]]
                fit.bounds = tuple(max(h - e, e - low, 0.0) + ROUNDING_NS for low, h, e in zip(lo, hi, est))
            return fit

        sloped = candidate(b0_mid[k], float(s_mid[k]))
        if drift is True or (drift is None and not ok):
            fits.append(sloped)
            continue
        flat = candidate(b0_zero[k], 0.0)
        fits.append(flat if drift is False or width_zero[k] >= 0 else sloped)
    return fits


# At most this share of a pair's exchanges (and at least OUTLIERS_MIN) is left out as
# contradicting the rest; a pair that needs more admits no linear clock.
OUTLIERS_SHARE = 0.05
OUTLIERS_MIN = 3


def without_outliers(c: Constraints, span: Tuple[int, int],
                     drift: Optional[bool] = None) -> Tuple[Constraints, List[Tuple[str, float]]]:
    """(``c`` less the exchanges that contradict the rest, [(name, by ns)]).

    While no line satisfies them all: the exchanges the least infeasible line (the band's
    thickest, of negative width) violates are the suspects; each is left out in turn, and
    the one whose absence leaves the thickest band (the most room between the rest: a good
    exchange left out in its place only lets the line tilt to the edge of what the others
    allow) goes, up to OUTLIERS_SHARE of them. An exchange's violation is how far the line
    passes above its upper or below its lower bound. ``span``: a's clock range the fit is
    for. Returns ``c`` and [] when it was feasible, or when no such removal makes it so."""
    most = max(OUTLIERS_MIN, int(OUTLIERS_SHARE * max(len(c.x_upper), len(c.x_lower))))
    out = c
    dropped: List[Tuple[str, float]] = []
    fit = fit_pairs([out], stack([out]), [span], drift)[0]
    while not fit.feasible and len(dropped) < most:
        score = _violations(out, fit)
        names = _names(out) if out.exchanges else tuple(f"upper bound at {x}" for x in out.x_upper.tolist()) + tuple(
            f"lower bound at {x}" for x in out.x_lower.tolist())
        suspects = [k for k in np.argsort(-score)[:SUSPECTS].tolist() if score[k] > 0]
        if not suspects:
            break
        trials = [out.without(np.arange(len(score)) == k) for k in suspects]
        fits = fit_pairs(trials, stack(trials), [span] * len(trials), drift)
        room = [float(-_violations(t, f).max()) if f.feasible else -np.inf for t, f in zip(trials, fits)]
        best = int(np.argmax(room)) if max(room) > -np.inf else 0
        dropped.append((names[suspects[best]], float(score[suspects[best]])))
        out, fit = trials[best], fits[best]
    return (out, dropped) if fit.feasible else (c, [])


SUSPECTS = 8  # the most violated exchanges tried, each left out in turn


def _violations(c: Constraints, fit: "PairFit") -> np.ndarray:
    """How far ``fit``'s line passes above each upper and below each lower bound of ``c``
    (negative: inside by that much): per exchange where :attr:`Constraints.exchanges`, else
    the upper bounds' then the lower bounds'."""
    above = fit.at(c.x_upper.astype(np.float64)) - c.upper
    below = c.lower - fit.at(c.x_lower.astype(np.float64))
    return np.maximum(above, below) if c.exchanges else np.concatenate([above, below])
