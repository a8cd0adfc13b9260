"""Clocks for every rank from pairwise fits: the tightest path of links from the reference.

Unknowns are each rank's offset to the reference at the two ends of the merged trace
(``T0``, ``T1``, reference clock); between them the offset is linear, so this is the
clock model with drift. Every pair fit is a link ``o_b - o_a = g_ab ± bound_ab`` per end.
A rank's offset is the sum of the ``g`` along one path of links from the reference, and
its error is at most the sum of the bounds along that path; the path taken is the one
with the smallest such sum (Dijkstra, with a link's length its larger bound of the two
ends). Time and memory grow with the links, not with the ranks squared.

That path's bound is never larger than what any linear combination of the links could
guarantee: a weighted least-squares estimate ``o = C·y`` (``C·A = I``) makes each row of
``C`` a unit flow from the reference to the rank, so its rigorous bound ``Σ|C_re|·bound_e``
is a weighted sum of path lengths, at least the shortest. On a tree of links (a star, a
chain, one machine per rank pair) the path is the only one, and the offsets are those of
least squares. Ranks that never talk to the reference are aligned through the others; a
group of ranks with no path to it keeps its lowest rank's wall clock and says so.
"""

import heapq
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tracemerge.algorithms.groups import components
from tracemerge.clocks.bands import DRIFT_LIMIT_PPM, Constraints, PairFit, fit_pairs, stack, without_outliers
from tracemerge.clocks.clock import ClockModel

ROUNDS = 3  # re-fit with the time axes the previous round found (offsets up to seconds move them)

Pair = Tuple[int, int]
Bounds = Dict[int, Tuple[float, float]]


def solve(infos: Mapping[int, Any], reference: int, constraints: Mapping[Pair, Constraints],
          drift: Optional[bool] = None) -> Tuple[Dict[int, ClockModel], Dict[Pair, PairFit]]:
    """({rank: ClockModel}, {(a, b): PairFit}) for ``infos`` {rank: RankInfo}; fallbacks and
    unusable links are explained in the models' ``note``."""
    ranks = sorted(infos)
    models = {r: ClockModel(rank=r, method="wall") for r in ranks}
    bounds: Bounds = {r: (0.0, 0.0) for r in ranks}
    links = [(pair, c) for pair, c in constraints.items() if pair[0] in infos and pair[1] in infos]
    links, left_out = _robust(links, infos, drift)
    sides = stack([c for _, c in links]) if links else None
    fits: Dict[Pair, PairFit] = {}
    conflicts: List[Pair] = []
    for _ in range(ROUNDS):
        t0 = min(models[r].to_reference(infos[r].start_ns) for r in ranks)
        t1 = max(models[r].to_reference(infos[r].stop_ns) for r in ranks)
        fits, conflicts = _fit_links(links, sides, models, ranks, (t0, t1), drift)
        models, bounds = _solve_graph(ranks, reference, fits, models, bounds, (t0, t1))
    for (a, b), dropped in left_out.items():
        said = ", ".join(f"{name} by {by / 1e3:.1f} µs" for name, by in dropped[:5])
        more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
        many = len(dropped) > 1
        _note(models, (a, b), f"{len(dropped)} exchange{'s' if many else ''} of ranks {a} and {b} "
                              f"contradict{'' if many else 's'} the others and {'are' if many else 'is'} left out "
                              f"({said}{more}); the link is kept.")
    for a, b in conflicts:
        _note(models, (a, b), f"the exchanges of ranks {a} and {b} admit no linear clock (a clock stepped, or "
                              "records are mismatched); that link is not used.")
    return models, fits


def _fit_links(links: List[Tuple[Pair, Constraints]], sides: Any, models: Mapping[int, ClockModel],
               ranks: Sequence[int], span: Tuple[int, int], drift: Optional[bool]) -> Tuple[Dict[Pair, PairFit], List[Pair]]:
    """({pair: its feasible fit}, the pairs no linear clock fits) over ``span`` on the reference
    clock, each link read on its first rank's clock as ``models`` has it."""
    t0, t1 = span
    fits: Dict[Pair, PairFit] = {}
    conflicts: List[Pair] = []
    ends = {r: (models[r].to_local(t0), models[r].to_local(t1)) for r in ranks}  # once per rank, not per link
    spans = [ends[a] for (a, _), _ in links]
    for ((a, b), _), fit in zip(links, fit_pairs([c for _, c in links], sides, spans, drift)):
        if fit.feasible:
            fits[(a, b)] = fit
        else:
            conflicts.append((a, b))
    return fits, conflicts


