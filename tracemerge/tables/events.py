"""One rank's events as an Arrow table, on the reference clock.

The rows are the events the merged JSON (``tracemerge combine``) holds for the rank, made
by the same steps the merge takes — the selection (:func:`tracemerge.place.selection.apply`),
the per-rank transform's times (:func:`tracemerge.place.placement.aligned_ns`), the lanes
(:func:`tracemerge.nesting.lanes`) and the process metadata the merge adds — but kept as
columns: nothing is encoded per event, and the compiled core's columns (names, pids, tids,
times, the args' spans in the file) go into Arrow arrays in a few vectorised steps.

What the rows differ in from the merged JSON, on purpose:

- ``start_ns``/``dur_ns`` are integer ns on the reference clock (absolute; the JSON's ``ts``
  is µs after its ``baseTimeNanoseconds``);
- ``tid`` is the thread the event ran on; a span the merge moved to a lane of its thread
  (``<tid> (overlap k)`` in the JSON) keeps its thread and says ``lane = k``;
- ``args`` and ``extra`` (the event's keys beyond the columns, e.g. a flow's ``id``) are the
  input's own JSON text, ids not namespaced: a row's ``rank`` already tells ranks apart;
- the RPC flow arrows the merge draws are not rows: each RPC is a row of ``rpcs``, and the
  spans it joins carry ``rpc_id`` and ``rpc_role``.
"""

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

import msgspec
import numpy as np

from tracemerge.model import NO_DUR, NO_TS, RankTrace
from tracemerge.nesting import LANE_OF, lanes
from tracemerge.place.placement import Placement, _lane_metadata, _process_metadata, aligned_ns

if TYPE_CHECKING:
    import pyarrow as pa

# the columns of ``events``, in order (docs/tables.md describes each)
EVENT_COLUMNS: Tuple[str, ...] = (
    "rank", "pid", "input_pid", "tid", "lane", "thread_name", "name", "category", "phase",
    "start_ns", "dur_ns", "rpc_id", "rpc_role", "args", "extra")


def require_arrow() -> Any:
    """The pyarrow module, or the one-line error that says how to install it."""
    try:
        import pyarrow
    except ImportError:
        from tracemerge.errors import UsageError
        raise UsageError("the tables need pyarrow: pip install 'tracemerge[tables]'") from None
    return pyarrow


def event_schema() -> "pa.Schema":
    pa = require_arrow()
    string = pa.string()
    return pa.schema([
        ("rank", pa.int32()), ("pid", pa.int64()), ("input_pid", string), ("tid", string), ("lane", pa.int32()),
        ("thread_name", string), ("name", string), ("category", string), ("phase", string),
        ("start_ns", pa.int64()), ("dur_ns", pa.int64()), ("rpc_id", string), ("rpc_role", string),
        ("args", pa.large_string()), ("extra", pa.large_string())])


def rank_events(trace: RankTrace, place: Placement) -> Tuple["pa.Table", List[Tuple[str, str, str, Optional[str]]]]:
    """(the events of ``trace`` as rows of ``events``, [(rpc_id, role, tid, thread name)] of
    its RPC spans). ``trace`` is selected already; ``place`` is its merge placement."""
    pa = require_arrow()
    n = len(trace)
    start, dur = aligned_ns(trace, place.clock, 0)  # absolute ns on the reference clock
    timed = trace.ts != NO_TS
    has_dur = timed & (dur != NO_DUR)
    moved = lanes(trace, start, start + np.maximum(dur, 0))  # what the merged JSON moves to lanes
    lane = np.zeros(n, np.int32)
    if moved:
        at = np.fromiter(moved, np.int64, len(moved))
        lane[at] = np.fromiter(moved.values(), np.int32, len(moved))
    tids = [_text(t) for t in trace.tids]
    pids = [_text(p) for p in trace.pids]
    thread_names = _thread_names(trace)
    rpc_id, rpc_role, spans = _rpc_columns(trace, tids, thread_names)
    columns = {
        "rank": pa.array(np.full(n, place.rank, np.int32)),
        "pid": pa.array(trace.pid.astype(np.int64) + place.pid_base),
        "input_pid": _coded(pa, trace.pid, pids),
        "tid": _coded(pa, trace.tid, tids),
        "lane": pa.array(lane),
        "thread_name": _thread_name_column(pa, trace, thread_names),
        "name": _coded(pa, trace.name, trace.names),
        "category": _coded(pa, trace.cat, trace.names),
        "phase": _coded(pa, trace.ph.astype(np.int32), [chr(c) for c in range(256)]),
        "start_ns": pa.array(start, mask=~timed),
        "dur_ns": pa.array(dur, mask=~has_dur),
        "rpc_id": rpc_id,
        "rpc_role": rpc_role,
        "args": _json_texts(pa, _args_pieces(trace)),
        "extra": _json_texts(pa, _extra_pieces(trace)),
    }
    own = pa.table(columns, schema=event_schema())
    added = _added_rows(pa, trace, place, moved, thread_names)
    return (pa.concat_tables([own, added]) if added is not None else own), spans


def _text(value: Any) -> str:
    """A pid or tid as text: ints and strings both occur in one trace (Kineto's "Spans")."""
    return value if isinstance(value, str) else str(value)


def _coded(pa: Any, codes: np.ndarray, table: Sequence[Any]) -> "pa.Array":
    """Strings looked up by code (-1: null), decoded in Arrow's C code, not per event in Python."""
    values = [v if v is None or isinstance(v, str) else str(v) for v in table]
    indices = pa.array(codes.astype(np.int32), mask=codes < 0)
    return pa.DictionaryArray.from_arrays(indices, pa.array(values, pa.string())).cast(pa.string())


