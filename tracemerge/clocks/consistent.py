"""Clocks moved, where needed, into what their exchanges allow: no call, drawn span or
collective out of order on the merged timeline.

Each clock of ``align_auto`` is the best of several estimates (the graph of pairwise fits,
the ends of gloo collectives, NCCL kernel ends), each honest within its error bound, but
each made rank by rank: two neighbours, each within its bound, can still leave an
exchange between them backwards (a callee side before its call's send, a member leaving a
collective before another arrived). On the real job of
benchmarks/pairing_across_machines.py the ends of two gloo collectives put the callee's
clock 40 µs from where its calls put it: 11 calls and 8 drawn spans out of order. The
exchanges are hard facts on any clock, so the clocks are placed one machine at a time,
best known first (the reference and other exact clocks stay): a machine's clock is moved
by the smallest constant shift that puts every exchange with the machines placed before
it in order (the checks :mod:`tracemerge.clocks.causality` counts), and its error bound
grows by that shift, so it still holds; its note says by how much. Where no constant
shift does (its drift differs from what the exchanges allow), or the shift would exceed
the clock's bound plus its peers' (the exchanges contradict the estimates themselves:
records mismatched, a clock stepped), the clock stays, and the count says what is left.
Placing a machine reads only its own exchange points: the pass grows with the points
(1,024 ranks: 0.2-0.4 s).
"""

import math
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tracemerge.clocks.causality import Points, points
from tracemerge.clocks.clock import ClockModel, to_reference_by_rank
from tracemerge.correlate.match import Correlation

# kept inside each exchange by this much: both sides are rounded to integer ns on the way
# to the reference clock, and a point exactly on the edge may then read 1 ns outside it
MARGIN_NS = 4

Bounds = Tuple[np.ndarray, np.ndarray]   # upper, lower: ns a clock's shift may not exceed, nor fall below


def within_exchanges(infos: Sequence[Any], clocks: Dict[int, ClockModel], clock_of: Mapping[int, int],
                     links: Optional[Correlation] = None) -> Dict[int, ClockModel]:
    """``clocks`` with every moved clock inside its exchanges with the clocks placed before
    it (the module's doc). ``clock_of``: {rank: the rank whose clock it reads} (ranks of one
    machine move together, as their head)."""
    p = points(infos, links)
    if not (len(p.rpc) or len(p.spans) or len(p.first)):
        return clocks
    heads = sorted({clock_of[r] for r in clocks})
    fixed = [h for h in heads if clocks[h].error_bound_ns == 0]   # the reference and exact clocks stay
    order = sorted((h for h in heads if h not in fixed and clocks[h].error_bound_ns is not None),
                   key=lambda h: (clocks[h].error_bound_ns, h))
    out = dict(clocks)
    ex = _Exchanges(p, clock_of)
    for head in fixed:
        ex.place(head, out)
    for head in order:
        slack = (out[head].error_bound_ns or 0) + ex.peer_bound(head, out)
        d = _shift(ex.bounds(head, out), slack)
        if d:
            for r in clocks:
                if clock_of[r] == head:
                    out[r] = _moved(out[r], d)
        ex.place(head, out)
    return out


