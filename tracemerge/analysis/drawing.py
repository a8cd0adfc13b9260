"""The critical path as trace events, so a person sees it in Perfetto (``combine --critical-path``).

The path becomes one more process, ``critical path``, beside the ranks: each window is a
slice named after it (``ProfilerStep#N``, ``ProfilerStep#N (rank R)`` or ``trace``) and its
segments are slices nested in it, named ``<kind>: <name> (rank R)``, with the rank, thread,
kind and name as args. Windows that do not overlap share a track, and the critical path's
windows never overlap (:func:`~tracemerge.analysis.critical_path.disjoint`), so they are
all on one; :func:`tracks` would give an overlapping one the next free track. Times are reference-clock ns, written as µs after ``base_ns``.
"""

from dataclasses import dataclass
from typing import Any, Dict, List

from tracemerge.analysis.critical_path import Window

PROCESS = "critical path"
CATEGORY = "critical_path"   # not a host op: key averages leave it out (nesting.NOT_HOST_OPS)
PID = 0
TRACK_NAME = "critical path {}"


def tracks(windows: List[Window]) -> List[int]:
    """The track (1, 2, …) of each window: the first whose last window ended by its start."""
    ends: List[int] = []
    out: List[int] = []
    for w in windows:
        for k, end in enumerate(ends):
            if end <= w.start_ns:
                ends[k] = w.end_ns
                out.append(k + 1)
                break
        else:
            ends.append(w.end_ns)
            out.append(len(ends))
    return out


def _us(ns: int) -> float:
    return ns / 1000


def path_events(windows: List[Window], base_ns: int) -> List[Dict[str, Any]]:
    """Chrome trace events of ``windows`` (critical_path.Window) with ``ts`` in µs after ``base_ns``."""
    on = tracks(windows)
    events: List[Dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": PROCESS}},
              {"ph": "M", "name": "process_sort_index", "pid": PID, "tid": 0, "args": {"sort_index": -1}}]
    for k in range(1, max(on, default=0) + 1):
        events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": k, "args": {"name": TRACK_NAME.format(k)}})
    for w, tid in zip(windows, on):
        events.append({"ph": "X", "cat": CATEGORY, "name": w.window, "pid": PID, "tid": tid,
                       "ts": _us(w.start_ns - base_ns), "dur": _us(w.end_ns - w.start_ns),
                       "args": {"by_kind_ns": dict(w.by_kind), "by_rank_ns": {str(r): v for r, v in w.by_rank.items()}}})
        for s in w.segments:
            events.append({"ph": "X", "cat": CATEGORY, "name": f"{s.kind}: {s.name} (rank {s.rank})", "pid": PID,
                           "tid": tid, "ts": _us(s.start_ns - base_ns), "dur": _us(s.end_ns - s.start_ns),
                           "args": {"rank": s.rank, "tid": s.tid, "kind": s.kind, "name": s.name}})
    return events


@dataclass(frozen=True)
class PathDrawing:
    """The critical path as the merge draws it, one more process after the ranks'
    (:class:`tracemerge.merge.combine.Drawn`)."""

    windows: List[Window]
    process: str = PROCESS
    pid: int = PID
    key: str = "critical_path"

    def events(self, base_ns: int) -> List[Dict[str, Any]]:
        return path_events(self.windows, base_ns)

    def summary(self) -> Dict[str, Any]:
        return {"windows": len(self.windows), "segments": sum(len(w.segments) for w in self.windows)}
