"""Pairwise clock estimation from causal constraints (NTP quadruples, collectives).

Every exchange between ranks ``a`` and ``b`` bounds the offset line of ``b`` relative to
``a``, ``g(x) = local_b - local_a`` at ``a``'s local time ``x``, modelled as
``g(x) = b0 + s*(x - anchor)``:

- an RPC a→b (t1, t4 on a; t2, t3 on b): ``g(t1) <= t2 - t1`` and ``g(t4) >= t3 - t4`` —
  NTP's ``θ ± δ/2`` for one sample, exact for any linear clock;
- an RPC b→a: ``g(t2) >= t1 - t2`` and ``g(t3) <= t4 - t3``;
- a synchronising collective (nobody leaves before everybody arrived):
  ``g(start_a) <= end_b - start_a`` and ``g(end_a) >= start_b - end_a``.

The lines satisfying all of them form a convex set (Duda's two hulls). Intersecting them
is at least as tight as NTP's minimum-δ filter, and with a slope it fits drift too. The
estimate is the line through the thickest part of that set, so it satisfies every
constraint (no causality violation); its error bound is the largest distance to any
feasible line over the span it is used on, so it holds for the true clock whenever the
clock is linear with ``|drift| <= DRIFT_LIMIT_PPM``.
"""

from dataclasses import dataclass
from typing import Optional

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


def synchronising(op):
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

    @property
    def samples(self):
        return len(self.widths)

    def __add__(self, other):
        cat = np.concatenate
        return Constraints(self.a, self.b, cat([self.x_upper, other.x_upper]), cat([self.upper, other.upper]),
                           cat([self.x_lower, other.x_lower]), cat([self.lower, other.lower]),
                           cat([self.widths, other.widths]), self.kinds | other.kinds)


def _arrays(rows):
    return [np.array(col, dtype=np.int64) for col in zip(*rows)] if rows else [np.zeros(0, np.int64)] * 4


def rpc_constraints(calls):
    """{(a, b): Constraints} with a < b from complete, successful RpcCalls."""
    rows = {}
    for c in calls:
        if not c.complete or c.status != "ok" or c.caller == c.callee:
            continue
        t1, t2, t3, t4 = c.send_ns, c.start_ns, c.end_ns, c.complete_ns
        if c.caller < c.callee:
            rows.setdefault((c.caller, c.callee), []).append((t1, t2 - t1, t4, t3 - t4))
        else:
            rows.setdefault((c.callee, c.caller), []).append((t3, t4 - t3, t2, t1 - t2))
    return {pair: _constraints(pair, r, "rpc") for pair, r in rows.items()}


def collective_constraints(matches):
    """{(a, b): Constraints} with a < b from collectives every member saw complete."""
    rows = {}
    for m in matches:
        if not synchronising(m.op):
            continue
        ranks = sorted(m.end_ns)
        for i, a in enumerate(ranks):
            for b in ranks[i + 1:]:
                rows.setdefault((a, b), []).append(
                    (m.start_ns[a], m.end_ns[b] - m.start_ns[a], m.end_ns[a], m.start_ns[b] - m.end_ns[a]))
    return {pair: _constraints(pair, r, "collective") for pair, r in rows.items()}


def _constraints(pair, rows, kind):
    xu, u, xl, lo = _arrays(rows)
    return Constraints(pair[0], pair[1], xu, u, xl, lo, u - lo, frozenset((kind,)))


def merge(*sets):
    """Union of {(a, b): Constraints} maps."""
    out = {}
    for s in sets:
        for pair, c in s.items():
            out[pair] = out[pair] + c if pair in out else c
    return out


