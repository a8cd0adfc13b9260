"""Size controls: which ranks, which time window, which events make it into the output.

A :class:`Selection` turns into a boolean mask over one rank's events before the
transform, so ``transform()`` stays pure and every event left out is counted under the
first reason that excluded it (``ranks``, ``category``, ``min_duration``, ``overview``,
``window``). Metadata (``M``) and untimed events are always kept: they name processes and
threads.

``--overview`` is the view of a large job a person opens first: per rank its steps
(``ProfilerStep#N``), its RPC spans, its collectives (NCCL, gloo, c10d, ``record_param_comms``)
and every other complete event at least ``overview_us`` long; the rest, and the input's own
flow arrows, are left out and counted. The ranks and window of interest are then merged
in full (``--ranks``, ``--window``).
"""

import bisect
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from tracemerge.errors import TracemergeError, UsageError
from tracemerge.model import NO_DUR, RankTrace
from tracemerge.place import OVERVIEW_US as OVERVIEW_US  # --overview without a value (defined light: the CLI's)
from tracemerge.place.placement import Placement, aligned_ns

REASONS = ("ranks", "category", "min_duration", "overview", "window")
FLOW_PHASES = [ord("s"), ord("t"), ord("f")]   # the input's own flow events (the RPC arrows are drawn, not input)
# what an overview keeps whatever its length: the structure of a step and what ties ranks together
STRUCTURE_PREFIXES = ("ProfilerStep#",)
STRUCTURE_PARTS = ("nccl", "gloo:", "c10d::", "record_param_comms")
# (start, end) ms, either None for an open side
Window = Tuple[Optional[float], Optional[float]]


