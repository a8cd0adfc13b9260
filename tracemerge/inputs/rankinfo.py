"""What a rank file says about its rank: identity, clock anchors, RPC and collective records.

A :class:`RankInfo` is small (no events), so the clock model can be solved over all ranks
while the events themselves are streamed one rank at a time.
"""

import functools
import os
import re
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Callable, Dict, List, Optional, Tuple, TypedDict

import numpy as np

from tracemerge.algorithms.arrays import distinct
from tracemerge.errors import RankConflict, TraceError
from tracemerge.inputs import event_collectives
from tracemerge.inputs.kineto_collectives import communication
from tracemerge.inputs.rankchecks import clock_jumps, distributed_info, job_facts
from tracemerge.inputs.rpc_spans import spans as rpc_spans_of
from tracemerge.model import RankTrace

_RANK_IN_NAME = re.compile(r"(?:rank|worker|node|trainer|proc|process|gpu|device)[-_.]?(\d+)", re.IGNORECASE)
_CYCLE_IN_NAME = re.compile(r"\.cycle(\d+)(?=\.|$)")

PROFILER_SPAN = "PyTorch Profiler (0)"
ITERATION_START = "Iteration Start: PyTorch Profiler"


@dataclass
class RankInfo:
    path: str
    rank: Optional[int]             # None until assigned when the file could not tell
    rank_source: str                # tracemerge | distributedInfo | filename | order
    worker_name: str
    hostname: str
    job_id: Optional[str]
    base_ns: Optional[int]
    start_ns: int                   # profiler start on the file's clock
    start_source: str               # which anchor gave start_ns
    stop_ns: int                    # profiler stop on the file's clock (the block's, the profiler span's end, the last event's end)
    first_ns: int                   # earliest event time (file's clock)
    last_ns: int                    # latest event end (file's clock)
    events: int
    threads: int
    pids: List[Any]                 # original pid values, by pid code
    rpcs: List[Dict[str, Any]] = field(default_factory=list)
    collectives: List[Dict[str, Any]] = field(default_factory=list)
    # send/receive kernels that name their peer ({op, peer, start_ns, end_ns, bytes, span}:
    # kineto_collectives.point_to_point; gloo's sends and receives, event_collectives.point_to_point;
    # span: the span read, where its flow arrow's end goes)
    p2p: List[Dict[str, Any]] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    truncated: bool = False
    timed: bool = True              # the file has at least one timestamped event
    has_block: bool = False         # the file carries a 'tracemerge' block
    partial: bool = False           # described from the file's head alone (`offsets`): the event facts are unknown
    job: Dict[str, Any] = field(default_factory=dict)  # job_id / world_size / backend the file states (rankchecks.job_facts)
    boot_id: str = ""               # the machine's boot id: ranks with the same non-empty one share a wall clock
    remote_rpcs: List[Dict[str, Any]] = field(default_factory=list)  # callee sides the caller fetched (remote_records)
    # a callee's ops that may have served builtins callers sent as themselves, and a
    # caller's admissions by such callees (tracemerge.served_ops / native_callees)
    served_ops: List[Dict[str, Any]] = field(default_factory=list)
    native_callees: List[Dict[str, Any]] = field(default_factory=list)
    # the RPC spans its events hold ({rpc_id, role, ts_ns, dur_ns, cat}: tracemerge.inputs.rpc_spans)
    rpc_spans: List[Dict[str, Any]] = field(default_factory=list)
    cycle: Optional[int] = None     # the torch.profiler.schedule cycle the file holds (rank{R}.cycle{N}), else None
    # a rank made of several cycle files (tracemerge.inputs.cycles): their own infos, in
    # cycle order; the fields above are then the whole process's
    parts: List["RankInfo"] = field(default_factory=list)
    # how the process ended, as its file says: "signal" and "signal_ns" (a rank file written
    # on a signal), "journal" (a rank read from its journal alone: tracemerge.inputs.journal),
    # "flight_recorder" (what a Flight Recorder dump says of its groups: tracemerge.inputs.flight_recorder),
    # "exception" (the exception that ended its block: type, message, time_ns, thread)
    ending: Dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> List["RankInfo"]:
        """The infos of the files this rank is read from: its cycles' infos, else itself."""
        return self.parts or [self]


