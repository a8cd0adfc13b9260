"""One rank's events as an Arrow table, on the reference clock.

The rows are the events the merged JSON (``tracemerge combine``) holds for the rank, made
by the same steps the merge takes — the selection (:func:`tracemerge.place.selection.apply`),
the per-rank transform's times (:func:`tracemerge.place.placement.aligned_ns`), the lanes
(:func:`tracemerge.algorithms.nesting.lanes`) and the process metadata the merge adds — but kept as
columns: nothing is encoded per event, and the compiled core's columns (names, pids, tids,
times, the args' spans in the file) go into Arrow arrays in a few vectorised steps.

What the rows differ in from the merged JSON, on purpose:

- ``start_ns``/``dur_ns`` are integer ns on the reference clock (absolute; the JSON's ``ts``
  is µs after its ``baseTimeNanoseconds``);
- ``tid`` is the thread the event ran on; a span the merge moved to a lane of its thread
  (``<tid> (overlap k)`` in the JSON) keeps its thread and says ``lane = k``;
- ``args`` is the input's own JSON text and ``flow_id`` the event's own ``id`` (else
  ``bind_id``), not namespaced: a row's ``rank`` already tells ranks apart; the event's
  other keys (a flow's ``bp``, an instant's ``s``, ``cname``) are not columns;
- the RPC flow arrows the merge draws are not rows: each RPC is a row of ``rpcs``, and the
  spans it joins carry ``rpc_id`` and ``rpc_role``.
"""

from itertools import repeat
from operator import is_not
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import msgspec
import numpy as np

from tracemerge import native
from tracemerge.algorithms.nesting import LANE_OF, lanes
from tracemerge.model import NO_DUR, NO_TS, RankTrace
from tracemerge.place.placement import Placement, _lane_metadata, _process_metadata, aligned_ns
from tracemerge.place.served import ServedOps, served_events

if TYPE_CHECKING:
    import pyarrow as pa

# the columns of ``events``, in order (docs/tables.md describes each)
EVENT_COLUMNS: Tuple[str, ...] = (
    "rank", "pid", "input_pid", "tid", "lane", "thread_name", "name", "category", "phase",
    "start_ns", "dur_ns", "rpc_id", "rpc_role", "args", "flow_id")


def require_arrow() -> Any:
    """The pyarrow module, or the one-line error that says how to install it."""
    try:
        import pyarrow
    except ImportError:
        from tracemerge.errors import UsageError
        raise UsageError("the tables need pyarrow: pip install 'tracemerge[tables]'") from None
    return pyarrow


def preload_arrow() -> None:
    """Import pyarrow and its Parquet writer, and make one column as a rank's worker makes
    its string columns (a dictionary decoded by Arrow's cast): done before the local workers
    fork, the pages this touches (the libraries' start-up, the compute registry) are shared
    with every worker instead of touched again in each (a parent and 2 workers peaked ~18 MB
    lower together than with pyarrow imported by the workers alone)."""
    pa = require_arrow()
    import pyarrow.parquet  # noqa: F401

    _coded(pa, np.zeros(1, np.int32), _strings(pa, ["x"]))


def event_schema() -> "pa.Schema":
    pa = require_arrow()
    string = pa.string()
    return pa.schema([
        ("rank", pa.int32()), ("pid", pa.int64()), ("input_pid", string), ("tid", string), ("lane", pa.int32()),
        ("thread_name", string), ("name", string), ("category", string), ("phase", string),
        ("start_ns", pa.int64()), ("dur_ns", pa.int64()), ("rpc_id", string), ("rpc_role", string),
        ("args", pa.large_string()), ("flow_id", string)])


CHUNK = 50_000  # events per record batch: a rank's strings are never all made at once
GATHER = 4096   # args spans copied out of the file's map per step of a batch


def rank_events(trace: RankTrace, place: Placement) -> Tuple["pa.Table", List[Tuple[str, str, str, Optional[str]]]]:
    """(the events of ``trace`` as rows of ``events``, [(rpc_id, role, tid, thread name)] of
    its RPC spans). ``trace`` is selected already; ``place`` is its merge placement."""
    batches, spans = rank_batches(trace, place)
    return require_arrow().Table.from_batches(list(batches), schema=event_schema()), spans


