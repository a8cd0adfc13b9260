"""Schedule cycles: the files a ``torch.profiler.schedule`` writes for one rank
(``rank{R}.cycle{N}.json.gz``, one per completed recording cycle) are windows of one
process, not ranks of their own.

:func:`join_cycles` makes one :class:`RankInfo` of a rank's cycle files: its ``parts`` are
the files' own infos in cycle order, and its fields are the whole process's (the earliest
start, the latest stop, every cycle's RPC and collective records), so the rank is one
process of the merged trace and its clock is fitted to the records of every cycle.
:func:`joined_trace` is the events of such a rank as one trace, for the readers that
take a rank whole (reports, analyses); ``combine`` writes the cycles one after the other
instead, each read by the compiled core where it can.
"""

import os
from dataclasses import replace
from typing import Dict, List, Tuple

import numpy as np

from tracemerge.errors import RankConflict, UsageError
from tracemerge.inputs.rankinfo import RankInfo
from tracemerge.model import Args, Extra, RankTrace

# what the files of one process share; cycle files that differ in any are not one process
SAME_PROCESS = ("job_id", "hostname", "boot_id", "worker_name")


def keep_cycle(infos: List[RankInfo], cycle: int) -> List[RankInfo]:
    """``--cycle N``: the files of cycle ``cycle``, and the files that hold no cycle."""
    given = sorted({i.cycle for i in infos if i.cycle is not None})
    if not given:
        raise UsageError(f"--cycle {cycle}: no input is a schedule cycle file (rank{{R}}.cycle{{N}}.json.gz)")
    if cycle not in given:
        raise UsageError(f"--cycle {cycle}: no input holds cycle {cycle} (the inputs hold cycles "
                              f"{', '.join(map(str, given))})")
    return [i for i in infos if i.cycle is None or i.cycle == cycle]


def join_cycles(infos: List[RankInfo]) -> List[RankInfo]:
    """``infos`` with the cycle files of each rank joined into one info (:func:`joined`).

    Only files whose rank is known and that all hold distinct cycles are joined; two files
    of one rank that are not such a set (a whole-run file beside cycle files, one cycle
    given twice) are left apart, for the rank check to refuse.
    """
    number_plain_cycles(infos)
    by_rank: Dict[int, List[RankInfo]] = {}
    for info in infos:
        if info.cycle is not None and info.rank is not None:
            by_rank.setdefault(info.rank, []).append(info)
    groups = {}
    for rank, group in by_rank.items():
        alone = sum(i.rank == rank and i.cycle is None for i in infos)
        if len(group) > 1 and not alone and len({i.cycle for i in group}) == len(group):
            groups[rank] = joined(group)
    out, done = [], set()
    for info in infos:
        whole = groups.get(info.rank) if info.cycle is not None and info.rank is not None else None
        if whole is None:
            out.append(info)
        elif info.rank not in done:
            done.add(info.rank)
            out.append(whole)
    return out


def number_plain_cycles(infos: List[RankInfo]) -> None:
    """Give the files of ``tensorboard_trace_handler`` their cycles: plain traces (no block)
    of one rank (``distributedInfo.rank``) and one process (the ``<host>_<pid>`` their names
    begin with) whose profiling windows do not overlap are that process's schedule cycles,
    numbered in time order. Files that overlap, or of several processes, are left as they
    are, for the rank check to refuse."""
    by_rank: Dict[Tuple[int, str], List[RankInfo]] = {}
    for info in infos:
        if info.cycle is None and info.rank is not None and not info.has_block and info.rank_source == "distributedInfo":
            by_rank.setdefault((info.rank, info.worker_name), []).append(info)
    claimed: Dict[int, int] = {}
    for rank, _ in by_rank:
        claimed[rank] = claimed.get(rank, 0) + 1
    for (rank, _), group in by_rank.items():
        if len(group) < 2 or claimed[rank] > 1:
            continue
        group = sorted(group, key=lambda i: (i.start_ns, i.stop_ns))
        if all(a.stop_ns <= b.start_ns for a, b in zip(group, group[1:])):
            for n, info in enumerate(group):
                info.cycle = n


def joined(parts: List[RankInfo]) -> RankInfo:
    """One info of a rank's cycle files (``parts``, any order), refused when they are not
    files of one process."""
    parts = sorted(parts, key=lambda p: -1 if p.cycle is None else p.cycle)
    first = parts[0]
    for part in parts[1:]:
        for key in SAME_PROCESS:
            if getattr(part, key) != getattr(first, key):
                raise RankConflict(f"{part.path}: cycle {part.cycle} of rank {part.rank} is not from the process of "
                                   f"{first.path} ({key} {getattr(part, key)!r}, not {getattr(first, key)!r}); pass "
                                   "--cycle N to keep one cycle, or give the files of one run")
    for before, part in zip(parts, parts[1:]):
        # a process's cycles are windows one after the other: one that overlaps the one
        # before is a file given twice (copied under another cycle number), not a cycle
        if part.start_ns < before.stop_ns:
            copy = next((p for p in parts if p is not part and (p.start_ns, p.stop_ns, p.events)
                         == (part.start_ns, part.stop_ns, part.events)), None)
            said = f"is a copy of {copy.path}" if copy is not None else (
                f"overlaps the window of cycle {before.cycle} ({before.path})")
            raise RankConflict(f"{part.path}: cycle {part.cycle} of rank {part.rank} {said}: the cycles of one "
                               "process are windows one after the other; give each cycle file once")
    info = replace(first, cycle=None, parts=parts)
    refresh(info)
    return info


