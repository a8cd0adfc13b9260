"""Collectives report: per (group, op), how much was moved and who waited for whom.

Arrival times (``start_ns``) of every rank are put on the reference clock; within one
collective the last rank to arrive is the one the others waited for, and each rank's wait
is the last arrival minus its own.

Sends and receives (:class:`~tracemerge.correlate.match.PointToPoint`) are rows of group
``p2p``, one per direction (op ``send 0->1``): how many, how much, and in the skew columns
the time from the send's issue to the receive's completion on the reference clock.
"""

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Tuple

import numpy as np

from tracemerge.clocks.clock import ClockModel
from tracemerge.correlate.match import CollectiveMatch, PointToPoint

P2P_GROUP = "p2p"   # the group of the point-to-point rows


@dataclass
class CollectiveStats:
    group: str
    op: str
    count: int                 # collectives seen by at least one rank
    complete: int              # seen by every rank of the group; skews are over these
    bytes: int                 # payload bytes summed over ranks and calls
    skew_us: Dict[str, float]  # arrival skew (last - first) {mean, max}
    wait_us: Dict[int, float] = field(default_factory=dict)        # {rank: mean wait for the last arriver}
    last_arrivals: Dict[int, int] = field(default_factory=dict)    # {rank: times it arrived last}
    slowest_rank: int = -1     # the rank most often last to arrive


def collective_report(matches: Iterable[CollectiveMatch], clocks: Mapping[int, ClockModel]) -> List[CollectiveStats]:
    """[CollectiveStats] of [CollectiveMatch], in order of first sight of each (group, op)."""
    groups: Dict[Tuple[str, str], List[CollectiveMatch]] = {}
    for m in matches:
        groups.setdefault((m.group, m.op), []).append(m)
    out: List[CollectiveStats] = []
    for (group, op), ms in groups.items():
        stats = CollectiveStats(group=group, op=op, count=len(ms), complete=0,
                                bytes=sum(sum(m.bytes.values()) for m in ms), skew_us={})
        skews: List[int] = []
        waits: Dict[int, List[int]] = {}
        for m in ms:
            ranks = [r for r in m.start_ns if r in clocks]
            if not m.complete or len(ranks) < 2:
                continue
            stats.complete += 1
            arrive = {r: clocks[r].to_reference(m.start_ns[r]) for r in ranks}
            last = max(ranks, key=arrive.__getitem__)
            skews.append(arrive[last] - min(arrive.values()))
            stats.last_arrivals[last] = stats.last_arrivals.get(last, 0) + 1
            for r in ranks:
                waits.setdefault(r, []).append(arrive[last] - arrive[r])
        if skews:
            stats.skew_us = {"mean": float(np.mean(skews)) / 1000.0, "max": float(np.max(skews)) / 1000.0}
            stats.wait_us = {r: float(np.mean(w)) / 1000.0 for r, w in sorted(waits.items())}
            stats.slowest_rank = max(stats.last_arrivals, key=stats.last_arrivals.__getitem__)
        out.append(stats)
    return out


def p2p_report(p2p: PointToPoint, clocks: Mapping[int, ClockModel]) -> List[CollectiveStats]:
    """[CollectiveStats] of the matched sends, one per direction (sender, receiver) in rank
    order: ``skew_us`` is the time from the send's issue to the receive's completion on the
    reference clock (a receive waits for its send: the one-way link's width)."""
    out: List[CollectiveStats] = []
    pairs = sorted(set(zip(p2p.sender.tolist(), p2p.receiver.tolist())))
    for s, r in pairs:
        mine = (p2p.sender == s) & (p2p.receiver == r)
        stats = CollectiveStats(group=P2P_GROUP, op=f"send {s}->{r}", count=int(mine.sum()), complete=int(mine.sum()),
                                bytes=int(p2p.bytes[mine].sum()) if len(p2p.bytes) else 0, skew_us={})
        if s in clocks and r in clocks:
            took = clocks[r].to_reference(p2p.recv_end[mine]) - clocks[s].to_reference(p2p.send_start[mine])
            stats.skew_us = {"mean": float(np.mean(took)) / 1000.0, "max": float(np.max(took)) / 1000.0}
        out.append(stats)
    return out