@dataclass
class Selection:
    ranks: "Optional[Union[FrozenSet[int], RankSet]]" = None   # None: every rank (a RankSet from --ranks)
    window_ms: Optional[Window] = None           # (start, end) ms from the aligned start; None = open
    min_duration_us: Optional[float] = None      # complete events shorter than this are dropped
    drop_categories: FrozenSet[str] = field(default_factory=frozenset)
    overview_us: Optional[float] = None          # --overview: shorter events left out unless structural

    def __post_init__(self) -> None:
        """The API's values checked as the CLI's options are (``tracemerge.load(window_ms=(0, inf))``
        used to end in an OverflowError deep in the merge)."""
        for lo_hi in [self.window_ms] if self.window_ms else []:
            if any(b is not None and not (isinstance(b, (int, float)) and abs(b) < WINDOW_LIMIT_MS) for b in lo_hi):
                raise UsageError(f"window_ms {lo_hi!r}: bounds must be finite ms within ±{WINDOW_LIMIT_MS:.4g}")
        for name in ("min_duration_us", "overview_us"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise UsageError(f"{name} {value!r}: not a finite non-negative number")

    def active(self) -> bool:
        """Whether any per-event rule applies (ranks are chosen before any event is read)."""
        return bool(self.drop_categories or self.min_duration_us or self.window_ms or self.overview_us is not None)

    def keeps_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def window_ns(self, start_ns: int) -> Tuple[Optional[int], Optional[int]]:
        """(lo, hi) ns bounds of the window on the clock ``start_ns`` is on (None: unbounded)."""
        if not self.window_ms:
            return None, None
        lo, hi = self.window_ms
        return (None if lo is None else start_ns + round(lo * 1e6),
                None if hi is None else start_ns + round(hi * 1e6))


class RankSet:
    """The ranks of a ``--ranks`` list as merged closed ranges, never materialised: a
    range like ``0-99999999999`` costs two integers (a set of it took 26 s and 1.8 GB
    for ``0-10000000``). Answers ``rank in``, ``& ranks``, ``len`` and iterates in order."""

    __slots__ = ("ranges",)

    def __init__(self, ranges: Iterable[Tuple[int, int]]) -> None:
        merged: List[Tuple[int, int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self.ranges = tuple(merged)

    def __contains__(self, rank: object) -> bool:
        if not isinstance(rank, int):
            return False
        at = bisect.bisect_right(self.ranges, (rank, float("inf"))) - 1
        return at >= 0 and self.ranges[at][0] <= rank <= self.ranges[at][1]

    def __and__(self, ranks: Iterable[int]) -> FrozenSet[int]:
        return frozenset(r for r in ranks if r in self)

    __rand__ = __and__

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.ranges:
            yield from range(lo, hi + 1)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RankSet):
            return self.ranges == other.ranges
        return isinstance(other, (set, frozenset)) and len(other) == len(self) and all(r in self for r in other)

    def __hash__(self) -> int:
        return hash(self.ranges)

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)

    def __repr__(self) -> str:
        return f"RankSet({str(self)!r})"


# ranks shown one by one in the summary up to this many; a wider selection is given as its ranges
LISTED_RANKS = 4096


def parse_ranks(text: str) -> RankSet:
    """``0-3,7`` -> the ranks 0, 1, 2, 3, 7 (as ranges: ``0-99999999999`` is two integers)."""
    ranges: List[Tuple[int, int]] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise TracemergeError(f"--ranks {text!r}: {part!r} is not a rank or a range like 0-3") from None
        if first < 0 or last < first:
            raise TracemergeError(f"--ranks {text!r}: {part!r} is not a rank or a range like 0-3")
        ranges.append((first, last))
    return RankSet(ranges)


# the most a window bound may be: its ns (ms * 1e6, added to a start) stay in int64 with room (2**62 ns)
WINDOW_LIMIT_MS = (1 << 62) / 1e6


def parse_window(text: str) -> Window:
    """``START:END`` in ms (either side may be empty) -> (start or None, end or None).
    Bounds must be finite and within ±2**62 ns (year 2116): ``inf``, ``nan`` or ``1e308``
    select nothing a trace can hold and used to end in an internal error."""
    lo, sep, hi = text.partition(":")
    try:
        bounds: Any = tuple(float(v) if v.strip() else None for v in (lo, hi))
    except ValueError:
        bounds = None
    if bounds is not None and any(b is not None and not abs(b) < WINDOW_LIMIT_MS for b in bounds):
        raise TracemergeError(f"--window {text!r}: bounds must be finite ms within ±{WINDOW_LIMIT_MS:.4g} "
                              "(2**62 ns, year 2116)")
    if not sep or bounds is None or bounds == (None, None) or (None not in bounds and bounds[1] <= bounds[0]):
        raise TracemergeError(f"--window {text!r}: expected START:END in ms with START < END (e.g. 100:250)")
    return bounds


def check_ranks(selection: Selection, ranks: Iterable[int]) -> None:
    """Refuse a --ranks that matches no input: an empty trace is never what was meant."""
    if selection.ranks is not None and not selection.ranks & set(ranks):
        raise UsageError(f"--ranks: no input has any of the ranks {_shown(selection.ranks)} "
                              f"(ranks: {sorted(ranks)})")


def event_mask(trace: RankTrace, place: Placement, selection: Selection,
               window: Tuple[Optional[int], Optional[int]]) -> Tuple[np.ndarray, Dict[str, int]]:
    """(keep mask, {reason: dropped count}) of one rank; ``window`` is (lo, hi) output ns."""
    category = None
    if selection.drop_categories:
        category = np.isin(trace.cat, [c for c, name in enumerate(trace.names)
                                       if isinstance(name, str) and _dropped_category(selection, name)])
    structural = None
    if selection.overview_us is not None:
        structural = np.isin(trace.name, [c for c, name in enumerate(trace.names)
                                          if isinstance(name, str) and _structural(name)])
        structural[trace.args.with_key("rpc_id")] = True   # RPC spans (and any event naming a call)
    return _mask(selection, window, always=(trace.ph == ord("M")) | ~trace.timed, category=category,
                 x=trace.ph == ord("X"), dur=trace.dur, structural=structural,
                 flow=np.isin(trace.ph, FLOW_PHASES) if selection.overview_us is not None else None,
                 aligned=lambda: aligned_ns(trace, place.clock, place.out_base_ns))


def _structural(name: str) -> bool:
    """A name an overview keeps whatever its length (STRUCTURE_PREFIXES, STRUCTURE_PARTS)."""
    lowered = name.lower()
    return name.startswith(STRUCTURE_PREFIXES) or any(part in lowered for part in STRUCTURE_PARTS)


def kept_spans(spans: List[Dict[str, Any]], place: Placement, selection: Optional[Selection],
               window: Tuple[Optional[int], Optional[int]]) -> np.ndarray:
    """Which of a rank's RPC spans (:mod:`tracemerge.inputs.rpc_spans` records: ts_ns,
    dur_ns, cat on the file's clock), or the spans its sends and receives were read from
    (a p2p record's ``span``), the selection keeps: the rules of :func:`event_mask`, so the
    flow plan knows before any rank is written which spans the output will hold. Both are
    spans an overview keeps whatever their length (an RPC's; ``c10d::``, ``gloo:``, NCCL's)."""
    if selection is None or not selection.active():
        return np.ones(len(spans), dtype=bool)
    ts = np.array([s["ts_ns"] for s in spans], dtype=np.int64)
    dur = np.array([s["dur_ns"] for s in spans], dtype=np.int64)

    def aligned() -> Tuple[np.ndarray, np.ndarray]:
        start = place.clock.to_reference(ts)
        end = place.clock.to_reference(ts + dur)
        return start - place.out_base_ns, end - start

    keep, _ = _mask(selection, window, always=np.zeros(len(spans), dtype=bool),
                    category=np.array([_dropped_category(selection, s["cat"]) for s in spans], dtype=bool),
                    x=np.ones(len(spans), dtype=bool), dur=dur, structural=np.ones(len(spans), dtype=bool),
                    flow=np.zeros(len(spans), dtype=bool), aligned=aligned)
    return keep


def _dropped_category(selection: Selection, name: str) -> bool:
    """``--drop-category`` matches any of a comma-separated category's parts."""
    return bool(selection.drop_categories & {p.strip() for p in name.split(",")})


def _mask(selection: Selection, window: Tuple[Optional[int], Optional[int]], always: np.ndarray,
          category: Optional[np.ndarray], x: np.ndarray, dur: np.ndarray, structural: Optional[np.ndarray],
          flow: Optional[np.ndarray], aligned: Callable[[], Tuple[np.ndarray, np.ndarray]],
          ) -> Tuple[np.ndarray, Dict[str, int]]:
    """(keep mask, {reason: dropped count}) by the size controls, in their order: category,
    min_duration, overview, window; ``always`` events are never dropped, ``structural`` ones
    never by the overview, which drops the input's ``flow`` events (their slices are mostly
    gone: Kineto's ac2g and fwdbwd arrows); ``aligned()`` gives the (start, dur) output ns the window is
    measured in."""
    keep = np.ones(len(always), dtype=bool)
    dropped: Dict[str, int] = {}

    def drop(reason: str, mask: np.ndarray) -> None:
        mask = mask & keep & ~always
        n = int(mask.sum())
        if n:
            dropped[reason] = n
            keep[mask] = False

    if selection.drop_categories and category is not None:
        drop("category", category)
    if selection.min_duration_us:
        drop("min_duration", x & (dur != NO_DUR) & (dur < selection.min_duration_us * 1000))
    if selection.overview_us is not None and structural is not None and flow is not None:
        drop("overview", (x & (dur != NO_DUR) & (dur < selection.overview_us * 1000) & ~structural) | flow)
    lo, hi = window
    if lo is not None or hi is not None:
        start, dur_out = aligned()
        end = start + np.maximum(dur_out, 0)
        outside = np.zeros(len(always), dtype=bool)
        if lo is not None:
            outside |= end < lo
        if hi is not None:
            outside |= start > hi
        drop("window", outside)
    return keep, dropped


def subset(trace: RankTrace, keep: np.ndarray) -> RankTrace:
    """The trace restricted to ``keep``; string and pid/tid tables are shared, so codes hold."""
    if keep.all():
        return trace
    idx = np.flatnonzero(keep)
    args, extra = trace.args, trace.extra
    # a trace read by the compiled core keeps which of its scan's events it holds
    index: Dict[str, Any] = {"index": idx if trace.index is None else trace.index[idx]} if hasattr(trace, "index") else {}
    return dataclasses.replace(
        trace, ph=trace.ph[idx], name=trace.name[idx], cat=trace.cat[idx], pid=trace.pid[idx],
        tid=trace.tid[idx], ts=trace.ts[idx], dur=trace.dur[idx],
        args=args.take(idx.tolist()), extra=extra.take(idx.tolist()),
        events=None if trace.events is None else list(map(trace.events.__getitem__, idx.tolist())), **index)


def apply(trace: RankTrace, place: Placement, selection: Optional[Selection],
          window: Tuple[Optional[int], Optional[int]]) -> Tuple[RankTrace, Dict[str, Any]]:
    """(selected trace, {"filtered": n, "filtered_by": {reason: n}}) of one rank."""
    if selection is None or not selection.active():
        return trace, {}
    keep, dropped = event_mask(trace, place, selection, window)
    counts = {"filtered_by": dict(dropped), "filtered": sum(dropped.values())}
    return subset(trace, keep), counts


def describe(selection: Selection) -> Dict[str, Any]:
    """The selection as plain JSON data for the summary."""
    return {"ranks": _listed(selection.ranks) if selection.ranks is not None else None,
            "window_ms": list(selection.window_ms) if selection.window_ms else None,
            "min_duration_us": selection.min_duration_us, "drop_categories": sorted(selection.drop_categories),
            **({"overview_us": selection.overview_us} if selection.overview_us is not None else {})}


def _listed(ranks: Union[FrozenSet[int], RankSet]) -> Union[List[int], str]:
    """The selected ranks for the summary: the sorted list, or past LISTED_RANKS the ranges as
    written (``"0-99999999999"``), which no list could hold."""
    return sorted(ranks) if len(ranks) <= LISTED_RANKS else str(ranks)


def _shown(ranks: Union[FrozenSet[int], RankSet]) -> str:
    listed = _listed(ranks)
    return str(listed) if isinstance(listed, list) else listed
