"""The schema of a merged trace's summary: the ``"tracemerge"`` object ``combine`` writes
after the events, read back by ``info``, ``report`` and ``diff``.

A merged trace is a file like any other input, so its summary is checked before anything
reads it: one value of the wrong type (records ``"x"``, a record's ``send_ns`` ``"x"``, an
alignment's rank ``-1``, ``events`` ``"x"``) once ended those commands in exit 1. Each field
a reader takes is named here with what it must be; a value that is not is a one-line error
naming the file, the field's place and the value (exit 3). Records go through the same
check as a rank file's (:func:`tracemerge.inputs.rankinfo.records`: their times that run
backwards included). Fields no reader takes are left as written.

A check is a function ``(path, where, value) -> value`` that raises :class:`TraceError` or
returns the value as readers may take it (records: with their null optional fields
removed, as a rank file's are).
"""

import math
from typing import Any, Callable, Dict, Iterable

from tracemerge.errors import TraceError
from tracemerge.inputs.rankinfo import INT_MAX, INT_MIN, NS_LIMIT, RANK_LIMIT, records

Check = Callable[[str, str, Any], Any]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _refuse(path: str, where: str, what: str, value: Any) -> TraceError:
    return TraceError(path, f"'{where}' is not {what}: {_short(value)}")


def integer(lo: int, hi: int, what: str) -> Check:
    def check(path: str, where: str, value: Any) -> Any:
        if value.__class__ is not int or not lo <= value < hi:
            raise _refuse(path, where, what, value)
        return value
    return check


def number(bound: float, what: str) -> Check:
    def check(path: str, where: str, value: Any) -> Any:
        if value.__class__ not in (int, float) or not math.isfinite(value) or abs(value) > bound:
            raise _refuse(path, where, what, value)
        return value
    return check


def kind(types: tuple, what: str) -> Check:
    def check(path: str, where: str, value: Any) -> Any:
        if value.__class__ not in types:
            raise _refuse(path, where, what, value)
        return value
    return check


def optional(inner: Check) -> Check:
    def check(path: str, where: str, value: Any) -> Any:
        return None if value is None else inner(path, where, value)
    return check


def list_of(item: Check) -> Check:
    def check(path: str, where: str, value: Any) -> Any:
        if value.__class__ is not list:
            raise _refuse(path, where, "a list", value)
        return [item(path, f"{where}[{i}]", v) for i, v in enumerate(value)]
    return check


def mapping(key: Check, item: Check) -> Check:
    """An object whose keys are checked by ``key`` (given the key's text)."""
    def check(path: str, where: str, value: Any) -> Any:
        if value.__class__ is not dict:
            raise _refuse(path, where, "an object", value)
        for k, v in value.items():
            key(path, f"{where} key", k)
            item(path, f"{where}.{k}", v)
        return value
    return check


def obj(fields: Dict[str, Check], required: Iterable[str] = (), only: bool = False) -> Check:
    """An object whose ``fields`` are checked where present (``required`` ones must be);
    ``only``: no other field either (it is built into a dataclass)."""
    required = tuple(required)

    def check(path: str, where: str, value: Any) -> Any:
        if value.__class__ is not dict:
            raise _refuse(path, where, "an object", value)
        for name in required:
            if name not in value:
                raise TraceError(path, f"'{where}' has no '{name}'")
        if only and not set(value) <= set(fields):
            extra = sorted(set(value) - set(fields), key=str)[0]
            raise TraceError(path, f"'{where}' has a field no merged trace holds: {_short(extra)}")
        return {**value, **{name: c(path, f"{where}.{name}", value[name]) for name, c in fields.items()
                            if name in value}}
    return check


def record_list(key: str) -> Check:
    """A list of ``key`` records, checked as a rank file's are (and null optionals dropped)."""
    def check(path: str, where: str, value: Any) -> Any:
        return records(path, {key: value}, key, where=where)
    return check


def rank_text(path: str, where: str, value: Any) -> Any:
    """An object key that names a rank (``pids``' keys: JSON keys are strings)."""
    if not (isinstance(value, str) and value.isdigit() and int(value) < RANK_LIMIT):
        raise _refuse(path, where, "a rank", value)
    return value


RANK = integer(0, RANK_LIMIT, "a rank")
NS = integer(-NS_LIMIT + 1, NS_LIMIT, "integer ns within 2**62")
COUNT = integer(0, NS_LIMIT, "a count")
INT64 = integer(INT_MIN, INT_MAX + 1, "a 64-bit integer")
TEXT = kind((str,), "a string")
FLAG = kind((bool,), "true or false")
KNOT = list_of(NS)

CLOCK = obj({"rank": RANK, "method": TEXT, "offset_ns": NS, "drift_ppm": number(1e6, "a drift in ppm"),
             "anchor_ns": NS, "error_bound_ns": optional(COUNT), "samples": COUNT, "peers": list_of(RANK),
             "note": TEXT, "corrections": list_of(KNOT)},
            required=("rank", "method"), only=True)
INPUT = obj({"path": TEXT, "rank": RANK, "rank_source": TEXT, "worker_name": TEXT, "hostname": TEXT,
             "events": COUNT, "truncated": FLAG, "warnings": list_of(TEXT),
             "cycles": list_of(obj({"path": TEXT}))}, required=("rank",))
RECORDS = obj({"rank": RANK, "has_block": FLAG, "rpcs": record_list("rpcs"), "collectives": record_list("collectives"),
               "remote_rpcs": record_list("rpcs"), "job_id": optional(kind((str, int), "a job id"))},
              required=("rank",))

# what info, report and diff read of a merged trace's summary
SUMMARY = obj({
    "version": optional(TEXT),
    "inputs": list_of(INPUT),
    "warnings": list_of(TEXT),
    "pids": mapping(rank_text, mapping(TEXT, INT64)),
    "reference": RANK,
    "align": TEXT,
    "alignment": list_of(CLOCK),
    "events": obj({"in": COUNT, "out": COUNT, "added": COUNT, "filtered": COUNT, "dropped": COUNT}),
    "records": list_of(RECORDS),
})


def check_summary(path: str, block: Dict[str, Any]) -> Dict[str, Any]:
    """The merged trace's summary as readers may take it, or the TraceError that names its
    first bad field."""
    return SUMMARY(path, "tracemerge", block)
