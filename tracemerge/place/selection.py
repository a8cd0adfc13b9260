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

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from tracemerge.errors import TracemergeError, UsageError
from tracemerge.model import NO_DUR
from tracemerge.place import OVERVIEW_US as OVERVIEW_US  # --overview without a value (defined light: the CLI's)
from tracemerge.place.placement import aligned_ns

REASONS = ("ranks", "category", "min_duration", "overview", "window")
FLOW_PHASES = [ord("s"), ord("t"), ord("f")]   # the input's own flow events (the RPC arrows are drawn, not input)
# what an overview keeps whatever its length: the structure of a step and what ties ranks together
STRUCTURE_PREFIXES = ("ProfilerStep#",)
STRUCTURE_PARTS = ("nccl", "gloo:", "c10d::", "record_param_comms")


@dataclass
class Selection:
    ranks: Optional[frozenset] = None            # None: every rank
    window_ms: Optional[tuple] = None            # (start, end) ms from the aligned start; None = open
    min_duration_us: Optional[float] = None      # complete events shorter than this are dropped
    drop_categories: frozenset = field(default_factory=frozenset)
    overview_us: Optional[float] = None          # --overview: shorter events left out unless structural

    def active(self):
        """Whether any per-event rule applies (ranks are chosen before any event is read)."""
        return bool(self.drop_categories or self.min_duration_us or self.window_ms or self.overview_us is not None)

    def keeps_rank(self, rank):
        return self.ranks is None or rank in self.ranks

    def window_ns(self, start_ns):
        """(lo, hi) ns bounds of the window on the clock ``start_ns`` is on (None: unbounded)."""
        if not self.window_ms:
            return None, None
        lo, hi = self.window_ms
        return (None if lo is None else start_ns + round(lo * 1e6),
                None if hi is None else start_ns + round(hi * 1e6))


def parse_ranks(text):
    """``0-3,7`` -> frozenset({0, 1, 2, 3, 7})."""
    ranks = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise TracemergeError(f"--ranks {text!r}: {part!r} is not a rank or a range like 0-3") from None
        if first < 0 or last < first:
            raise TracemergeError(f"--ranks {text!r}: {part!r} is not a rank or a range like 0-3")
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def parse_window(text):
    """``START:END`` in ms (either side may be empty) -> (start or None, end or None)."""
    lo, sep, hi = text.partition(":")
    try:
        bounds = tuple(float(v) if v.strip() else None for v in (lo, hi))
    except ValueError:
        bounds = None
    if not sep or bounds is None or bounds == (None, None) or (None not in bounds and bounds[1] <= bounds[0]):
        raise TracemergeError(f"--window {text!r}: expected START:END in ms with START < END (e.g. 100:250)")
    return bounds


def check_ranks(selection, ranks):
    """Refuse a --ranks that matches no input: an empty trace is never what was meant."""
    if selection.ranks is not None and not selection.ranks & set(ranks):
        raise UsageError(f"--ranks: no input has any of the ranks {sorted(selection.ranks)} "
                              f"(ranks: {sorted(ranks)})")


def event_mask(trace, place, selection, window):
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


def _structural(name):
    """A name an overview keeps whatever its length (STRUCTURE_PREFIXES, STRUCTURE_PARTS)."""
    lowered = name.lower()
    return name.startswith(STRUCTURE_PREFIXES) or any(part in lowered for part in STRUCTURE_PARTS)


def kept_spans(spans, place, selection, window):
    """Which of a rank's RPC spans (:mod:`tracemerge.inputs.rpc_spans` records: ts_ns,
    dur_ns, cat on the file's clock) the selection keeps: the rules of :func:`event_mask`,
    so the flow plan knows before any rank is written which spans the output will hold."""
    if selection is None or not selection.active():
        return np.ones(len(spans), dtype=bool)
    ts = np.array([s["ts_ns"] for s in spans], dtype=np.int64)
    dur = np.array([s["dur_ns"] for s in spans], dtype=np.int64)

    def aligned():
        start = place.clock.to_reference(ts)
        end = place.clock.to_reference(ts + dur)
        return start - place.out_base_ns, end - start

    keep, _ = _mask(selection, window, always=np.zeros(len(spans), dtype=bool),
                    category=np.array([_dropped_category(selection, s["cat"]) for s in spans], dtype=bool),
                    x=np.ones(len(spans), dtype=bool), dur=dur, structural=np.ones(len(spans), dtype=bool),
                    flow=np.zeros(len(spans), dtype=bool), aligned=aligned)
    return keep


def _dropped_category(selection, name):
    """``--drop-category`` matches any of a comma-separated category's parts."""
    return bool(selection.drop_categories & {p.strip() for p in name.split(",")})


def _mask(selection, window, always, category, x, dur, structural, flow, aligned):
    """(keep mask, {reason: dropped count}) by the size controls, in their order: category,
    min_duration, overview, window; ``always`` events are never dropped, ``structural`` ones
    never by the overview, which drops the input's ``flow`` events (their slices are mostly
    gone: Kineto's ac2g and fwdbwd arrows); ``aligned()`` gives the (start, dur) output ns the window is
    measured in."""
    keep = np.ones(len(always), dtype=bool)
    dropped = {}

    def drop(reason, mask):
        mask = mask & keep & ~always
        n = int(mask.sum())
        if n:
            dropped[reason] = n
            keep[mask] = False

    if selection.drop_categories:
        drop("category", category)
    if selection.min_duration_us:
        drop("min_duration", x & (dur != NO_DUR) & (dur < selection.min_duration_us * 1000))
    if selection.overview_us is not None:
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


def subset(trace, keep):
    """The trace restricted to ``keep``; string and pid/tid tables are shared, so codes hold."""
    if keep.all():
        return trace
    idx = np.flatnonzero(keep)
    args, extra = trace.args, trace.extra
    # a trace read by the compiled core keeps which of its scan's events it holds
    index = {"index": idx if trace.index is None else trace.index[idx]} if hasattr(trace, "index") else {}
    return dataclasses.replace(
        trace, ph=trace.ph[idx], name=trace.name[idx], cat=trace.cat[idx], pid=trace.pid[idx],
        tid=trace.tid[idx], ts=trace.ts[idx], dur=trace.dur[idx],
        args=args.take(idx.tolist()), extra=extra.take(idx.tolist()),
        events=None if trace.events is None else list(map(trace.events.__getitem__, idx.tolist())), **index)


def apply(trace, place, selection, window):
    """(selected trace, {"filtered": n, "filtered_by": {reason: n}}) of one rank."""
    if selection is None or not selection.active():
        return trace, {}
    keep, dropped = event_mask(trace, place, selection, window)
    counts = {"filtered_by": dict(dropped), "filtered": sum(dropped.values())}
    return subset(trace, keep), counts


def describe(selection):
    """The selection as plain JSON data for the summary."""
    return {"ranks": sorted(selection.ranks) if selection.ranks is not None else None,
            "window_ms": list(selection.window_ms) if selection.window_ms else None,
            "min_duration_us": selection.min_duration_us, "drop_categories": sorted(selection.drop_categories),
            **({"overview_us": selection.overview_us} if selection.overview_us is not None else {})}