# the RankInfo lists a joined info holds as its parts' one after the other, and the flags
# it has when any part has them
_CONCATENATED = ("rpcs", "p2p", "remote_rpcs", "served_ops", "native_callees", "rpc_spans")
_ANY = ("truncated", "timed", "has_block", "partial")


def refresh(info: RankInfo) -> None:
    """Set the fields of a joined ``info`` from its parts."""
    parts = info.parts
    timed = [p for p in parts if p.timed] or parts
    info.start_ns, info.start_source = min((p.start_ns, p.start_source) for p in parts)
    info.stop_ns = max(p.stop_ns for p in parts)
    info.first_ns = min(p.first_ns for p in timed)
    info.last_ns = max(p.last_ns for p in timed)
    info.events = sum(p.events for p in parts)
    info.threads = max(p.threads for p in parts)  # the threads of its busiest cycle: the files do not name them
    info.pids = list(dict.fromkeys(pid for p in parts for pid in p.pids))
    info.collectives = _numbered(_concatenated(parts, "collectives"))
    for name in _CONCATENATED:
        setattr(info, name, _concatenated(parts, name))
    info.warnings = _said_once(parts)
    for name in _ANY:
        setattr(info, name, any(getattr(p, name) for p in parts))
    info.ending = parts[-1].ending  # how the process ended: its last file says


def _concatenated(parts: List[RankInfo], name: str) -> list:
    return [r for p in parts for r in getattr(p, name)]


def pids_agree(trace: RankTrace, pids: Tuple) -> bool:
    """Whether the pid codes of ``trace`` (one cycle) are those of ``pids`` (the table of
    its whole rank): every output pid of a rank is its pid code's, so the cycles of one
    process must agree on them."""
    return tuple(trace.pids) == tuple(pids[:len(trace.pids)])


def recoded(trace: RankTrace, pids: Tuple) -> RankTrace:
    """``trace`` (read by the Python path) with the pid codes of ``pids``, the table of its
    whole rank, in which every pid of the trace is found."""
    index = {pid: code for code, pid in enumerate(pids)}
    table = np.array([index[p] for p in trace.pids] or [0], dtype=np.int32)
    return replace(trace, pids=list(pids), pid=table[trace.pid])


def joined_trace(traces: List[RankTrace]) -> RankTrace:
    """The events of a rank's cycles (``traces``, in cycle order) as one trace: the tables
    are the union of theirs, the columns theirs one after the other. The cycles of one
    process share its clock, so times stay as they are."""
    if len(traces) == 1:
        return traces[0]
    names: Dict[str, int] = {}
    pids: Dict[object, int] = {}
    tids: Dict[object, int] = {}
    name, cat, pid, tid = [], [], [], []
    for t in traces:
        codes = _codes(names, t.names)
        name.append(codes[t.name])
        cat.append(np.where(t.cat >= 0, codes[np.maximum(t.cat, 0)], -1))
        pid.append(_codes(pids, t.pids)[t.pid])
        tid.append(_codes(tids, t.tids)[t.tid])
    raw = all(t.args.raw for t in traces)
    # raw (undecoded) args of one cycle and decoded ones of another: all decoded
    args = [a for t in traces for a in (t.args.items if raw or not t.args.raw else list(t.args))]
    first = traces[0]
    return RankTrace(
        path=first.path, meta=first.meta, tracemerge=first.tracemerge, base_ns=first.base_ns,
        names=list(names), pids=list(pids), tids=list(tids),
        ph=np.concatenate([t.ph for t in traces]), name=np.concatenate(name).astype(np.int32),
        cat=np.concatenate(cat).astype(np.int32), pid=np.concatenate(pid).astype(np.int32),
        tid=np.concatenate(tid).astype(np.int32), ts=np.concatenate([t.ts for t in traces]),
        dur=np.concatenate([t.dur for t in traces]), args=Args(args, raw),
        extra=Extra([e for t in traces for e in t.extra]),
        warnings=[w for t in traces for w in t.warnings], truncated=any(t.truncated for t in traces))


def _codes(table: Dict, values: list) -> np.ndarray:
    """The codes of ``values`` in ``table`` (added where new), as an array indexed by the old code."""
    return np.array([table.setdefault(v, len(table)) for v in values] or [0], dtype=np.int64)


def _numbered(records: List[dict]) -> List[dict]:
    """The cycles' collective records with the inferred ones (each numbered by its place in
    its own cycle) numbered by their place in the whole rank, per group: the cycles of every
    rank hold the same steps, so the k-th of the rank is the k-th of every other."""
    count: Dict[str, int] = {}
    out = []
    for rec in records:
        if rec.get("seq_inferred"):
            rec = dict(rec, seq=count.get(str(rec["group"]), 0))
            count[str(rec["group"])] = rec["seq"] + 1
        out.append(rec)
    return out


def _said_once(parts: List[RankInfo]) -> List[str]:
    """The cycles' warnings, each named by its cycle and file; one that several cycles give
    word for word (a file-level fact every cycle file repeats) is said once, naming them all."""
    by_text: Dict[str, List[RankInfo]] = {}
    for p in parts:
        for w in dict.fromkeys(p.warnings):
            by_text.setdefault(w, []).append(p)
    out = []
    for w, said in by_text.items():
        if len(said) == 1:
            out.append(f"cycle {said[0].cycle} ({os.path.basename(said[0].path)}): {w}")
        else:
            out.append(f"cycles {', '.join(str(p.cycle) for p in said)} "
                       f"({', '.join(os.path.basename(p.path) for p in said)}): {w}")
    return out
