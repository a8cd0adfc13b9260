"""Clocks for every rank from pairwise fits: weighted least squares over the graph of ranks.

Unknowns are each rank's offset to the reference at the two ends of the merged trace
(``T0``, ``T1``, reference clock); between them the offset is linear, so this is the
clock model with drift. Every pair fit is one equation ``o_b - o_a = g_ab`` per end,
weighted by ``1/bound²``. The solution is linear in the measurements, ``o = C·y``, so a
rank's error is ``Σ C_re·err_e`` and ``Σ |C_re|·bound_e`` bounds it rigorously — for a
chain of ranks that is the sum of the bounds along the path. Ranks that never talk to
the reference are aligned through the others; a group of ranks with no path to it keeps
its lowest rank's wall clock and says so.
"""

import math

import numpy as np

from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.bands import DRIFT_LIMIT_PPM, fit_pairs, stack

ROUNDS = 3  # re-fit with the time axes the previous round found (offsets up to seconds move them)


def components(ranks, edges):
    """Connected groups of ``ranks`` (each sorted) under ``edges`` {(a, b): ...}."""
    parent = {r: r for r in ranks}

    def find(r):
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for a, b in edges:
        if a in parent and b in parent:
            parent[find(a)] = find(b)
    groups = {}
    for r in ranks:
        groups.setdefault(find(r), []).append(r)
    return [sorted(g) for g in groups.values()]


def solve(infos, reference, constraints, drift=None):
    """({rank: ClockModel}, {(a, b): PairFit}) for ``infos`` {rank: RankInfo}; fallbacks and
    unusable links are explained in the models' ``note``."""
    ranks = sorted(infos)
    models = {r: ClockModel(rank=r, method="wall") for r in ranks}
    bounds = {r: (0.0, 0.0) for r in ranks}
    links = [(pair, c) for pair, c in constraints.items() if pair[0] in infos and pair[1] in infos]
    sides = stack([c for _, c in links]) if links else None
    for _ in range(ROUNDS):
        t0 = min(models[r].to_reference(infos[r].start_ns) for r in ranks)
        t1 = max(models[r].to_reference(infos[r].stop_ns) for r in ranks)
        fits, conflicts = {}, []
        spans = [(models[a].to_local(t0), models[a].to_local(t1)) for (a, _), _ in links]
        for ((a, b), _), fit in zip(links, fit_pairs([c for _, c in links], sides, spans, drift)):
            if fit.feasible:
                fits[(a, b)] = fit
            else:
                conflicts.append((a, b))
        models, bounds = _solve_graph(ranks, reference, fits, models, bounds, (t0, t1))
    for a, b in conflicts:
        for r in (a, b):
            models[r].note = " ".join(filter(None, (models[r].note, (
                f"the exchanges of ranks {a} and {b} admit no linear clock (a clock stepped, or records "
                "are mismatched); that link is not used."))))
    return models, fits


def _solve_graph(ranks, reference, fits, models, bounds, span):
    t0, t1 = span
    out, out_bounds = {}, {}
    for group in components(ranks, fits):
        root = reference if reference in group else group[0]
        note = "" if root == reference else (
            f"no exchange links rank{'s' if len(group) > 1 else ''} {', '.join(map(str, group))} to reference "
            f"rank {reference}; rank {root}'s wall clock is trusted.")
        unknown = [r for r in group if r != root]
        col = {r: i for i, r in enumerate(unknown)}
        members = set(group)
        edges = [(pair, f) for pair, f in fits.items() if pair[0] in members]
        ends = []
        for end, t in enumerate((t0, t1)):
            offset = {r: models[r].to_local(t) - t for r in group}
            y = np.array([f.at(t + offset[a]) for (a, b), f in edges])
            slope = max(DRIFT_LIMIT_PPM * 1e-6, *(abs(f.drift_ppm) * 1e-6 for _, f in edges)) if edges else 0
            # each fit was made for the span (t0, t1) read on a's clock, so t + offset[a] is its end
            err = np.array([f.bounds[end] + slope * _bound_at(bounds, a, t, t0) for (a, b), f in edges])
            ends.append((y, err))
        weight = 1.0 / np.maximum(np.maximum(ends[0][1], ends[1][1]), 1.0) ** 2
        root_clock = ClockModel(rank=root, method="reference" if root == reference else "wall",
                                error_bound_ns=0 if root == reference else None, note=note)
        out[root], out_bounds[root] = root_clock, (0.0, 0.0)
        if not unknown:
            continue
        a_mat = np.zeros((len(edges), len(unknown)))
        for e, ((a, b), _) in enumerate(edges):
            if b in col:
                a_mat[e, col[b]] = 1.0
            if a in col:
                a_mat[e, col[a]] = -1.0
        sw = np.sqrt(weight)
        coef = np.linalg.pinv(a_mat * sw[:, None]) @ np.diag(sw)  # o = coef @ y
        sol = [(coef @ y, np.abs(coef) @ err) for y, err in ends]
        for r in unknown:
            i = col[r]
            used = [f for e, (_, f) in enumerate(edges) if abs(coef[i, e]) > 1e-12]
            o0, o1 = sol[0][0][i], sol[1][0][i]
            b0, b1 = sol[0][1][i], sol[1][1][i]
            kinds = sorted(set().union(*(f.kinds for f in used)))
            peers = sorted({p for (a, b), _ in edges if r in (a, b) for p in (a, b) if p != r})
            out[r] = ClockModel(
                rank=r, method="+".join(kinds), offset_ns=int(round(o0)),
                drift_ppm=float((o1 - o0) / (t1 - t0) * 1e6) if t1 > t0 else 0.0, anchor_ns=int(t0),
                error_bound_ns=math.ceil(max(b0, b1)) if root == reference else None,
                samples=int(sum(f.samples for f in used)), peers=peers, note=note)
            out_bounds[r] = (b0, b1)
    return out, out_bounds


def _bound_at(bounds, rank, t, t0):
    """The previous round's bound of ``rank`` at end ``t``: errors on a's axis move where g is read."""
    b = bounds.get(rank, (0.0, 0.0))
    return b[0] if t == t0 else b[1]