class Identity(TypedDict):
    """The fields of a RankInfo that a file's block and top-level keys give (:func:`_identity`)."""

    path: str
    rank: Optional[int]
    rank_source: str
    worker_name: str
    hostname: str
    job_id: Optional[str]
    rpcs: List[Dict[str, Any]]
    job: Dict[str, Any]
    boot_id: str
    remote_rpcs: List[Dict[str, Any]]
    cycle: Optional[int]
    served_ops: List[Dict[str, Any]]
    native_callees: List[Dict[str, Any]]


class EventFacts(TypedDict):
    """The fields of a RankInfo that only the events tell (EVENT_FACTS: :func:`event_facts`)."""

    first_ns: int
    last_ns: int
    events: int
    threads: int
    pids: List[Any]
    warnings: List[str]
    timed: bool
    truncated: bool
    rpc_spans: List[Dict[str, Any]]


# rank_source of a single input that names no rank
ASSUMED_RANK = "no rank given; the only input"


def rank_from_name(path: str) -> Optional[int]:
    """The rank spelled in a file name (``rank3``, ``rank-3``, ``worker_3`` …), or None."""
    found = _RANK_IN_NAME.findall(os.path.basename(path))
    return int(found[-1]) if found else None


def cycle_of(path: str, block: Dict[str, Any]) -> Optional[int]:
    """The schedule cycle a file holds: the block's ``cycle``, else ``.cycle{N}`` in its name, else None."""
    if _is_int(block.get("cycle")) and block["cycle"] >= 0:
        return block["cycle"]
    found = _CYCLE_IN_NAME.findall(os.path.basename(path))
    return int(found[-1]) if found else None


def _rank_candidates(path: str, block: Dict[str, Any], meta: Dict[str, Any]) -> tuple[Optional[int], str]:
    if isinstance(block.get("rank"), int):
        # a block made by a reader of another format (a Flight Recorder dump) says where its rank came from
        return block["rank"], str(block.get("rank_source") or "tracemerge")
    dist, _ = distributed_info(meta)
    if "rank" in dist:
        return dist["rank"], "distributedInfo"
    rank = rank_from_name(path)
    if rank is not None:
        return rank, "filename"
    return None, "unknown"


def _profiler_start(trace: RankTrace, first_ns: int) -> Tuple[int, str]:
    block = trace.tracemerge or {}
    if isinstance(block.get("profile_start_ns"), int):
        return block["profile_start_ns"], "profile_start_ns"
    for label in (PROFILER_SPAN, ITERATION_START):
        code = trace.code_of(label)
        if code is not None:
            hits = np.flatnonzero((trace.name == code) & trace.timed)
            if len(hits):
                return int(trace.ts[hits].min()), label
    return first_ns, "first event"


def _profiler_stop(trace: RankTrace, last_ns: int) -> int:
    """Where profiling stopped: the block's profile_stop_ns, else the end of the profiler's
    span, else the last event's end. With the start, the span the clock model is fitted
    for: a rank file's block alone gives both, so alignment needs no events."""
    block = trace.tracemerge or {}
    if isinstance(block.get("profile_stop_ns"), int):
        return block["profile_stop_ns"]
    code = trace.code_of(PROFILER_SPAN)
    if code is not None:
        hits = np.flatnonzero((trace.name == code) & trace.timed & (trace.dur >= 0))
        if len(hits):
            return int((trace.ts[hits] + trace.dur[hits]).max())
    return last_ns


NS_LIMIT = 1 << 62   # times in int64 ns with room for offsets (year 2116)
# an integer a record field may hold: 64 bits, what the JSON writers (orjson) and numpy take
# (a collective's group 2**70 went through to the merged trace's summary and stopped its write)
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1

# What every record must carry to be matched across ranks (docs/rank-file-format.md); the
# other fields are optional, and a side that had not finished leaves its end time out.
RECORD_FIELDS: Dict[str, Dict[str, Any]] = {
    "rpcs": {"rpc_id": str, "role": str, "caller": int, "callee": int},
    "collectives": {"group": (str, int), "seq": int, "start_ns": int},
    # a callee's ops that may have served builtins sent as themselves, and a caller's
    # admission by such callees (capture/native_sides.py; paired by correlate/native_calls.py)
    "served_ops": {"name": str, "tid": (int, str), "start_ns": int, "end_ns": int},
    "native_callees": {"callee": int, "asked_ns": int, "answered_ns": int},
}