def _note(models: Mapping[int, ClockModel], pair: Pair, note: str) -> None:
    """``note`` added to both ranks' models of ``pair``."""
    for r in pair:
        models[r].note = " ".join(filter(None, (models[r].note, note)))


def _robust(links: List[Tuple[Pair, Constraints]], infos: Mapping[int, Any], drift: Optional[bool]
            ) -> Tuple[List[Tuple[Pair, Constraints]], Dict[Pair, List[Tuple[str, float]]]]:
    """(``links`` with the exchanges that contradict the rest of their link left out,
    {pair: [(exchange, by ns)]}): a link no linear clock satisfies keeps what
    :func:`~tracemerge.clocks.bands.without_outliers` leaves, so one wrong exchange no
    longer costs the whole link."""
    if not links:
        return links, {}
    spans = [(infos[a].start_ns, infos[a].stop_ns) for (a, _), _ in links]
    fits = fit_pairs([c for _, c in links], stack([c for _, c in links]), spans, drift)
    out, left_out = [], {}
    for (pair, c), fit, span in zip(links, fits, spans):
        if not fit.feasible:
            cleaned, dropped = without_outliers(c, span, drift)
            if dropped:
                c, left_out[pair] = cleaned, dropped
        out.append((pair, c))
    return out, left_out


Found = Tuple[int, List[float], List[float], frozenset, int]  # root, offsets and bounds at both ends, kinds, samples


def _solve_graph(ranks: Sequence[int], reference: int, fits: Mapping[Pair, PairFit],
                 models: Mapping[int, ClockModel], bounds: Bounds,
                 span: Tuple[int, int]) -> Tuple[Dict[int, ClockModel], Bounds]:
    """One round over the graph of fitted links: offsets along each group's shortest paths
    from its root, tightened by every link, as each rank's ClockModel and bounds."""
    edges = list(fits.items())
    groups = components(ranks, fits)
    y = _link_offsets(edges, models, ranks, span)
    err = _link_errors(edges, groups, bounds)
    near = _neighbours(ranks, edges)
    found, roots = _along_paths(groups, reference, near, np.maximum(err.max(axis=1), 1.0).tolist(), edges, y, err)
    index = {r: i for i, r in enumerate(found)}
    path = np.array([v[1] for v in found.values()]).reshape(-1, 2)
    est, bound = _flat_kept(path, *_tightened(found, index, roots, edges, y, err))
    out: Dict[int, ClockModel] = {}
    out_bounds: Bounds = {}
    for r, (root, _, _, kinds, samples) in found.items():
        if r == root:
            out[r] = ClockModel(rank=r, method="reference" if r == reference else "wall",
                                error_bound_ns=0 if r == reference else None, note=roots[root])
            out_bounds[r] = (0.0, 0.0)
            continue
        b0, b1 = bound[index[r]].tolist()
        out[r] = _model(r, found[r], reference, est[index[r]].tolist(), [b0, b1], span,
                        sorted({p for p, _, _ in near[r]}), roots[root])
        out_bounds[r] = (b0, b1)
    return {r: out[r] for r in ranks}, out_bounds


def _link_offsets(edges: List[Tuple[Pair, PairFit]], models: Mapping[int, ClockModel], ranks: Sequence[int],
                  span: Tuple[int, int]) -> np.ndarray:
    """g at both ends for every link, read where each fit was made: the span (t0, t1) on a's
    clock as the previous round modelled it (PairFit.at for every link at once, the same
    float operations in the same order)."""
    t0, t1 = span
    fit_of = [f for _, f in edges]
    ends = {r: (models[r].to_local(t0), models[r].to_local(t1)) for r in ranks}
    anchor = np.array([f.anchor_ns for f in fit_of], np.int64).reshape(-1, 1)
    x = (np.array([ends[a] for (a, _), _ in edges], np.int64).reshape(-1, 2) - anchor).astype(np.float64)
    return np.array([f.offset_ns for f in fit_of]).reshape(-1, 1) + np.array(
        [f.drift_ppm for f in fit_of]).reshape(-1, 1) * 1e-6 * x