class _Exchanges:
    """Every exchange as orderings ``early <= late`` of two points on two clocks, indexed by
    the clock of each side, and per collective the last arrival and the first departure of
    its members on the clocks placed so far: placing a clock touches only its own points,
    so the whole pass grows with the points, not with clocks times points."""

    def __init__(self, p: Points, clock_of: Mapping[int, int]) -> None:
        r, sp = p.rpc, p.spans
        early_rank, early, late_rank, late = [], [], [], []
        for caller, callee, c0, c1, s0, s1 in ((r[:, 0], r[:, 1], r[:, 2], r[:, 5], r[:, 3], r[:, 4]),
                                               (sp[:, 0], sp[:, 1], sp[:, 2], sp[:, 3], sp[:, 4], sp[:, 5])):
            use = s0 <= s1   # a callee side longer than its call fits no clock: left to the count
            # the callee starts after the send and ends before the completion
            early_rank += [caller[use], callee[use]]
            early += [c0[use], s1[use]]
            late_rank += [callee[use], caller[use]]
            late += [s0[use], c1[use]]
        cat = np.concatenate
        self.rank = (cat(early_rank), cat(late_rank))
        self.local = (cat(early), cat(late))
        top = max([max(clock_of)] + [int(a.max()) for a in (*self.rank, p.coll[:, 0]) if len(a)]) + 1
        self.group = np.arange(top, dtype=np.int64)
        self.group[np.array(list(clock_of), np.int64)] = np.array(list(clock_of.values()), np.int64)
        self.sides = tuple(_by(self.group[ranks]) for ranks in self.rank)
        self.placed = np.zeros(top, bool)
        self.ref = (np.zeros(len(self.local[0]), np.int64), np.zeros(len(self.local[1]), np.int64))
        # collectives: each member entry, its collective, and the placed members' extremes
        self.coll, self.which = p.coll, np.repeat(np.arange(len(p.first)), np.diff(np.append(p.first, len(p.coll))))
        self.coll_by = _by(self.group[p.coll[:, 0]]) if len(p.coll) else _by(np.zeros(0, np.int64))
        big = np.iinfo(np.int64).max
        self.arrived = np.full(len(p.first), -big, np.int64)   # the last placed arrival of each collective
        self.left = np.full(len(p.first), big, np.int64)       # the first placed departure
        self.known = np.zeros(len(p.first), np.int64)          # the largest error bound of its placed members

    def _on_reference(self, ranks: np.ndarray, local: np.ndarray, models: Mapping[int, ClockModel]) -> np.ndarray:
        if not len(ranks):
            return np.zeros(0, np.int64)
        if ranks.min() == ranks.max():   # one rank's points, the common case: no sort
            return np.asarray(models[int(ranks[0])].to_reference(local), np.int64)
        return to_reference_by_rank(models, ranks, local)

    def bounds(self, head: int, models: Mapping[int, ClockModel]) -> Bounds:
        """Where ``head``'s clock can move: ``d <= upper`` and ``d >= lower`` for each
        exchange with the clocks placed before it, ``d`` what it adds to the clock's offset
        (moving its aligned times by ``-d``)."""
        big = np.iinfo(np.int64).max
        ups: List[np.ndarray] = []
        lows: List[np.ndarray] = []
        for mine, other in ((1, 0), (0, 1)):   # head's point late (an upper bound on d), then early
            at = _at(self.sides[mine], head)
            at = at[self.placed[self.group[self.rank[other][at]]]]
            t = self._on_reference(self.rank[mine][at], self.local[mine][at], models)
            (ups if mine == 1 else lows).append(t - self.ref[other][at])
        at = _at(self.coll_by, head)
        rank, which = self.coll[at, 0], self.which[at]
        start = self._on_reference(rank, self.coll[at, 1], models)
        end = self._on_reference(rank, self.coll[at, 2], models)
        leaves, arrives = self.arrived[which] > -big, self.left[which] < big
        ups.append(end[leaves] - self.arrived[which][leaves])       # leave after the others arrived
        lows.append(start[arrives] - self.left[which][arrives])    # arrive before they leave
        return np.concatenate(ups), np.concatenate(lows)

    def peer_bound(self, head: int, models: Mapping[int, ClockModel]) -> int:
        """The largest error bound of the placed clocks ``head`` exchanged with."""
        peers: set = set()
        for mine, other in ((1, 0), (0, 1)):
            at = _at(self.sides[mine], head)
            peers.update(self.group[self.rank[other][at]][self.placed[self.group[self.rank[other][at]]]].tolist())
        own = max((models[h].error_bound_ns or 0 for h in peers if h in models), default=0)
        return max(own, int(self.known[self.which[_at(self.coll_by, head)]].max(initial=0)))

    def place(self, head: int, models: Mapping[int, ClockModel]) -> None:
        """``head``'s clock placed as ``models`` has it: its points' reference times fixed."""
        self.placed[head] = True
        for side in (0, 1):
            at = _at(self.sides[side], head)
            self.ref[side][at] = self._on_reference(self.rank[side][at], self.local[side][at], models)
        at = _at(self.coll_by, head)
        if len(at):
            rank, which = self.coll[at, 0], self.which[at]
            np.maximum.at(self.arrived, which, self._on_reference(rank, self.coll[at, 1], models))
            np.minimum.at(self.left, which, self._on_reference(rank, self.coll[at, 2], models))
            np.maximum.at(self.known, which, models[head].error_bound_ns or 0)


def _by(groups: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(order, the groups in that order): each group's entries, found by bisection."""
    order = np.argsort(groups, kind="stable")
    return order, groups[order]


def _at(index: Tuple[np.ndarray, np.ndarray], group: int) -> np.ndarray:
    """The entries of ``group`` in ``index`` (:func:`_by`)."""
    order, sorted_groups = index
    return order[np.searchsorted(sorted_groups, group, "left"):np.searchsorted(sorted_groups, group, "right")]


def _shift(bounds: Bounds, slack: int) -> int:
    """The least constant shift within ``bounds`` (MARGIN_NS inside); 0 where none is
    needed, none exists (the clock's drift differs from what its exchanges allow) or it
    would exceed ``slack``."""
    up, lo = bounds
    high = float(up.min()) if len(up) else math.inf
    low = float(lo.max()) if len(lo) else -math.inf
    if low <= 0 <= high or low + 2 * MARGIN_NS > high:
        return 0
    d = int(math.ceil(low)) + MARGIN_NS if low > 0 else int(math.floor(high)) - MARGIN_NS
    return d if abs(d) <= slack else 0


def _moved(model: ClockModel, d: int) -> ClockModel:
    """``model`` reading ``d`` ns more, its bound grown by as much, and said."""
    said = (f"moved by {d / 1e3:+.1f} µs to keep its exchanges with better-known clocks in order "
            "(its error bound grew by as much).")
    return replace(model, offset_ns=model.offset_ns + d, corrections=[], note=" ".join(filter(None, (model.note, said))),
                   error_bound_ns=None if model.error_bound_ns is None else model.error_bound_ns + abs(d))