def records(path: str, block: Dict[str, Any], key: str, warnings: Optional[List[str]] = None,
            where: Optional[str] = None) -> List[Dict[str, Any]]:
    """The ``key`` records of a rank file's block, checked so a bad one is named, not a crash
    later. An optional field that is null is taken as absent (every reader of a record
    allows for its absence); a collective's ``bytes`` that is no byte count is left out
    with a warning appended to ``warnings`` (LENIENT_FIELDS). ``where``: the list's place
    said in an error (default ``tracemerge.<key>``)."""
    where = where or f"tracemerge.{key}"
    found = block.get(key) or []
    if not isinstance(found, list):
        raise TraceError(path, f"'{where}' is a {type(found).__name__}, not a list")
    if not _records_ok(found, key):
        _name_bad_record(path, found, key, where)
    _drop_nulls(found, key)
    said = _lenient(found, key)
    if warnings is not None:
        warnings.extend(said)
    return _shared_strings(found)


def _drop_nulls(found: List[Dict[str, Any]], key: str) -> None:
    """Optional fields that are null, removed: a record's reader asks ``rec.get("name", "")``,
    which a present null defeats (``None.rpartition``)."""
    names: List[str] = list(OPTIONAL_FIELDS[key]) + list(LENIENT_FIELDS.get(key, {}))
    for name in names:
        if None in map(dict.get, found, repeat(name, len(found)), repeat(0)):
            for rec in found:
                if name in rec and rec[name] is None:
                    del rec[name]


# fields that only inform (a collective's payload size): a bad value is left out and said,
# the record is kept; each maps to its check and what the value must be
LENIENT_FIELDS: Dict[str, Dict[str, Tuple[Callable[[Any], bool], str]]] = {
    "collectives": {"bytes": (lambda v: v.__class__ is int and 0 <= v < NS_LIMIT, "a byte count below 2**62")},
}
WARNED_RECORDS = 3   # bad values named one by one per field; the rest counted