def _thread_names(trace: RankTrace) -> Dict[Tuple[int, int], str]:
    """{(pid code, tid code): the thread's name} (its last thread_name event, as viewers take it)."""
    return {k: v for k, v in trace.metadata("thread_name").items() if isinstance(v, str)}


def _thread_name_column(pa: Any, trace: RankTrace, names: Dict[Tuple[int, int], str]) -> "pa.Array":
    if not names:
        return pa.nulls(len(trace), pa.string())
    keys = trace.thread_keys()
    named = sorted(names.items())
    known = np.array([p * trace.thread_stride + t for (p, t), _ in named], np.int64)
    at = np.searchsorted(known, keys)
    at[at >= len(known)] = 0
    codes = np.where(known[at] == keys, at, -1)
    return _coded(pa, codes, [name for _, name in named])


def _rpc_columns(trace: RankTrace, tids: List[str], names: Dict[Tuple[int, int], str]
                 ) -> Tuple["pa.Array", "pa.Array", List[Tuple[str, str, str, Optional[str]]]]:
    """(rpc_id, rpc_role) columns: the ids the capture writes into RPC spans' args (only
    those events' args are decoded), and [(rpc_id, role, tid, thread name)] of the spans."""
    pa = require_arrow()
    ids: List[Optional[str]] = [None] * len(trace)
    roles: List[Optional[str]] = [None] * len(trace)
    spans = []
    candidates = list(trace.args.with_key("rpc_id"))
    for i, a in zip(candidates, trace.args.dicts(candidates)):
        if a is None or not isinstance(a.get("rpc_id"), str):
            continue
        role = a.get("role")
        ids[i], roles[i] = a["rpc_id"], role if isinstance(role, str) else None
        if trace.ph[i] == ord("X") and roles[i] is not None:
            p, t = int(trace.pid[i]), int(trace.tid[i])
            spans.append((a["rpc_id"], str(roles[i]), tids[t], names.get((p, t))))
    return pa.array(ids, pa.string()), pa.array(roles, pa.string()), spans


def _args_pieces(trace: RankTrace) -> Iterable[Optional[bytes]]:
    """Each event's args as JSON bytes (None: none). The compiled core's args are views of
    the file's bytes, joined without being decoded."""
    spans = getattr(trace.args, "_spans", None)
    if spans is not None and getattr(trace.args, "_items", None) is None:
        view = trace.args._view  # type: ignore[attr-defined]
        return [bytes(view[o:o + k]) if k else None for o, k in spans.tolist()]
    return [None if a is None else (bytes(a) if a.__class__ is msgspec.Raw else msgspec.json.encode(a))
            for a in trace.args.items]


def _extra_pieces(trace: RankTrace) -> List[Optional[bytes]]:
    """Each event's keys beyond the columns as a JSON object (None: none)."""
    out: List[Optional[bytes]] = [None] * len(trace)
    extra = trace.extra
    if extra.items is not None:
        return [None if x is None else msgspec.json.encode(x) for x in extra.items]
    kept: Dict[int, Dict[str, Any]] = {}
    for key, values in (extra.columns or {}).items():
        for i in np.flatnonzero(np.fromiter((v is not msgspec.UNSET for v in values), bool, len(values))).tolist():
            kept.setdefault(i, {})[key] = values[i]
    for i, x in kept.items():
        out[i] = msgspec.json.encode(x)
    return out


def _json_texts(pa: Any, pieces: Iterable[Optional[bytes]]) -> "pa.Array":
    """A large_string array of JSON texts from bytes (None: null), built from one buffer."""
    pieces = list(pieces)
    lengths = np.fromiter((0 if p is None else len(p) for p in pieces), np.int64, len(pieces))
    offsets = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    valid = np.fromiter((p is not None for p in pieces), bool, len(pieces))
    data = b"".join(p for p in pieces if p is not None)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.large_string(), len(pieces), [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=int((~valid).sum()))


def _added_rows(pa: Any, trace: RankTrace, place: Placement, moved: Dict[int, int],
                names: Dict[Tuple[int, int], str]) -> Optional["pa.Table"]:
    """The metadata events the merge adds to the rank (:mod:`tracemerge.place.placement`):
    process names, sort indexes and labels its input lacks, and a thread_name per lane."""
    made = _process_metadata(trace, place, [place.pid_base + code for code in range(len(trace.pids))])
    made += _lane_metadata(trace, place, moved)
    if not made:
        return None
    rows: Dict[str, List[Any]] = {c: [] for c in EVENT_COLUMNS}
    for e in made:
        code = e["pid"] - place.pid_base
        args = e.get("args") or {}
        lane_of = args.get(LANE_OF)
        tid = _text(lane_of if lane_of is not None else e["tid"])
        lane = int(str(e["tid"]).rpartition("(overlap ")[2].rstrip(")")) if lane_of is not None else 0
        tid_code = next((t for t, v in enumerate(trace.tids) if _text(v) == tid), None)
        values = {"rank": place.rank, "pid": e["pid"], "input_pid": _text(trace.pids[code]), "tid": tid,
                  "lane": lane, "thread_name": names.get((code, tid_code)) if tid_code is not None else None,
                  "name": e["name"], "category": None, "phase": e["ph"], "start_ns": None, "dur_ns": None,
                  "rpc_id": None, "rpc_role": None, "args": msgspec.json.encode(args).decode(), "extra": None}
        for c in EVENT_COLUMNS:
            rows[c].append(values[c])
    return pa.table(rows, schema=event_schema())