class Band:
    """The feasible lines of one pair, in coordinates relative to ``anchor`` (float ns)."""

    def __init__(self, c, anchor, limit_ppm=DRIFT_LIMIT_PPM):
        self.anchor = int(anchor)
        self.xu = (c.x_upper - self.anchor).astype(np.float64)
        self.u = c.upper.astype(np.float64)
        self.xl = (c.x_lower - self.anchor).astype(np.float64)
        self.lo = c.lower.astype(np.float64)
        self.limit = limit_ppm * 1e-6

    def top(self, s):
        """Largest feasible b0 at slope s."""
        return float(np.min(self.u - s * self.xu))

    def bottom(self, s):
        return float(np.max(self.lo - s * self.xl))

    def width(self, s):
        return self.top(s) - self.bottom(s)

    def thickest(self):
        """(slope, width) where the band of feasible b0 is widest (concave in slope)."""
        s = _golden(lambda s: self.width(s), -self.limit, self.limit)
        return s, self.width(s)

    def slopes(self, s_mid):
        """[lo, hi] of the feasible slopes, bracketing outward (so the bound errs large)."""
        def edge(inside, outside):
            if self.width(outside) >= 0:
                return outside
            for _ in range(_ITERATIONS):
                mid = (inside + outside) / 2
                inside, outside = (mid, outside) if self.width(mid) >= 0 else (inside, mid)
            return outside
        return edge(s_mid, -self.limit), edge(s_mid, self.limit)

    def extremes(self, x, slopes):
        """(min, max) of g(x) over feasible lines; x relative to the anchor."""
        s_hi = _golden(lambda s: float(np.min(self.u + s * (x - self.xu))), *slopes)
        s_lo = _golden(lambda s: -float(np.max(self.lo + s * (x - self.xl))), *slopes)
        return float(np.max(self.lo + s_lo * (x - self.xl))), float(np.min(self.u + s_hi * (x - self.xu)))


def _golden(f, a, b):
    """argmax of a unimodal f on [a, b]."""
    g = (np.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(_ITERATIONS):
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


@dataclass
class PairFit:
    """``local_b = local_a + offset_ns + drift_ppm*1e-6*(local_a - anchor_ns)``, valid over ``span``."""

    a: int
    b: int
    offset_ns: float
    drift_ppm: float
    anchor_ns: int
    samples: int
    min_delta_ns: int           # the tightest single exchange (NTP's clock-filter sample)
    feasible: bool              # some line satisfies every constraint
    kinds: frozenset
    band: Optional[Band] = None
    slope_range: tuple = (0.0, 0.0)

    def at(self, x_ns):
        """g at a's local time(s) x (float ns)."""
        return self.offset_ns + self.drift_ppm * 1e-6 * (np.asarray(x_ns, dtype=np.float64) - self.anchor_ns) \
            if np.ndim(x_ns) else self.offset_ns + self.drift_ppm * 1e-6 * (x_ns - self.anchor_ns)

    def error_bound(self, x_ns):
        """Largest |g_true(x) - g(x)| over feasible lines; None when the constraints conflict."""
        if not self.feasible:
            return None
        x = float(x_ns - self.band.anchor)
        lo, hi = self.band.extremes(x, self.slope_range)
        est = self.at(x_ns)
        return max(hi - est, est - lo, 0.0) + ROUNDING_NS


def fit_pair(c, span, drift=None, limit_ppm=DRIFT_LIMIT_PPM):
    """Fit the offset line of ``c.b`` relative to ``c.a`` for use over ``span`` (a's clock).

    ``drift``: True fits a slope, False holds it at 0, None fits it when that makes the
    bound over ``span`` smaller (the samples span enough time to pin the slope down).
    """
    anchor = (int(span[0]) + int(span[1])) // 2
    band = Band(c, anchor, limit_ppm)
    s_mid, width = band.thickest()
    feasible = width >= 0
    slopes = band.slopes(s_mid) if feasible else (s_mid, s_mid)
    min_delta = int(c.widths.min()) if len(c.widths) else 0

    def candidate(s):
        b0 = (band.top(s) + band.bottom(s)) / 2
        return PairFit(c.a, c.b, b0, s * 1e6, anchor, c.samples, min_delta, feasible, c.kinds, band, slopes)

    if drift is True or (drift is None and not feasible):
        return candidate(s_mid)
    flat = candidate(0.0)
    if drift is False or band.width(0.0) < 0:
        return flat if drift is False else candidate(s_mid)
    sloped = candidate(s_mid)
    worst = [max(f.error_bound(x) for x in span) for f in (flat, sloped)]
    return sloped if worst[1] < worst[0] else flat
