"""Builtins sent as themselves paired jointly with the clocks of the machines they join.

A builtin's callee side is an op of the callee's trace, found inside the call's window on
the callee's clock (:mod:`tracemerge.correlate.native_calls`); across machines that window
needs the clocks, and the clocks need the pairs. So both are estimated together:

1. **Windows before any pair**: every exchange the job already has (wrapped calls,
   Python functions, collectives, sends) is fitted per link (:func:`fitted_windows`);
   links without one take the readings the callees' answers carried, a prior.
2. **Pair** (:func:`~tracemerge.correlate.native_calls.pair_native`): only the pairs that
   every maximum matching forces.
3. **Fit**: the paired calls are exchanges like any other (send, op start, op end,
   completion); with the job's own, each link (caller machine, callee machine) is fitted
   — offset and drift (:func:`~tracemerge.clocks.bands.fit_pairs`), the exchanges that
   contradict the rest left out (:func:`~tracemerge.clocks.bands.without_outliers`) — on
   pieces of its calls' time, so each piece's window is as tight as the exchanges near it
   allow; a link with no exchange of its own takes the clock graph's path through other
   ranks (:func:`~tracemerge.clocks.graph.solve` with the callee as reference).
4. **Re-window and re-pair** until the pairs no longer change (at most :data:`ROUNDS`).

Each window's bound holds for any linear clock within the drift limit whose exchanges are
right, and grows with that limit outside the piece it was fitted on; only pairs forced
under it feed the next fit, so one round's windows never rest on a guess.
"""

from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tracemerge.algorithms.groups import components
from tracemerge.clocks.bands import (
    DRIFT_LIMIT_PPM,
    Constraints,
    PairFit,
    collective_constraints,
    fit_pairs,
    merge,
    merge_one_way,
    p2p_constraints,
    rpc_constraints,
    stack,
    without_outliers,
)
from tracemerge.clocks.graph import solve
from tracemerge.clocks.methods import _remapped, machines
from tracemerge.correlate.match import correlate
from tracemerge.correlate.native_calls import Link, Pairing, Window, native_links, pair_native, same_boot

ROUNDS = 6     # pair -> fit rounds; each only adds pairs the previous windows left open
PIECES = 8     # a link's calls' time in this many pieces, each fitted for its own window


def pair_jointly(infos: Sequence[Any]) -> Pairing:
    """:func:`~tracemerge.correlate.native_calls.pair_native` with windows from the clocks
    fitted, round by round, to the pairs found (see the module's doc). Where every builtin
    link joins ranks of one machine there is nothing to fit: one pass."""
    by_rank = {info.rank: info for info in infos}
    links = native_links(infos)
    cross = {link: recs for link, recs in links.items() if not same_boot(by_rank[link[0]], by_rank[link[1]])}
    if not cross:
        return pair_native(infos, growth_ppm=DRIFT_LIMIT_PPM)
    windows = fitted_windows(infos, infos, cross)
    found: Optional[frozenset] = None
    pairing = Pairing()
    for _ in range(ROUNDS):
        pairing = pair_native(infos, windows, growth_ppm=DRIFT_LIMIT_PPM)
        pairs = frozenset(pairing.pairs.items())
        if pairs == found:
            break
        found = pairs
        with_pairs = [replace(info, remote_rpcs=info.remote_rpcs + pairing.records.get(info.rank, []))
                      for info in infos]
        windows = fitted_windows(infos, with_pairs, cross)
    return pairing