def _link_errors(edges: List[Tuple[Pair, PairFit]], groups: List[List[int]], bounds: Bounds) -> np.ndarray:
    """Each link's bound at both ends: its fit's, plus what a's own error where g is read
    moves it by (the steepest drift of a's group)."""
    group_of = {r: k for k, g in enumerate(groups) for r in g}
    a_of = [a for (a, _), _ in edges]
    slope: Dict[int, float] = {}  # the drift a group's errors in where g is read can move it by
    for a, (_, f) in zip(a_of, edges):
        slope[group_of[a]] = max(slope.get(group_of[a], DRIFT_LIMIT_PPM * 1e-6), abs(f.drift_ppm) * 1e-6)
    return (np.array([f.bounds or (0.0, 0.0) for _, f in edges], np.float64).reshape(-1, 2)  # feasible fits have bounds
            + np.array([slope[group_of[a]] for a in a_of]).reshape(-1, 1)
            * np.array([bounds.get(a, (0.0, 0.0)) for a in a_of], np.float64).reshape(-1, 2))


def _neighbours(ranks: Sequence[int], edges: List[Tuple[Pair, PairFit]]) -> Dict[int, List[Tuple[int, int, int]]]:
    """{rank: [(neighbour, link, sign)]}."""
    near: Dict[int, List[Tuple[int, int, int]]] = {r: [] for r in ranks}
    for e, ((a, b), _) in enumerate(edges):
        near[a].append((b, e, 1))
        near[b].append((a, e, -1))
    return near


def _along_paths(groups: List[List[int]], reference: int, near: Dict[int, List[Tuple[int, int, int]]],
                 length: List[float], edges: List[Tuple[Pair, PairFit]], y: np.ndarray,
                 err: np.ndarray) -> Tuple[Dict[int, Found], Dict[int, str]]:
    """({rank: Found} along the shortest paths from each group's root, {root: its note}): the
    reference roots its group, any other group its first rank, whose wall clock is trusted."""
    found: Dict[int, Found] = {}
    roots: Dict[int, str] = {}
    for group in groups:
        root = reference if reference in group else group[0]
        roots[root] = "" if root == reference else (
            f"no exchange links rank{'s' if len(group) > 1 else ''} {', '.join(map(str, group))} to reference "
            f"rank {reference}; rank {root}'s wall clock is trusted.")
        found[root] = (root, [0.0, 0.0], [0.0, 0.0], frozenset(), 0)
        for r, parent, e, sign in _shortest_paths(root, near, length):
            _, o, bd, kinds, samples = found[parent]
            f = edges[e][1]
            found[r] = (root, [o[0] + sign * y[e, 0], o[1] + sign * y[e, 1]], [bd[0] + err[e, 0], bd[1] + err[e, 1]],
                        kinds | f.kinds, samples + f.samples)
    return found, roots


