"""Checks over one rank's trace, as warnings:

- :func:`clock_jumps`: one rank's trace whose clock stepped while it was recorded.
- :func:`job_facts`: what a file says about its job, for :func:`tracemerge.job.checks.check_job`.

Checks never change data; they say what looks wrong so a merged timeline is not trusted
blindly.
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from tracemerge.algorithms.nesting import DEVICE_CATS
from tracemerge.model import RankTrace

# A clock jump must be larger than this to be reported: smaller steps are within what
# NTP slews and what a writer's own ordering can look like.
JUMP_TOLERANCE_NS = 1_000_000_000
# A silence between event starts is a jump only when it is this long and this many times
# longer than all the trace's other time together.
GAP_MIN_NS = 10_000_000_000
GAP_FACTOR = 10
FLOW_PHASES = np.array([ord("s"), ord("t"), ord("f")], dtype=np.uint8)


def _from_cupti(cat: str) -> bool:
    """A category of device activity or runtime calls (CUPTI/roctracer records, not the
    profiler's CPU ops)."""
    return cat in DEVICE_CATS or cat.endswith("_runtime") or cat.endswith("_driver") or cat == "runtime"


def _seconds(ns: float) -> str:
    return f"{ns / 1e9:.3f} s"


def _window(trace: RankTrace, span_name: str) -> Optional[Tuple[int, int]]:
    """(start, stop) ns of the profiling window the file declares, or None."""
    block = trace.tracemerge or {}
    start, stop = block.get("profile_start_ns"), block.get("profile_stop_ns")
    if isinstance(start, int) and isinstance(stop, int) and start <= stop:
        return start, stop
    code = trace.code_of(span_name)
    if code is not None:
        hits = np.flatnonzero((trace.name == code) & trace.timed & (trace.dur >= 0))
        if len(hits):
            i = int(hits[0])
            return int(trace.ts[i]), int(trace.ts[i] + trace.dur[i])
    return None


def clock_jumps(trace: RankTrace, span_name: str) -> List[str]:
    """Warnings about clock steps inside one trace, each naming an event index.

    Three signs, all vectorised: events stamped far outside the profiling window the file
    declares (its rank-file window, else the span named ``span_name``); an event that ends
    before the event of its category written before it on the same thread began (time went
    backwards); and a long silence between two clusters of events (time leapt forward).
    """
    idx = np.flatnonzero(trace.timed & (trace.ph != ord("M")))
    if len(idx) < 2:
        return []
    ts = trace.ts[idx]
    end = ts + np.maximum(trace.dur[idx], 0)
    out = []

    window = _window(trace, span_name)
    if window is not None:
        before = window[0] - JUMP_TOLERANCE_NS - ts
        after = ts - window[1] - JUMP_TOLERANCE_NS
        outside = np.flatnonzero((before > 0) | (after > 0))
        if len(outside):
            worst = int(np.maximum(before, after)[outside].max()) + JUMP_TOLERANCE_NS
            out.append(f"possible clock jump: {len(outside)} events start outside the profiling window "
                       f"by up to {_seconds(worst)} (first: event {int(idx[outside[0]])})")

    # Per thread and category, in file order, on the profiler's own CPU events only: Kineto
    # writes a thread's CUDA runtime calls after all its CPU ops, and runtime calls and
    # device activity come from CUPTI buffer by buffer (a later buffer's kernels before an
    # earlier one's memsets, a later buffer's cudaEventQuery after an earlier one's sync), so
    # their file order is not time order at all; flow points (s/t/f) take the time of the
    # event they bind to. All those are left out.
    cat = trace.cat[idx]
    device = [i for i, n in enumerate(trace.names) if isinstance(n, str) and _from_cupti(n.lower())]
    kept = np.flatnonzero(~(np.isin(trace.ph[idx], FLOW_PHASES) | np.isin(cat, device)))
    # (pid, tid, cat) as one key, sorted stably: file order within each, in one sort where a
    # five-key lexsort took most of a rank's checks
    key = _thread_cat_key(trace, idx[kept], cat[kept])
    by_key = np.argsort(key, kind="stable")
    order, key = kept[by_key], key[by_key]
    same_thread = key[1:] == key[:-1]
    step = ts[order][:-1] - end[order][1:]
    back = np.flatnonzero(same_thread & (step > JUMP_TOLERANCE_NS))
    if len(back):
        i = int(back[np.argmax(step[back])])
        out.append(f"possible clock jump: time goes backwards on a thread {len(back)} times, by up to "
                   f"{_seconds(int(step[i]))} (event {int(idx[order[i + 1]])} ends before event "
                   f"{int(idx[order[i]])}, written before it on the same thread, begins)")

    gaps = np.diff(np.sort(ts))
    g = int(np.argmax(gaps))
    gap = int(gaps[g])
    rest = int(max(end.max(), ts.max()) - ts.min()) - gap
    if gap > GAP_MIN_NS and gap > GAP_FACTOR * max(rest, 0):
        by_time = np.argsort(ts, kind="stable")  # which events: only when there is one to name
        out.append(f"possible clock jump: no event starts for {_seconds(gap)} between event "
                   f"{int(idx[by_time[g]])} and event {int(idx[by_time[g + 1]])}, while all the rest of the "
                   f"trace spans {_seconds(max(rest, 0))}")
    return out


def _thread_cat_key(trace: RankTrace, idx: np.ndarray, cat: np.ndarray, limit: int = 1 << 62) -> np.ndarray:
    """One int64 per event of ``idx``, equal for events of one (pid, tid, cat) and ordered
    as those codes are; a trace whose tables are too large for one int64 gets the dense
    rank of its (thread, cat) instead."""
    thread = trace.thread_keys(idx)
    cats = len(trace.names) + 1   # cat codes from -1 (no cat)
    if (len(trace.pids) + 1) * trace.thread_stride * cats < limit:
        return thread * cats + (cat.astype(np.int64) + 1)
    # each event's row among the sorted distinct (thread, cat) rows (asking for the inverse
    # keeps np.unique off its numpy.ma path: tracemerge.algorithms.arrays)
    rows = np.column_stack((thread, cat.astype(np.int64)))
    return np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


JOB_KEYS = ("job_id", "world_size", "backend")


# Kineto's distributedInfo fields tracemerge reads, and what each must be to be taken
DIST_FIELDS = {"rank": "a rank", "world_size": "a rank count", "backend": "a string"}


def _dist_ok(name: str, value: Any) -> bool:
    if name == "backend":
        return isinstance(value, str)
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def distributed_info(meta: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """(Kineto's ``distributedInfo`` with only the fields of the right type, warnings about
    the others). The profiler writes it, not tracemerge: a field of another type (a list,
    an object, a negative count) is left out and said, as if the file were silent on it;
    null is silence."""
    dist = meta.get("distributedInfo")
    if not isinstance(dist, dict):
        return {}, []
    kept: Dict[str, Any] = {}
    said: List[str] = []
    for name, what in DIST_FIELDS.items():
        value = dist.get(name)
        if value is None:
            continue
        if _dist_ok(name, value):
            kept[name] = value
        else:
            said.append(f"distributedInfo.{name} is not {what}: {_short(value)}; left out")
    return kept, said


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def job_facts(block: Dict[str, Any], meta: Dict[str, Any]) -> Dict[str, Any]:
    """What a file says about its job (its rank-file block and top-level keys):
    {job_id, world_size, backend}, None where silent."""
    dist, _ = distributed_info(meta)
    return {"job_id": block.get("job_id"),
            "world_size": block.get("world_size", dist.get("world_size")),
            "backend": dist.get("backend")}
