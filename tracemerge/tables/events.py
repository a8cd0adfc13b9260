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
- ``args`` is the input's own JSON text and ``flow_id`` the event's own ``id`` (else
  ``bind_id``), not namespaced: a row's ``rank`` already tells ranks apart; the event's
  other keys (a flow's ``bp``, an instant's ``s``, ``cname``) are not columns;
- the RPC flow arrows the merge draws are not rows: each RPC is a row of ``rpcs``, and the
  spans it joins carry ``rpc_id`` and ``rpc_role``.
"""

from itertools import repeat
from operator import is_not
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

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
    "start_ns", "dur_ns", "rpc_id", "rpc_role", "args", "flow_id")


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
        ("args", pa.large_string()), ("flow_id", string)])


CHUNK = 50_000  # events per record batch: a rank's strings are never all made at once


def rank_events(trace: RankTrace, place: Placement) -> Tuple["pa.Table", List[Tuple[str, str, str, Optional[str]]]]:
    """(the events of ``trace`` as rows of ``events``, [(rpc_id, role, tid, thread name)] of
    its RPC spans). ``trace`` is selected already; ``place`` is its merge placement."""
    batches, spans = rank_batches(trace, place)
    return require_arrow().Table.from_batches(list(batches), schema=event_schema()), spans


def rank_batches(trace: RankTrace, place: Placement
                 ) -> Tuple[Iterator["pa.RecordBatch"], List[Tuple[str, str, str, Optional[str]]]]:
    """(the rows of :func:`rank_events` as record batches of up to :data:`CHUNK` rows, made
    as they are asked for, so a writer holds one batch's strings at a time; the RPC spans)."""
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
    thread_names = _thread_names(trace)
    thread_codes, thread_table = _thread_name_codes(trace, thread_names)
    rpc_id, rpc_role, spans = _rpc_columns(trace, tids, thread_names)
    flow_ids = _flow_ids(trace)
    args = _args_source(trace)
    tables = {"input_pid": _strings(pa, [_text(p) for p in trace.pids]), "tid": _strings(pa, tids),
              "thread_name": _strings(pa, thread_table), "name": _strings(pa, trace.names),
              "phase": _strings(pa, [chr(c) for c in range(256)])}
    pid = trace.pid.astype(np.int64) + place.pid_base
    ph = trace.ph.astype(np.int32)
    schema = event_schema()

    def batch(lo: int, hi: int) -> Any:
        columns = [
            pa.array(np.full(hi - lo, place.rank, np.int32)),
            pa.array(pid[lo:hi]),
            _coded(pa, trace.pid[lo:hi], tables["input_pid"]),
            _coded(pa, trace.tid[lo:hi], tables["tid"]),
            pa.array(lane[lo:hi]),
            _coded(pa, thread_codes[lo:hi], tables["thread_name"]),
            _coded(pa, trace.name[lo:hi], tables["name"]),
            _coded(pa, trace.cat[lo:hi], tables["name"]),
            _coded(pa, ph[lo:hi], tables["phase"]),
            pa.array(start[lo:hi], mask=~timed[lo:hi]),
            pa.array(dur[lo:hi], mask=~has_dur[lo:hi]),
            pa.array(rpc_id[lo:hi], pa.string()),
            pa.array(rpc_role[lo:hi], pa.string()),
            args(lo, hi),
            flow_ids(lo, hi),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def batches() -> Iterator[Any]:
        for lo in range(0, n, CHUNK):
            yield batch(lo, min(n, lo + CHUNK))
        added = _added_rows(pa, trace, place, moved, thread_names)
        if added is not None:
            yield from added.to_batches()

    return batches(), spans


def _text(value: Any) -> str:
    """A pid or tid as text: ints and strings both occur in one trace (Kineto's "Spans")."""
    return value if isinstance(value, str) else str(value)


def _strings(pa: Any, table: Sequence[Any]) -> "pa.Array":
    return pa.array([v if v is None or isinstance(v, str) else str(v) for v in table], pa.string())


def _coded(pa: Any, codes: np.ndarray, table: "pa.Array") -> "pa.Array":
    """Strings looked up by code (-1: null), decoded in Arrow's C code, not per event in Python."""
    indices = pa.array(codes.astype(np.int32, copy=False), mask=codes < 0)
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


def _rpc_columns(trace: RankTrace, tids: List[str], names: Dict[Tuple[int, int], str]
                 ) -> Tuple[List[Optional[str]], List[Optional[str]], List[Tuple[str, str, str, Optional[str]]]]:
    """(rpc_id, rpc_role) of each event: the ids the capture writes into RPC spans' args (only
    those events' args are decoded); and [(rpc_id, role, tid, thread name)] of the spans."""
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
    return ids, roles, spans


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
                # in file order: the bytes inside the spans, picked by one mask over the
                # stretch of the file they lie in (no object per event)
                runs = np.empty(2 * len(starts) - 1, np.int64)  # span, gap, span, …, span
                runs[0::2] = present[:, 1]
                runs[1::2] = starts[1:] - ends[:-1]
                inside = np.repeat(np.arange(len(runs)) % 2 == 0, runs)
                return _texts(pa, data[int(starts[0]):int(ends[-1])][inside], lengths)
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
        return lambda lo, hi: pa.array(texts[lo:hi], pa.string())
    return lambda lo, hi: pa.array(ints[lo:hi], mask=~has_int[lo:hi]).cast(pa.string())


def _json_texts(pa: Any, pieces: List[Optional[bytes]]) -> "pa.Array":
    """A large_string array of JSON texts from bytes (None: null)."""
    lengths = np.fromiter((0 if p is None else len(p) for p in pieces), np.int64, len(pieces))
    return _texts(pa, b"".join(p for p in pieces if p is not None), lengths)


def _texts(pa: Any, data: Any, lengths: np.ndarray) -> "pa.Array":
    """A large_string array over ``data``, the non-empty texts one after the other, of
    ``lengths`` (0: null; no JSON text is empty), built from buffers: no string per row.
    ``data``: bytes or a uint8 array."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    valid = lengths > 0
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.large_string(), len(lengths), [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
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
                  "rpc_id": None, "rpc_role": None, "args": msgspec.json.encode(args).decode(), "flow_id": None}
        for c in EVENT_COLUMNS:
            rows[c].append(values[c])
    return pa.table(rows, schema=event_schema())