def _tightened(found: Dict[int, Found], index: Dict[int, int], roots: Dict[int, str],
               edges: List[Tuple[Pair, PairFit]], y: np.ndarray, err: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(estimate, bound) per rank (by ``index``) at both ends: the paths' values, tightened by every link."""
    est = np.array([v[1] for v in found.values()]).reshape(-1, 2)
    bound = np.array([v[2] for v in found.values()]).reshape(-1, 2)
    if edges:
        a_at = np.array([index[a] for (a, _), _ in edges])
        b_at = np.array([index[b] for (_, b), _ in edges])
        fixed = np.array([index[r] for r in roots])
        for end in (0, 1):
            est[:, end], bound[:, end] = _tightest(a_at, b_at, y[:, end], err[:, end], est[:, end], bound[:, end],
                                                   fixed)
    return est, bound


def _flat_kept(path: np.ndarray, est: np.ndarray, bound: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(estimate, bound) per rank at both ends: constant where its path's links fitted no
    drift (a constant offset satisfied each link's exchanges: ``path`` the same at both
    ends) and one offset lies within both ends' ``est ± bound``. Each end is tightened on
    its own, by whichever links bound it best, so the two tightened centres differ by
    those links' noise too: read as drift, it reached hundreds of ppm on clocks that had
    none. The constant is the middle of the overlap, where a clock without drift is known
    to be; the true offset at each end, drifting or not, is still within the bound, taken
    from it to the far side of that end's interval. A path with drift keeps the tightened
    ends: other paths' links pin its slope better than its own alone."""
    low, high = est - bound, est + bound
    lo, hi = low.max(axis=1), high.min(axis=1)
    flat = (path[:, 0] == path[:, 1]) & (lo <= hi)
    centre = np.repeat(((lo + hi) / 2).reshape(-1, 1), 2, axis=1)
    return (np.where(flat[:, None], centre, est),
            np.where(flat[:, None], np.maximum(centre - low, high - centre), bound))


def _model(r: int, found: Found, reference: int, est: List[float], bound: List[float], span: Tuple[int, int],
           peers: List[int], note: str) -> ClockModel:
    """The ClockModel of a rank reached from its root: offset and drift from its offsets at both ends of ``span``."""
    (t0, t1), (o0, o1), (b0, b1) = span, est, bound
    root, _, _, kinds, samples = found
    return ClockModel(
        rank=r, method="+".join(sorted(kinds)), offset_ns=int(round(o0)),
        drift_ppm=float((o1 - o0) / (t1 - t0) * 1e6) if t1 > t0 else 0.0, anchor_ns=int(t0),
        error_bound_ns=math.ceil(max(b0, b1)) if root == reference else None,
        samples=int(samples), peers=peers, note=note)


def _tightest(a: np.ndarray, b: np.ndarray, y: np.ndarray, err: np.ndarray, est: np.ndarray, bound: np.ndarray,
              fixed: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(estimate, bound) per rank at one end from every link at once, not only the path's.

    Each link says ``|o_b - o_a - y| <= err``; with the roots' offsets fixed, these
    difference constraints confine each rank to ``[lowest, highest]``, the shortest-path
    distances of the constraint graph (Bellman-Ford, started from the path's ``est ±
    bound``, which every such path already beats or equals). The true offset lies in
    there, so its centre is off by at most half its width — never more than the path's
    bound, and the same numbers where no other link tightens it (a tree of links). Links
    that admit no offsets at all (a negative cycle: records that contradict each other
    beyond their bounds) leave the path's answer in place.
    """
    high = _relax(a, b, y, err, est + bound, fixed)
    low = _relax(a, b, -y, err, -(est - bound), fixed)
    if high is None or low is None:
        return est, bound
    low = -low
    moved = (high < est + bound) | (low > est - bound)
    return np.where(moved, (high + low) / 2, est), np.where(moved, (high - low) / 2, bound)


def _relax(a: np.ndarray, b: np.ndarray, y: np.ndarray, err: np.ndarray, dist: np.ndarray,
           fixed: np.ndarray) -> Optional[np.ndarray]:
    """Shortest distances from the roots ``fixed`` under ``o_b - o_a <= y + err`` and
    ``o_a - o_b <= err - y``, relaxed from the upper bounds ``dist``; None when they keep
    falling (a negative cycle). One numpy pass over the links per round."""
    tail, head, weight = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([y + err, err - y])
    for _ in range(len(dist) + 1):
        new = dist.copy()
        np.minimum.at(new, head, dist[tail] + weight)
        new[fixed] = dist[fixed]
        if not (new < dist).any():
            return dist
        dist = new
    return None


def _shortest_paths(root: int, near: Mapping[int, List[Tuple[int, int, int]]],
                    length: Sequence[float]) -> Iterable[Tuple[int, int, int, int]]:
    """(rank, parent, link, sign) of every rank reachable from ``root``, parents first, along
    the paths of least total ``length`` (Dijkstra; ties to the lower rank, then link)."""
    best = {root: 0.0}
    done = {root}
    heap: List[Tuple[float, int, int, int, int]] = []

    def push(r: int, d: float) -> None:
        for p, e, sign in near[r]:
            if p not in done and d + length[e] < best.get(p, math.inf):
                best[p] = d + length[e]
                heapq.heappush(heap, (d + length[e], p, e, r, sign))

    push(root, 0.0)
    while heap:
        d, r, e, parent, sign = heapq.heappop(heap)
        if r in done or d > best[r]:
            continue
        done.add(r)
        yield r, parent, e, sign
        push(r, d)