def _lenient(found: List[Dict[str, Any]], key: str) -> List[str]:
    said = []
    for name, (ok, what) in LENIENT_FIELDS.get(key, {}).items():
        present = [v for v in map(dict.get, found, repeat(name, len(found))) if v is not None]
        if set(map(type, present)) <= {int} and (not present or 0 <= min(present) <= max(present) < NS_LIMIT):
            continue  # the common case, at C speed (thousands of records per rank)
        bad = [i for i, rec in enumerate(found) if name in rec and not ok(rec[name])]
        for i in bad[:WARNED_RECORDS]:
            said.append(f"tracemerge.{key}[{i}]: '{name}' is not {what}: {_short(found[i][name])}; left out")
        if len(bad) > WARNED_RECORDS:
            said.append(f"tracemerge.{key}: {len(bad) - WARNED_RECORDS} more records' '{name}' not {what}; left out")
        for i in bad:
            del found[i][name]
    return said


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _shared_strings(found: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The records (freshly decoded, checked dicts) with each repeated string value one
    object: JSON decoding makes a new str for every occurrence, and a rank's thousands of
    records repeat a few names, kinds and statuses (the parent holds every rank's records
    for the whole merge)."""
    seen: Dict[Any, Any] = {}
    for name in set().union(*map(dict.keys, found)):
        values: List[Any] = list(map(dict.get, found, repeat(name, len(found))))
        kinds = set(map(type, values))
        if str not in kinds:
            continue
        if kinds == {str}:  # every record has it, a string: one pass at C speed (no loop per record)
            deque(map(dict.__setitem__, found, repeat(name), map(seen.setdefault, values, values)), maxlen=0)
            continue
        for rec, v in zip(found, values):
            if v.__class__ is str:
                rec[name] = seen.setdefault(v, v)
    return list(found)


# optional fields of a record and what they must be when present (not None)
OPTIONAL_FIELDS: Dict[str, Dict[str, type]] = {
    "rpcs": {"kind": str, "func": str, "name": str, "status": str, "caller_name": str, "callee_name": str},
    "collectives": {"op": str, "group_ranks": list},
    "served_ops": {"shapes": list},
    "native_callees": {"answer": dict},
}
RANK_FIELDS = {"rpcs": ("caller", "callee"), "collectives": (), "served_ops": (), "native_callees": ("callee",)}
RANK_LIMIT = 1 << 31
# a record's times that cannot run backwards, (first, then) where both are present: a
# callee's end before its start was joined and gave the report a negative execution mean
ORDERED_TIMES: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "rpcs": (("send_ns", "complete_ns"), ("send_ns", "complete_by_ns"), ("start_ns", "end_ns"),
             ("start_ns", "end_by_ns")),
    "collectives": (("start_ns", "end_ns"),),
    "served_ops": (("start_ns", "end_ns"),),
    "native_callees": (("asked_ns", "answered_ns"),),
}


def _records_ok(found: List[Any], key: str) -> bool:
    """Whether every record is well formed, by one C-level pass per field (thousands of
    records per rank: a loop per record costs ~0.1 s a rank): each check below, in turn,
    over all of them (the first to refuse ends it)."""
    return set(map(type, found)) <= {dict} and all(ok(found, key) for ok in _RECORD_CHECKS)


def _column(found: List[Dict[str, Any]], name: str) -> List[Any]:
    return list(map(dict.get, found, repeat(name)))


def _fields_ok(found: List[Dict[str, Any]], key: str) -> bool:
    """The fields every record has: of their kind, integers within int64."""
    for name, kind in RECORD_FIELDS[key].items():
        values = _column(found, name)
        if not set(map(type, values)) <= set(kind if isinstance(kind, tuple) else (kind,)):
            return False
        ints = [v for v in values if v.__class__ is int]
        if ints and not INT_MIN <= min(ints) <= max(ints) <= INT_MAX:
            return False
    return True


def _optional_ok(found: List[Dict[str, Any]], key: str) -> bool:
    return all(set(map(type, _column(found, name))) <= {kind, type(None)} for name, kind in OPTIONAL_FIELDS[key].items())


def _ranks_ok(found: List[Dict[str, Any]], key: str) -> bool:
    return not found or all(0 <= min(values) <= max(values) < RANK_LIMIT
                            for values in (_column(found, name) for name in RANK_FIELDS[key]))


def _times_ok(found: List[Dict[str, Any]], key: str) -> bool:
    """Every ``*_ns`` field, whatever the record: integer ns within NS_LIMIT, or None."""
    for name in set().union(*map(dict.keys, found)):
        if name.endswith("_ns"):
            values = _column(found, name)
            if not set(map(type, values)) <= {int, type(None)}:
                return False
            present = [v for v in values if v is not None]
            if present and not -NS_LIMIT < min(present) <= max(present) < NS_LIMIT:
                return False
    return True


def _order_ok(found: List[Dict[str, Any]], key: str) -> bool:
    """No time before the one it follows (ORDERED_TIMES)."""
    for first, then in ORDERED_TIMES[key]:
        pairs = [(a, b) for a, b in zip(_column(found, first), _column(found, then)) if a is not None and b is not None]
        if pairs and min(b - a for a, b in pairs) < 0:
            return False
    return True


def _group_ranks_ok(found: List[Dict[str, Any]], key: str) -> bool:
    if key != "collectives":
        return True
    ranks = [r for rec in found for r in (rec.get("group_ranks") or ())]
    return set(map(type, ranks)) <= {int} and (not ranks or 0 <= min(ranks) <= max(ranks) < RANK_LIMIT)


_RECORD_CHECKS: Tuple[Callable[[List[Dict[str, Any]], str], bool], ...] = (
    _fields_ok, _optional_ok, _ranks_ok, _times_ok, _order_ok, _group_ranks_ok)


def _name_bad_record(path: str, found: List[Any], key: str, where: str) -> None:
    for i, rec in enumerate(found):
        check_record(path, f"{where}[{i}]", rec, key)
    raise AssertionError(f"{path}: {where}: refused by the fast check, passed by the one that names")


def check_record(path: str, where: str, rec: Any, key: str) -> None:
    """The schema check of one ``key`` record (a rank file's, a journal line's): a value
    that is not what the field must be is named with the file, where the record is, the
    field and the value (exit 3). Times that run backwards (an end before its start) too."""
    if not isinstance(rec, dict):
        raise TraceError(path, f"{where} is a {type(rec).__name__}, not an object")
    _check_fields(path, where, rec, key)
    _check_times(path, where, rec)
    for r in rec.get("group_ranks") or ():
        if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < RANK_LIMIT:
            raise TraceError(path, f"{where}: 'group_ranks' holds {r!r}, not a rank")
    for first, then in ORDERED_TIMES[key]:
        if isinstance(rec.get(first), int) and isinstance(rec.get(then), int) and rec[then] < rec[first]:
            raise TraceError(path, f"{where}: '{then}' {rec[then]} is before '{first}' {rec[first]} "
                                   f"({rec[first] - rec[then]} ns earlier): its times run backwards")


def _check_fields(path: str, where: str, rec: Dict[str, Any], key: str) -> None:
    """check_record's fields of ``key`` records: required, optional and rank fields."""
    for name, kind in RECORD_FIELDS[key].items():
        value = rec.get(name)
        if (not isinstance(value, kind) or isinstance(value, bool)
                or isinstance(value, int) and not INT_MIN <= value <= INT_MAX):
            raise TraceError(path, f"{where}: missing or bad '{name}' ({value!r})")
    for name, kind in OPTIONAL_FIELDS[key].items():
        value = rec.get(name)
        if value is not None and not isinstance(value, kind):
            raise TraceError(path, f"{where}: '{name}' is not a {kind.__name__}: {value!r}")
    for name in RANK_FIELDS[key]:
        if not 0 <= rec[name] < RANK_LIMIT:
            raise TraceError(path, f"{where}: '{name}' is not a rank: {rec[name]!r}")


def _check_times(path: str, where: str, rec: Dict[str, Any]) -> None:
    """check_record's ``*_ns`` fields, whatever the record: integer ns within NS_LIMIT."""
    for name, value in rec.items():
        if name.endswith("_ns") and value is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TraceError(path, f"{where}: '{name}' is not integer ns ({value!r})")
            if not -NS_LIMIT < value < NS_LIMIT:
                raise TraceError(path, f"{where}: '{name}' {value} is out of range (beyond year 2116: 2**62 ns)")


def check_base(path: str, base: Any) -> None:
    """A baseTimeNanoseconds that int64 ns cannot hold with room for the events after it."""
    if base is not None and not (isinstance(base, int) and -NS_LIMIT < base < NS_LIMIT):
        raise TraceError(path, f"'baseTimeNanoseconds' {base!r} is out of range (beyond year 2116: 2**62 ns)")


def check_block(path: str, block: Dict[str, Any]) -> None:
    """The block's own fields that later steps rely on: a bad one is named here."""
    job_id = block.get("job_id")
    if job_id is not None and not (isinstance(job_id, str) or isinstance(job_id, int) and -2**63 <= job_id < 2**63):
        # an int job id is taken as it is, but JSON writers refuse integers beyond 64 bits
        raise TraceError(path, f"'tracemerge.job_id' is not a string: {job_id!r}")
    for name in ("rank", "world_size"):
        value = block.get(name)
        if value is not None and (not isinstance(value, int) or not 0 <= value < RANK_LIMIT):
            raise TraceError(path, f"'tracemerge.{name}' is not a rank count or rank: {value!r}")
    for name in ("profile_start_ns", "profile_stop_ns"):
        value = block.get(name)
        if isinstance(value, int) and not -NS_LIMIT < value < NS_LIMIT:
            raise TraceError(path, f"'tracemerge.{name}' {value} is out of range (beyond year 2116: 2**62 ns)")
    if "journal" in block and not _is_ending(block["journal"]):
        # what inputs.journal makes of a journal; a rank file's own "journal" key (true,
        # {"alive_ns": 5}) was taken as one and ended every command in exit 1
        raise TraceError(path, f"'tracemerge.journal' is not a journal's ending ({{\"alive_ns\": ns or null, "
                               f"\"closed\": bool, \"cut\": bool}}): {_short(block['journal'])}")
    for name, kind in (("signal", str), ("signal_ns", int)):
        value = block.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise TraceError(path, f"'tracemerge.{name}' is not a {kind.__name__}: {_short(value)}")


def _is_ending(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) == {"alive_ns", "closed", "cut"}
            and (value["alive_ns"] is None or _is_int(value["alive_ns"]) and -NS_LIMIT < value["alive_ns"] < NS_LIMIT)
            and isinstance(value["closed"], bool) and isinstance(value["cut"], bool))