def fitted_windows(infos: Sequence[Any], joined: Sequence[Any],
                   links: Mapping[Link, List[Dict[str, Any]]]) -> Dict[Link, List[Window]]:
    """{(caller, callee): [Window]} of ``links`` from the exchanges of ``joined`` (``infos``
    with the callee sides found so far), the ranks of one machine pooled as one clock."""
    by_rank = {info.rank: info for info in infos}
    reference = min(by_rank)
    rep = machines(by_rank, reference)
    job = correlate(list(joined))
    calls = job.rpcs.calls
    pooled = replace(calls, caller=_remapped(calls.caller, rep), callee=_remapped(calls.callee, rep))
    p2p = replace(job.p2p, sender=_remapped(job.p2p.sender, rep), receiver=_remapped(job.p2p.receiver, rep))
    constraints = merge_one_way(merge(rpc_constraints(pooled), collective_constraints(job.collectives, set(rep.values()))),
                                p2p_constraints(p2p))
    out: Dict[Link, List[Window]] = {}
    through_graph: Dict[int, List[Link]] = {}
    for link, recs in links.items():
        a, b = rep[link[0]], rep[link[1]]
        pair = (min(a, b), max(a, b))
        if pair not in constraints:
            through_graph.setdefault(b, []).append(link)
            continue
        sends = np.sort(np.array([r["send_ns"] for r in recs], np.int64))
        out[link] = _direct(constraints[pair], sends, a < b, by_rank[pair[0]])
    heads = {r: by_rank[r] for r in sorted(set(rep.values()))}
    component = {m: k for k, group in enumerate(components(heads, constraints)) for m in group}
    for callee, waiting in sorted(through_graph.items()):
        # a solve is of the whole graph: a callee no caller of its links reaches through it
        # (before any pair, every builtin-only link) would get unbounded models only
        waiting = [link for link in waiting if component[rep[link[0]]] == component[callee]]
        if not waiting:
            continue
        models, _ = solve(heads, callee, constraints)
        for link in waiting:
            model = models[rep[link[0]]]
            if model.error_bound_ns is None:
                continue
            # local_caller = y + offset + drift*(y - anchor) at the callee's time y
            span = (by_rank[callee].start_ns, by_rank[callee].stop_ns)
            out[link] = [_from_callee_line(float(model.offset_ns), model.drift_ppm * 1e-6, model.anchor_ns,
                                           float(model.error_bound_ns), span)]
    return out


def _direct(c: Constraints, sends: np.ndarray, caller_is_a: bool, a: Any) -> List[Window]:
    """The windows of one link from its own exchanges ``c``: one fit per piece of its calls'
    sends (``sends``, on the caller's clock), read on the caller's side. ``caller_is_a``:
    the constraints' ``a`` is the caller's machine; else they bound the caller's clock
    minus the callee's at the callee's time. ``a``: the constraints' ``a`` rank."""
    whole = (a.start_ns, a.stop_ns)
    c, _ = without_outliers(c, whole)
    first = fit_pairs([c], stack([c]), [whole])[0]
    if not first.feasible:
        return []
    if caller_is_a:
        edges = _pieces(sends)
    else:  # the pieces' ends on the callee's clock: y = x - g(y), g the caller's minus the callee's
        edges = [_callee_time(first, x) for x in _pieces(sends)]
    spans = list(zip(edges[:-1], edges[1:])) or [whole]
    fits = fit_pairs([c] * len(spans), stack([c] * len(spans)), spans)
    out = []
    for fit, span in zip(fits, spans):
        if not fit.feasible or fit.bounds is None:
            continue
        bound = float(max(fit.bounds))
        if caller_is_a:
            # outside its piece the line is off by at most the true drift's difference from its own
            out.append(Window(fit.offset_ns, bound, int(span[0]), int(span[1]), drift_ppm=fit.drift_ppm,
                              anchor_ns=fit.anchor_ns, growth_ppm=DRIFT_LIMIT_PPM + abs(fit.drift_ppm),
                              source="fit"))
        else:
            out.append(_from_callee_line(fit.offset_ns, fit.drift_ppm * 1e-6, fit.anchor_ns, bound, span))
    return out


def _pieces(sends: np.ndarray) -> List[int]:
    """Up to PIECES + 1 edges at quantiles of ``sends`` (first and last included)."""
    if not len(sends):
        return []
    edges = np.quantile(sends, np.linspace(0, 1, min(PIECES, len(sends)) + 1), method="nearest")
    return sorted({int(e) for e in edges.tolist()} | {int(sends[0]), int(sends[-1]) + 1})


def _callee_time(fit: PairFit, x: int) -> int:
    """The callee's time ``y`` of the caller's ``x``, where ``fit`` is the caller's clock
    minus the callee's at ``y`` (x = y + g(y), g linear: solved exactly)."""
    s = fit.drift_ppm * 1e-6
    return int(round((x - fit.offset_ns + s * fit.anchor_ns) / (1 + s)))


def _from_callee_line(offset: float, slope: float, anchor: int, bound: float, span: Tuple[int, int]) -> Window:
    """The window of a line fitted the other way round: ``local_caller = y + offset +
    slope*(y - anchor)`` at the callee's time ``y`` over ``span`` (callee's clock). The
    callee's clock minus the caller's at the caller's ``x`` is ``y - x``, linear in x."""
    x_anchor = anchor + offset            # the caller's time of y = anchor
    drift = (1 / (1 + slope) - 1) * 1e6   # d(y - x)/dx

    def at_callee(y: int) -> int:
        return int(round(y + offset + slope * (y - anchor)))

    return Window(-offset, bound, at_callee(span[0]), at_callee(span[1]), drift_ppm=drift, anchor_ns=int(x_anchor),
                  growth_ppm=DRIFT_LIMIT_PPM + abs(drift), source="fit")