def rank_batches(trace: RankTrace, place: Placement, served: Optional[ServedOps] = None,
                 ) -> Tuple[Iterator["pa.RecordBatch"], List[Tuple[str, str, str, Optional[str]]]]:
    """(the rows of :func:`rank_events` as record batches of up to :data:`CHUNK` rows, made
    as they are asked for, so a writer holds one batch's strings at a time; the RPC spans,
    the ops that served paired builtins among them: ``served``, place/served.py)."""
    pa = require_arrow()
    n = len(trace)
    start, dur = aligned_ns(trace, place.clock, 0)  # absolute ns on the reference clock
    timed = trace.ts != NO_TS
    has_dur = timed & (dur != NO_DUR)
    moved = lanes(trace, start, start + np.maximum(dur, 0), walk=native.walk)  # what the merged JSON moves to lanes
    lane = np.zeros(n, np.int32)
    if moved:
        at = np.fromiter(moved, np.int64, len(moved))
        lane[at] = np.fromiter(moved.values(), np.int32, len(moved))
    tids = [_text(t) for t in trace.tids]
    thread_names = _thread_names(trace)
    thread_codes, thread_table = _thread_name_codes(trace, thread_names)
    (rpc_codes, rpc_table), (role_codes, role_table), spans = _rpc_columns(trace, tids, thread_names)
    # a paired builtin's callee side is the op that served it, on the thread this rank names
    for i, call in served_events(trace, np.flatnonzero(trace.ph == ord("X")), served or {}).items():
        p, t = int(trace.pid[i]), int(trace.tid[i])
        spans.append((call.rpc_id, "callee", tids[t], thread_names.get((p, t))))
    flow_ids = _flow_ids(trace)
    args = _args_source(trace)
    tables = {"input_pid": _strings(pa, [_text(p) for p in trace.pids]), "tid": _strings(pa, tids),
              "thread_name": _strings(pa, thread_table), "name": _strings(pa, trace.names),
              "phase": _strings(pa, [chr(c) for c in range(256)]), "rpc_id": _strings(pa, rpc_table),
              "rpc_role": _strings(pa, role_table)}
    pid = trace.pid.astype(np.int64) + place.pid_base
    ph = trace.ph.astype(np.int32)
    pid_code, tid_code, name_code, cat_code = trace.pid, trace.tid, trace.name, trace.cat
    added = _added_rows(pa, trace, place, moved, thread_names)
    schema = event_schema()
    # the batches hold these columns, not ``trace``: a caller that lets the trace go frees
    # the compiled core's scan (~100 bytes an event; with what else only the trace held,
    # ~45 MB of a 60 MB rank) before the first batch is made

    def batch(lo: int, hi: int) -> Any:
        columns = [
            _fixed(pa, pa.int32(), np.full(hi - lo, place.rank, np.int32)),
            _fixed(pa, pa.int64(), pid[lo:hi]),
            _coded(pa, pid_code[lo:hi], tables["input_pid"]),
            _coded(pa, tid_code[lo:hi], tables["tid"]),
            _fixed(pa, pa.int32(), lane[lo:hi]),
            _coded(pa, thread_codes[lo:hi], tables["thread_name"]),
            _coded(pa, name_code[lo:hi], tables["name"]),
            _coded(pa, cat_code[lo:hi], tables["name"]),
            _coded(pa, ph[lo:hi], tables["phase"]),
            _fixed(pa, pa.int64(), start[lo:hi], timed[lo:hi]),
            _fixed(pa, pa.int64(), dur[lo:hi], has_dur[lo:hi]),
            _coded(pa, rpc_codes[lo:hi], tables["rpc_id"]),
            _coded(pa, role_codes[lo:hi], tables["rpc_role"]),
            args(lo, hi),
            flow_ids(lo, hi),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def batches() -> Iterator[Any]:
        for lo in range(0, n, CHUNK):
            yield batch(lo, min(n, lo + CHUNK))
        if added is not None:
            yield from added.to_batches()

    return batches(), spans


def _text(value: Any) -> str:
    """A pid or tid as text: ints and strings both occur in one trace (Kineto's "Spans")."""
    return value if isinstance(value, str) else str(value)


# Every column is made from numpy buffers (pa.Array.from_buffers), never by pa.array() on a
# numpy array or a list: pa.array() imports pandas to check for its types, ~50 MB in each
# process that writes a rank (docs/performance.md, issue 28's memory target).

def _fixed(pa: Any, type: "pa.DataType", values: np.ndarray, valid: Optional[np.ndarray] = None) -> "pa.Array":
    """A column of ``type`` over the buffer of ``values`` (their dtype is the type's; not
    copied), null where ``valid`` is False."""
    nulls, bitmap = _validity(pa, valid)
    return pa.Array.from_buffers(type, len(values), [bitmap, pa.py_buffer(np.ascontiguousarray(values))],
                                 null_count=nulls)


def _validity(pa: Any, valid: Optional[np.ndarray]) -> Tuple[int, Any]:
    """(null count, the validity bitmap or None where nothing is null) of a bool mask."""
    if valid is None:
        return 0, None
    nulls = len(valid) - int(np.count_nonzero(valid))
    return nulls, pa.py_buffer(np.packbits(valid, bitorder="little").tobytes()) if nulls else None


def _strings(pa: Any, values: Union[Sequence[Any], np.ndarray], large: bool = False) -> "pa.Array":
    """A string (``large``: large_string) column of Python values: None is null, anything
    not a str its str(). For small lists (a rank's tables, added rows): one encode each."""
    encoded = [None if v is None else (v if isinstance(v, str) else str(v)).encode() for v in values]
    lengths = np.fromiter((0 if b is None else len(b) for b in encoded), np.int64, len(encoded))
    valid = np.fromiter((b is not None for b in encoded), bool, len(encoded))
    return _string_array(pa, b"".join(b for b in encoded if b is not None), lengths, valid, large)


def _string_array(pa: Any, data: Any, lengths: np.ndarray, valid: np.ndarray, large: bool) -> "pa.Array":
    """A string or large_string array whose texts lie one after the other in ``data`` (bytes
    or a uint8 array), of ``lengths`` (0 where not ``valid``): built from buffers."""
    offsets = np.zeros(len(lengths) + 1, np.int64 if large else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    nulls, bitmap = _validity(pa, valid)
    return pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(lengths),
                                 [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _coded(pa: Any, codes: np.ndarray, table: "pa.Array") -> "pa.Array":
    """Strings looked up by code (-1: null), decoded in Arrow's C code, not per event in Python."""
    indices = _fixed(pa, pa.int32(), codes.astype(np.int32, copy=False), codes >= 0)
    return pa.DictionaryArray.from_arrays(indices, table).cast(pa.string())


def _thread_names(trace: RankTrace) -> Dict[Tuple[int, int], str]:
    """{(pid code, tid code): the thread's name} (its last thread_name event, as viewers take it)."""
    return {k: v for k, v in trace.metadata("thread_name").items() if isinstance(v, str)}


def _thread_name_codes(trace: RankTrace, names: Dict[Tuple[int, int], str]) -> Tuple[np.ndarray, List[str]]:
    """(each event's code into the list of thread names, -1: unnamed; that list)."""
    if not names:
        return np.full(len(trace), -1, np.int32), []
    keys = trace.thread_keys()
    named = sorted(names.items())
    known = np.array([p * trace.thread_stride + t for (p, t), _ in named], np.int64)
    at = np.searchsorted(known, keys)
    at[at >= len(known)] = 0
    return np.where(known[at] == keys, at, -1).astype(np.int32), [name for _, name in named]


Coded = Tuple[np.ndarray, List[str]]  # (each event's code into the list, -1: null; the list)


def _rpc_columns(trace: RankTrace, tids: List[str], names: Dict[Tuple[int, int], str]
                 ) -> Tuple[Coded, Coded, List[Tuple[str, str, str, Optional[str]]]]:
    """(rpc_id, rpc_role) of each event as codes: the ids the capture writes into RPC spans'
    args (only those events' args are decoded); and [(rpc_id, role, tid, thread name)] of the
    spans. Codes, as a rank's other string columns, so a batch is one lookup in Arrow."""
    ids, roles = np.full(len(trace), -1, np.int32), np.full(len(trace), -1, np.int32)
    id_codes: Dict[str, int] = {}
    role_codes: Dict[str, int] = {}
    spans = []
    candidates = list(trace.args.with_key("rpc_id"))
    for i, a in zip(candidates, trace.args.dicts(candidates)):
        if a is None or not isinstance(a.get("rpc_id"), str):
            continue
        rpc_id, role = a["rpc_id"], a.get("role")
        ids[i] = id_codes.setdefault(rpc_id, len(id_codes))
        if isinstance(role, str):
            roles[i] = role_codes.setdefault(role, len(role_codes))
            if trace.ph[i] == ord("X"):
                p, t = int(trace.pid[i]), int(trace.tid[i])
                spans.append((rpc_id, role, tids[t], names.get((p, t))))
    return (ids, list(id_codes)), (roles, list(role_codes)), spans


def _args_source(trace: RankTrace) -> Callable[[int, int], Any]:
    """A function of (lo, hi): the args of those events as JSON text (null: none). The
    compiled core's args are spans of the file's bytes, joined into the column's buffer
    straight from the file's map, never decoded nor copied per event."""
    pa = require_arrow()
    spans = getattr(trace.args, "_spans", None)
    if spans is not None and getattr(trace.args, "_items", None) is None:
        view = trace.args._view  # type: ignore[attr-defined]

        data = np.frombuffer(view, np.uint8)

        def from_map(lo: int, hi: int) -> Any:
            part = spans[lo:hi]
            lengths = part[:, 1]
            present = part[lengths > 0]
            starts = present[:, 0]
            ends = starts + present[:, 1]
            if len(starts) and (starts[1:] >= ends[:-1]).all():
                # in file order: the bytes inside the spans, picked by a mask over the stretch
                # of the file they lie in (no object per event), GATHER spans at a time: the
                # mask of a whole batch's stretch was ~25 MB more at a worker's peak
                out = np.empty(int(present[:, 1].sum()), np.uint8)
                at = 0
                for g in range(0, len(starts), GATHER):
                    s, e, k = starts[g:g + GATHER], ends[g:g + GATHER], present[g:g + GATHER, 1]
                    runs = np.empty(2 * len(s) - 1, np.int64)  # span, gap, span, …, span
                    runs[0::2] = k
                    runs[1::2] = s[1:] - e[:-1]
                    inside = np.repeat(np.arange(len(runs)) % 2 == 0, runs)
                    piece = data[int(s[0]):int(e[-1])][inside]
                    out[at:at + len(piece)] = piece
                    at += len(piece)
                return _texts(pa, out, lengths)
            return _texts(pa, b"".join([view[o:o + k] for o, k in present.tolist()]), lengths)
        return from_map
    items = trace.args.items

    def from_items(lo: int, hi: int) -> Any:
        return _json_texts(pa, [None if a is None else (bytes(a) if a.__class__ is msgspec.Raw
                                                         else msgspec.json.encode(a)) for a in items[lo:hi]])
    return from_items


def _flow_ids(trace: RankTrace) -> Callable[[int, int], Any]:
    """A function of (lo, hi): those events' flow ids (``id``, else ``bind_id``) as text,
    null where an event has none. Kineto's integer ids stay an int64 column, made text by
    Arrow a chunk at a time; other ids are encoded one by one (few events have any)."""
    pa = require_arrow()
    n = len(trace)
    ints, has_int = np.zeros(n, np.int64), np.zeros(n, bool)
    others: Dict[int, str] = {}
    scan = getattr(trace, "scan", None)
    for key in ("bind_id", "id"):  # "id" last: it wins where an event has both
        if scan is not None and getattr(trace, "index", None) is None and trace.extra._rest is not None:
            idx, values = scan.flow_ids(0 if key == "id" else 1)  # the core's own column: no other key is made
        else:
            column = trace.extra.column(key, range(n))
            idx = np.flatnonzero(np.fromiter(map(is_not, column, repeat(msgspec.UNSET)), bool, n)).tolist()
            values = [column[i] for i in idx]
        if not len(idx):
            continue
        if all(v.__class__ is int and -(1 << 63) <= v < (1 << 63) for v in values):
            at = np.asarray(idx, np.int64)
            ints[at], has_int[at] = values, True
            for i in idx if others else ():
                others.pop(i, None)
        else:
            for i, v in zip(idx, values):
                others[i] = msgspec.json.encode(v).decode()
                has_int[i] = False
    if others:
        texts = np.full(n, None, dtype=object)
        texts[has_int] = ints[has_int].astype(str)
        for i, v in others.items():
            texts[i] = v
        return lambda lo, hi: _strings(pa, texts[lo:hi])
    return lambda lo, hi: _fixed(pa, pa.int64(), ints[lo:hi], has_int[lo:hi]).cast(pa.string())


def _json_texts(pa: Any, pieces: List[Optional[bytes]]) -> "pa.Array":
    """A large_string array of JSON texts from bytes (None: null)."""
    lengths = np.fromiter((0 if p is None else len(p) for p in pieces), np.int64, len(pieces))
    return _texts(pa, b"".join(p for p in pieces if p is not None), lengths)


def _texts(pa: Any, data: Any, lengths: np.ndarray) -> "pa.Array":
    """A large_string array over ``data``, the non-empty texts one after the other, of
    ``lengths`` (0: null; no JSON text is empty), built from buffers: no string per row.
    ``data``: bytes or a uint8 array."""
    return _string_array(pa, data, lengths, lengths > 0, large=True)


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
                  "rpc_id": None, "rpc_role": None, "args": msgspec.json.encode(args).decode(), "flow_id": None}
        for c in EVENT_COLUMNS:
            rows[c].append(values[c])
    schema = event_schema()
    return pa.Table.from_arrays([_column(pa, f.type, rows[f.name]) for f in schema], schema=schema)


def _column(pa: Any, type: "pa.DataType", values: List[Any]) -> "pa.Array":
    """A column of ``type`` (one of the events' string or integer types) from a list (None: null)."""
    if type in (pa.string(), pa.large_string()):
        return _strings(pa, values, large=type == pa.large_string())
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    ints = np.fromiter((0 if v is None else v for v in values), np.int32 if type == pa.int32() else np.int64,
                       len(values))
    return _fixed(pa, type, ints, valid)