def describe(trace: RankTrace) -> RankInfo:
    """The :class:`RankInfo` of one read trace."""
    check_block(trace.path, trace.tracemerge or {})  # before anything reads its fields (the window, below)
    facts = event_facts(trace)
    span = (facts["first_ns"], facts["last_ns"])
    start, start_source = _profiler_start(trace, span[0])
    block = trace.tracemerge or {}
    said: List[str] = []  # warnings about the block, added after the RankInfo is made
    found, p2p = collectives_of(trace, records(trace.path, block, "collectives", said) if "collectives" in block
                                else None, said)
    info = RankInfo(
        **_identity(trace.path, block, trace.meta), base_ns=trace.base_ns, start_ns=start, start_source=start_source,
        stop_ns=max(start, _profiler_stop(trace, span[1])), **facts, collectives=found, p2p=p2p,
        has_block=trace.tracemerge is not None, ending=ending_of(block))
    info.warnings += said + distributed_info(trace.meta)[1]
    return info


def collectives_of(trace: RankTrace, captured: Optional[List[Dict[str, Any]]],
                   said: List[str]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(collective records, point-to-point records) of a rank: the capture's records
    (``captured``, None without a block) joined with the collectives its gloo events show
    (:func:`tracemerge.inputs.event_collectives.merged`, sentences appended to ``said``);
    without a block, the c10d fields and NCCL kernels of the trace
    (:mod:`tracemerge.inputs.kineto_collectives`), else its gloo events; point-to-point
    records from NCCL's kernels, else from gloo's events (the capture records none)."""
    if captured is not None:
        # NCCL's records beside the capture's would count its Python calls twice: the capture's are kept
        events, threads = event_collectives.collected(trace)
        p2p = event_collectives.point_to_point(trace)
        found, more = event_collectives.merged(captured, events, trace.path, threads,
                                               event_collectives.p2p_group(trace, p2p))
        said.extend(more)
        return found, p2p
    found, p2p = communication(trace)
    return (found or list(event_collectives.collectives(trace))), (p2p or event_collectives.point_to_point(trace))


def describe_head(path: str, head: Dict[str, Any]) -> Optional[RankInfo]:
    """The :class:`RankInfo` of a rank file from its head alone (:func:`tracemerge.inputs.head.read_head`),
    or None when the head lacks what the clock model needs (profiling window, records) and
    the events must be read. The facts about events are unknown (``partial``): only a
    command that needs nothing of the events (``offsets``) describes files this way."""
    block = head.get("tracemerge")
    base = head.get("baseTimeNanoseconds")
    if (not isinstance(block, dict) or "collectives" not in block or (base is not None and not isinstance(base, int))
            or not all(_is_int(block.get(k)) for k in ("profile_start_ns", "profile_stop_ns"))):
        return None
    meta = {k: v for k, v in head.items() if k != "tracemerge"}
    start, stop = block["profile_start_ns"], block["profile_stop_ns"]
    said: List[str] = []  # warnings about the block, added after the RankInfo is made
    info = RankInfo(**_identity(path, block, meta), base_ns=base, start_ns=start, start_source="profile_start_ns",
                    stop_ns=max(start, stop), first_ns=start, last_ns=max(start, stop), events=0, threads=0, pids=[],
                    collectives=records(path, block, "collectives", said), has_block=True, partial=True,
                    ending=ending_of(block))
    info.warnings += said + distributed_info(meta)[1]
    return info


def ending_of(block: Dict[str, Any]) -> Dict[str, Any]:
    """How the process that wrote ``block`` ended, where the block says (RankInfo.ending)."""
    return {k: block[k] for k in ("signal", "signal_ns", "journal", "flight_recorder", "exception") if k in block}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _identity(path: str, block: Dict[str, Any], meta: Dict[str, Any]) -> Identity:
    """The fields of a RankInfo that the block and the top-level keys give."""
    check_block(path, block)
    check_base(path, meta.get("baseTimeNanoseconds"))
    rank, source = _rank_candidates(path, block, meta)
    rpcs, boot = records(path, block, "rpcs"), block.get("boot_id")
    stem = os.path.basename(path).split(".")[0]
    host = block.get("hostname") or meta.get("host_name") or meta.get("hostname") or "unknown host"
    return dict(path=path, rank=rank, rank_source=source, worker_name=str(block.get("worker_name") or stem),
                hostname=str(host), job_id=block.get("job_id"), rpcs=rpcs,
                job=job_facts(block, meta), boot_id=boot if isinstance(boot, str) else "",
                remote_rpcs=remote_records(path, block, rpcs), cycle=cycle_of(path, block),
                served_ops=records(path, block, "served_ops"), native_callees=records(path, block, "native_callees"))


def remote_records(path: str, block: Dict[str, Any], rpcs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The callee records of this file's own calls that its capture fetched from the callees
    (``tracemerge.remote_sides``), as callee-role records like a callee's own file gives.

    Each side object carries ``"clock_rank": R``: its ``_ns`` times are on rank R's clock,
    which is the callee's, as a callee record's are. A side of no call this file made, or a
    malformed one, is left out; a callee that could not answer is named in a warning by the
    caller of this function (its ``error``).
    """
    found = block.get("remote_sides") or []
    if not isinstance(found, list):
        raise TraceError(path, f"'tracemerge.remote_sides' is a {type(found).__name__}, not a list")
    mine = {r["rpc_id"]: r for r in rpcs if r["role"] == "caller"}
    out = []
    for n, side in enumerate(found):
        if not isinstance(side, dict) or not _is_int(side.get("clock_rank")):
            raise TraceError(path, f"tracemerge.remote_sides[{n}]: missing or bad 'clock_rank'")
        calls = side.get("calls") or []
        if not isinstance(calls, list):
            raise TraceError(path, f"tracemerge.remote_sides[{n}].calls is not a list")
        for j, call in enumerate(calls):
            caller = mine.get(call.get("rpc_id")) if isinstance(call, dict) and isinstance(call.get("rpc_id"), str) else None
            if caller is not None and caller["callee"] == side["clock_rank"]:
                out.append(_remote_record(path, f"tracemerge.remote_sides[{n}].calls[{j}]", side, call, caller))
    return out


def _remote_record(path: str, where: str, side: Dict[str, Any], call: Dict[str, Any],
                   caller: Dict[str, Any]) -> Dict[str, Any]:
    """The callee-role record of one fetched ``call`` of ``side``, made from this file's ``caller`` record."""
    rec: Dict[str, Any] = {k: caller[k] for k in ("rpc_id", "kind", "func", "name", "caller", "callee", "callee_name")
                           if k in caller}
    rec.update(role="callee", status=str(call.get("status", "ok")), source="remote",
               tid=call["tid"] if _is_int(call.get("tid")) else 0,
               hostname=str(side.get("hostname") or ""), boot_id=str(side.get("boot_id") or ""))
    for k in ("start_ns", "end_ns", "end_by_ns"):
        value: Any = call.get(k)
        if _is_int(value):
            if not -NS_LIMIT < value < NS_LIMIT:  # as a record's own times are checked
                raise TraceError(path, f"{where}: '{k}' {value} is out of range (beyond year 2116: 2**62 ns)")
            rec[k] = value
    return rec


EVENT_FACTS = ("first_ns", "last_ns", "events", "threads", "pids", "warnings", "timed", "truncated", "rpc_spans")


def event_facts(trace: RankTrace) -> EventFacts:
    """What only the events tell about a rank: the RankInfo fields named in EVENT_FACTS."""
    span = trace.time_span()
    # a rank read from its journal has no events, as its own note says (inputs.journal)
    journal = trace.tracemerge is not None and "journal" in trace.tracemerge
    empty = [] if span or journal else ["no timestamped events: the file adds no time span to the merged trace"]
    timed = span is not None
    span = span or (0, 0)
    threads = len(distinct(trace.thread_keys()))
    return dict(first_ns=span[0], last_ns=span[1], events=len(trace), threads=threads, pids=list(trace.pids),
                warnings=list(trace.warnings) + empty + clock_jumps(trace, PROFILER_SPAN), timed=timed,
                truncated=trace.truncated, rpc_spans=rpc_spans_of(trace))


# the fields of a rank's records that name ranks, by the RankInfo list holding them
RANK_NAMES: Dict[str, Tuple[str, ...]] = {"rpcs": ("caller", "callee"), "remote_rpcs": ("caller", "callee"),
                                          "native_callees": ("callee",), "p2p": ("peer",)}


def _renumber_records(infos: List[RankInfo], claimed: List[Optional[int]]) -> None:
    """``--rank-from order``: the records renumbered with their files. Each file's records
    name ranks as the job numbered them (the ranks the files claim); given ``rank1`` first,
    the records of rank 0's file still said 0 -> 1, which the renumbered files read as a
    call to itself (worker1's RPC row was computed from worker0's events). Where the files
    claim no ranks, or the same one twice, the records cannot be renumbered: said."""
    if all(c is None for c in claimed) or claimed == [info.rank for info in infos]:
        return
    if None in claimed or len(set(claimed)) < len(claimed):
        for info in infos:
            if info.rpcs or info.collectives:
                info.warnings = list(info.warnings) + [
                    "--rank-from order: the records name ranks as the job numbered them, and the files do not "
                    "all claim distinct ranks, so they cannot be renumbered: RPCs and collectives may be joined "
                    "wrongly; give the files their own ranks (--rank-from auto)"]
        return
    new = {old: info.rank for old, info in zip(claimed, infos)}
    for info in infos:
        _renumbered(info, functools.partial(_moved, new))


def _moved(new: Dict[Any, Any], rank: Any) -> Any:
    return new.get(rank, rank)


def _renumbered(info: RankInfo, moved: Callable[[Any], Any]) -> None:
    """Every rank ``info``'s records name (RANK_NAMES, a native callee's answer's clock rank,
    a collective's group) as ``moved`` renumbers it."""
    for attr, names in RANK_NAMES.items():
        setattr(info, attr, [{**rec, **{n: moved(rec[n]) for n in names if n in rec}} for rec in getattr(info, attr)])
    info.native_callees = [{**rec, "answer": {**rec["answer"], "clock_rank": moved(rec["answer"].get("clock_rank"))}}
                           if isinstance(rec.get("answer"), dict) and "clock_rank" in rec["answer"] else rec
                           for rec in info.native_callees]
    info.collectives = [{**rec, "group_ranks": [moved(r) for r in rec["group_ranks"]]} if rec.get("group_ranks")
                        else rec for rec in info.collectives]


def rank_of(info: RankInfo) -> int:
    """The rank of a described file once ranks are assigned (:func:`assign_ranks`)."""
    assert info.rank is not None, f"{info.path}: no rank assigned yet"
    return info.rank


def assign_ranks(infos: List[RankInfo], rank_from: str = "auto", strict: bool = False) -> List[RankInfo]:
    """Give every info its rank; ``rank_from="order"`` numbers files in the order given; a
    single file that names no rank is rank 0 (``rank_source`` :data:`ASSUMED_RANK`), and
    several files none of which names a rank take the order given, each with a warning
    (``strict``: refused instead).

    Two files claiming one rank, or a file whose rank cannot be told among files that name
    theirs, is an error: merging them silently would put two workers' events on one
    timeline row.
    """
    if rank_from == "order":
        claimed = [info.rank for info in infos]
        for i, info in enumerate(infos):
            info.rank, info.rank_source = i, "order"
        _renumber_records(infos, claimed)
        return infos
    _refuse_unranked_journals(infos)
    if len(infos) == 1 and infos[0].rank is None:
        # one trace of a job without a process group (a plain torch.profiler run): nothing
        # to tell apart, so it is rank 0, and the CLI says so in a note
        infos[0].rank, infos[0].rank_source = 0, ASSUMED_RANK
        return infos
    if len(infos) > 1 and not strict and all(info.rank is None for info in infos):
        # traces of other people's jobs often name no rank at all: the order given is the
        # only order there is, said on every file (a mix of named and unnamed is refused
        # below: renumbering the named ones would contradict them)
        for i, info in enumerate(infos):
            info.rank, info.rank_source = i, "order given (no file names a rank)"
            info.warnings = list(info.warnings) + [
                f"no rank in the file: rank {i} by the order of the files given (--strict refuses)"]
        return infos
    _refuse_conflicts(infos)
    return infos


def _refuse_unranked_journals(infos: List[RankInfo]) -> None:
    """A journal whose rank was never learned is refused: never taken as rank 0, nor
    numbered by the order given, as it is some rank that died early."""
    for info in infos:
        if info.rank is None and info.ending.get("journal") is not None:
            meta = info.job
            raise RankConflict(f"{info.path}: a journal whose rank was never learned (the process died before "
                               f"RPC or torch.distributed told it, and it holds no call that names it; pid "
                               f"{info.worker_name.removeprefix('pid')} on {info.hostname}"
                               f"{', job ' + str(meta['job_id']) if meta.get('job_id') else ''}): rename it "
                               "rank{R}.journal, or pass --rank-from order")


def _refuse_conflicts(infos: List[RankInfo]) -> None:
    """A file with no rank among files that name theirs, a cycle file given twice, and two
    files claiming one rank, each refused (in that order)."""
    for info in infos:
        if info.rank is None:
            raise RankConflict(f"{info.path}: cannot tell the rank (no 'tracemerge' block, no "
                               "distributedInfo.rank, no rank in the file name); pass --rank-from order")
    cycles: Dict[Tuple[Optional[int], int], RankInfo] = {}
    for info in infos:
        other = cycles.setdefault((info.rank, info.cycle), info) if info.cycle is not None else info
        if other is not info:  # said before the rank conflict it also is: it is the cause
            raise RankConflict(f"{info.path}: holds cycle {info.cycle} of rank {info.rank}, as {other.path} does "
                               "(one file given twice, or copied under another name?): give each cycle file once")
    seen: Dict[Optional[int], RankInfo] = {}
    for info in infos:
        other = seen.setdefault(info.rank, info)
        if other is not info:
            raise RankConflict(f"{info.path}: rank {info.rank} (from {info.rank_source}) is also claimed by "
                               f"{other.path} (from {other.rank_source}); pass --rank-from order to number "
                               "files in the order given")
