"""The compiled core (``_core``, C): a rank's per-event work in one pass over its bytes.

:func:`read` scans a trace document into the same :class:`~tracemerge.model.RankTrace`
columns the Python readers make (tables, codes, ns times, args, flow ids) and keeps the
scan, from which :func:`json_body` writes the rank's events exactly as the Python path's
JSON writer does, with pid, ts, dur and the ids rewritten and everything else copied.

The Python path is the reference: ``TRACEMERGE_CORE=python`` selects it, and a rank the
kernel does not take (an unknown or repeated key, escapes where the output would
re-encode them, ids that are not plain integers, args the Python path would decode, a
file that the Python reader reports or salvages) is read by the Python path, with the
reason returned for the caller to count. Either way the output is the same bytes.
"""

from __future__ import annotations  # the X | None annotations, on Python 3.9 too

import mmap
import os
import stat
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, Protocol, cast

import msgspec
import numpy as np

from tracemerge.algorithms import nesting
from tracemerge.errors import TraceError
from tracemerge.files.codecs import GZIP_MAGIC, ZSTD_MAGIC, decompress
from tracemerge.inputs.chrome import EXTRA_KEYS, checked_data, float_times_ns
from tracemerge.model import ARG_ID_KEYS, DICTS_CHUNK, FLOW_ID_KEYS, Args, Extra, Indices, RankTrace
from tracemerge.runtime.corestatus import ENV as ENV  # the environment's choice: corestatus, read without this package
from tracemerge.runtime.corestatus import OLD_ENV as OLD_ENV
from tracemerge.runtime.corestatus import chosen
from tracemerge.runtime.corestatus import describe as describe_core

# the compiled extensions, imported by name so that type checkers read their stubs
# (_core.pyi, _proto.pyi); None where one is not built, which every use checks for
try:
    from tracemerge.native import _core
except ImportError as e:  # not built (no compiler at install time), or built for another Python
    _core = None  # type: ignore[assignment]  # python/mypy#1106: a module name cannot be Optional
    _IMPORT_ERROR: str | None = str(e)
else:
    _IMPORT_ERROR = None
try:  # the .pftrace packet writer's loops (_proto.c); built apart from _core, optional on its own
    from tracemerge.native import _proto
except ImportError:
    _proto = None  # type: ignore[assignment]  # python/mypy#1106: a module name cannot be Optional

READS = "chrome"  # the input format (tracemerge.inputs.READERS) whose files the core reads


def active() -> str:
    """"native" when the compiled core runs, else "python" (chosen, or not built)."""
    return "native" if _core is not None and chosen() != "python" else "python"


def describe() -> str:
    """One line for ``--version``: which core is active and why."""
    return describe_core(_core is not None)


@dataclass(eq=False)
class NativeTrace(RankTrace):
    """A RankTrace read by the core: ``scan`` holds the event spans the JSON writer
    splices; ``index`` maps this trace's events to the scan's (None: one to one; a
    selection keeps a subset)."""

    scan: _core.Scan | None = None
    index: np.ndarray | None = None


class NativeArgs(Args):
    """Args whose raw items (views of the input bytes) are made on first use: a merge to
    JSON never needs them, :meth:`with_key` searches the spans in C."""

    __slots__ = ("_items", "_scan", "_spans", "_view", "_with")

    def __init__(self, scan: _core.Scan, data: bytes | mmap.mmap) -> None:
        self._scan, self._view = scan, memoryview(data)
        self._spans = np.frombuffer(scan.args_spans(), np.int64).reshape(-1, 2)
        self._items: list | None = None
        self._with: dict[str, list[int]] = {}
        self.raw = True

    @property
    def items(self) -> list:  # type: ignore[override]
        if self._items is None:
            view = self._view
            self._items = [msgspec.Raw(view[o:o + n]) if n else None for o, n in self._spans.tolist()]
        return self._items

    def __len__(self) -> int:
        return len(self._spans)

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]
        o, n = self._spans[i].tolist()
        return msgspec.json.decode(self._view[o:o + n]) if n else None

    def joined(self, idx: Indices) -> bytes:
        """Args.joined without making every item, in one call of the core: the reports and
        the merge ask for a few events' args (metadata, RPC spans) of ranks with a million."""
        if self._items is not None:
            return super().joined(idx)
        return self._scan.args_array(np.ascontiguousarray(idx, np.int64))

    def key_values(self, idx: Indices, key: str, missing: Any = msgspec.UNSET, no_object: Any = msgspec.UNSET,
                   chunk: int = DICTS_CHUNK) -> Iterator[Any]:
        """Args.key_values; an id key's values (``correlation``: the report's link of every
        runtime call to its kernels) read from the ids the scan recorded, without decoding
        any text (a 20 MB rank's 21,000 runtime calls and kernels: 23-34 -> 6-8 ms)."""
        if key not in ARG_ID_KEYS:
            return super().key_values(idx, key, missing, no_object, chunk)
        found = np.frombuffer(self._scan.arg_ids(np.ascontiguousarray(idx, np.int64), ARG_ID_KEYS.index(key)),
                              np.int64)
        values = found.tolist()
        for i in np.flatnonzero(found < 0).tolist():  # ids are never negative: the core reads none
            values[i] = missing if values[i] == _core.ARG_ID_ABSENT else no_object
        return iter(values)

    def take(self, idx: Indices) -> Args:
        if self._items is not None:
            return super().take(idx)
        # the spans of all of idx in one numpy step (a .pftrace takes the args of nearly every event)
        view, raw = self._view, msgspec.Raw
        spans = self._spans[np.asarray(idx, np.int64)].tolist() if len(idx) else []
        return Args([raw(view[o:o + n]) if n else None for o, n in spans], raw=True)

    def raw_item(self, i: int) -> msgspec.Raw | None:
        """``items[i]`` without making the other items."""
        o, n = self._spans[i].tolist()
        return msgspec.Raw(self._view[o:o + n]) if n else None

    def with_key(self, key: str) -> list[int]:
        # kept: a held rank is asked again when it is written (its RPC spans), and each ask
        # is a search of every event's args
        found = self._with.get(key)
        if found is None:
            found = self._with[key] = self._scan.args_with(msgspec.json.encode(key))
        return list(found)


class Declined(Exception):
    """The core cannot write this rank (a value it does not spell as the Python path
    does): the caller reads the rank again with the Python path."""


def read_rank(path: str, columns_only: bool = False) -> tuple[RankTrace, str]:
    """(trace, core) of the file ``path``: the core's trace and "native", or, where the
    kernel is not active or does not take the file, :func:`read_trace`'s (``columns_only``:
    :func:`~tracemerge.inputs.chrome.read_columns`'s, without per-event structs) and "python"
    or "python: <why>". Errors are the Python reader's own (it reads every file the core
    does not take, bad ones included). The file is opened once for its sniff, its map or
    its bytes (the Python reader, where it reads, opens it again)."""
    from tracemerge.inputs import SNIFF_BYTES, reader_of
    from tracemerge.inputs import read_trace as read_all
    from tracemerge.inputs.chrome import read_columns

    with _opened(path) as f:
        start = _read(path, f, SNIFF_BYTES)
        if reader_of(path, start).name != READS:  # its own reader (read_columns is the chrome reader's)
            return _read_by(read_all(path), "python: another input format")
        read_trace = read_columns if columns_only else read_all
        if active() != "native":
            return _read_by(read_trace(path), "python")
        data: bytes | mmap.mmap | None = _mapped(f, start)
        cut = ""
        if data is None:
            data, cut = checked_data(path, *decompress(path, start + _read(path, f)))
    if cut:
        del data
        return _read_by(read_trace(path), "python: the compressed stream ends early")
    trace = read(path, data)
    if isinstance(trace, str):
        del data
        return _read_by(read_trace(path), f"python: {trace}")
    return trace, "native"


def _read_by(trace: RankTrace, core: str) -> tuple[RankTrace, str]:
    trace.read_by = core
    return trace, core


def _opened(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None


def _read(path: str, f: BinaryIO, size: int = -1) -> bytes:
    try:
        return f.read(size)
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None


def _mapped(f: BinaryIO, start: bytes) -> mmap.mmap | None:
    """The bytes of an uncompressed file (open as ``f``, ``start`` its first bytes) as a
    read-only map of the page cache (no copy into the process, no page faults on fresh
    memory: ~0.05 s and the file's size per 60 MB rank), or None for anything else —
    compressed, empty, not a regular file — whose bytes are read (and reported) instead.
    The map lives as long as the views of it."""
    try:
        if start[:2] == GZIP_MAGIC or start[:4] == ZSTD_MAGIC or not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # unreadable (its read says why), or empty (cannot be mapped)
        return None


def core_of(trace: RankTrace) -> str:
    """"native" for a trace the core read (and will write), else "python"."""
    return "native" if getattr(trace, "scan", None) is not None else (trace.read_by or "python")


def read_file(path: str, columns_only: bool = False) -> RankTrace:
    """:func:`read_trace` of ``path``, by the compiled core where it takes the file."""
    return read_rank(path, columns_only)[0]


def debug_annotations(items: list, start: int, rank: int, iids: dict[str, bytes],
                      new_names: list[bytes]) -> tuple[list[bytes], int]:
    """The compiled core's debug annotations of raw args (``formats.perfetto.encoder._Annotations``):
    (encoded args of ``items[start:]``, the index of the first one it declined)."""
    return _core.annotations(items, start, rank, iids, new_names)


def walk(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, bool]:
    """:func:`tracemerge.algorithms.nesting.walk` (one thread's parents, and whether its events nest), by
    the compiled core where it is active: one pass over the events."""
    if active() != "native":
        return nesting.walk(s, e)
    parents, proper = _core.walk(np.ascontiguousarray(s, np.int64), np.ascontiguousarray(e, np.int64))
    return np.frombuffer(parents, np.int64), proper


class PacketWriter(Protocol):
    """What the Perfetto encoder calls of the compiled writer: the module ``_proto``, whose
    stub (_proto.pyi) mypy checks against this."""

    def nest(self, start: np.ndarray, end: np.ndarray) -> bytes: ...

    def slice_order(self, start: np.ndarray, end: np.ndarray) -> tuple[bytes, bytes, bytes]: ...

    def chains(self, fid: np.ndarray, role: np.ndarray, v1: np.ndarray, begin_ns: np.ndarray, end_ns: np.ndarray,
               has_end: np.ndarray) -> tuple[bytes, bytes]: ...

    def packets(self, ts: np.ndarray, kind: np.ndarray, uuid: np.ndarray, name: np.ndarray, cat: np.ndarray,
                args_slot: np.ndarray, tail_slot: np.ndarray, flow_lo: np.ndarray, flow_hi: np.ndarray,
                flow_id: np.ndarray, flow_slot: np.ndarray, args: list[bytes], tails: list[bytes],
                flags: bytes) -> bytes: ...


def proto() -> PacketWriter | None:
    """The compiled .pftrace packet writer (``_proto``: lanes, slice order, packet framing) where
    the compiled core is active and it is built, else None (the Python encoder's own loops)."""
    return _proto if _proto is not None and active() == "native" else None


def scan(data: bytes | mmap.mmap) -> _core.Scan | str:
    """The core's scan of a document, or a str saying why the core does not take it."""
    if _core is None:
        return "the compiled core is not built"
    return _core.scan(data)


def read(path: str, data: bytes | mmap.mmap) -> str | NativeTrace:
    """The NativeTrace of ``data`` (the complete bytes of ``path``), equal in every column
    to what :func:`tracemerge.inputs.chrome.read_trace` makes; or a str saying why the core does
    not take it (the caller reads the file with the Python path, which reports or salvages
    what is wrong with it)."""
    s = scan(data)
    if isinstance(s, str):
        return s
    view = memoryview(data)
    top = cast("dict[str, tuple[int, int]]", s.top)  # (start, end) of each key but traceEvents' None,
    del top["traceEvents"]                            # which goes here
    try:
        block = msgspec.json.decode(view[slice(*top.pop("tracemerge"))]) if "tracemerge" in top else None
        meta = {k: msgspec.json.decode(view[a:b]) for k, (a, b) in top.items()}
    except msgspec.DecodeError:
        return "a top-level value msgspec does not take"
    if block is not None and not isinstance(block, dict):
        return "the tracemerge block is not an object"
    n = s.n
    ph_b, codes_b, times_b, flags_b = s.columns()
    ph = np.frombuffer(ph_b, np.uint8)
    codes = np.frombuffer(codes_b, np.int32).reshape(4, n) if n else np.zeros((4, 0), np.int32)
    times = np.frombuffer(times_b, np.float64).reshape(2, n) if n else np.zeros((2, 0))
    flags = np.frombuffer(flags_b, np.uint32)
    # read.from_columns' checks: where it would raise, the Python path reads the file
    needs_name = ~((ph == ord("M")) | (ph == ord("E")))
    if (needs_name & ((flags & _core.F_NAME) == 0)).any():
        return "an event without a name"
    names = s.names
    name, cat = codes[0].copy(), codes[1]
    if None in names:
        cat = np.where(cat == names.index(None), -1, cat).astype(np.int32)
    else:
        cat = cat.copy()
    base = meta.get("baseTimeNanoseconds")
    if base is not None and not isinstance(base, int):
        return "baseTimeNanoseconds is not an integer"
    ts_missing = (flags & _core.F_TS) == 0
    if (ts_missing & (ph != ord("M"))).any():
        return "an event without ts"
    try:
        ts, dur = float_times_ns(path, times[0], ts_missing, times[1], (flags & _core.F_DUR) == 0, base)
    except TraceError as e:
        return f"a time the Python path refuses ({e.problem})"
    # every extra-key column on first use: the core's own JSON writer reads none of them
    # (only the Python transform reads the flow ids up front, with Extra.read)
    trace = NativeTrace(path=path, meta=meta, tracemerge=block, base_ns=base, names=names, pids=s.pids,
                        tids=s.tids, ph=ph.copy(), name=name, cat=cat, pid=codes[2].copy(), tid=codes[3].copy(),
                        ts=ts, dur=dur, args=NativeArgs(s, data),
                        extra=Extra(columns={}, n=n, rest=lambda: _extra_columns(s, n)))
    trace.scan = s
    return trace


def _flow_ids(s: _core.Scan, key: str, n: int) -> list | None:
    """The column of flow id ``key`` (UNSET where absent), None when no event has it."""
    if key == "id2":
        return None  # the core does not take id2
    idx, values = s.flow_ids(0 if key == "id" else 1)
    if not idx:
        return None
    column = np.full(n, msgspec.UNSET, dtype=object)
    column[idx] = values
    return column.tolist()


def _extra_columns(s: _core.Scan, n: int) -> dict[str, list]:
    """Every EXTRA_KEYS column the file uses, as inputs.chrome._extra makes them."""
    out: dict[str, list] = {}
    for key in EXTRA_KEYS:
        if key in FLOW_ID_KEYS:
            ids = _flow_ids(s, key, n)
            if ids is not None:
                out[key] = ids
            continue
        idx, tokens = s.extra_tokens(key)
        if not idx:
            continue
        column = np.full(n, msgspec.UNSET, dtype=object)
        values = msgspec.json.decode(b"[" + b",".join(tokens) + b"]")
        column[idx] = np.array(values + [None], dtype=object)[:-1]  # element-wise, lists stay lists
        out[key] = column.tolist()
    return out


class _Placed(Protocol):
    """What the core's writer reads of a rank's placement (``place.placement.Placement``)."""

    @property
    def pid_base(self) -> int: ...

    @property
    def rank(self) -> int: ...


def json_body(trace: NativeTrace, place: _Placed, start: np.ndarray, dur: np.ndarray, overrides: dict[int, bytes],
              tids: dict[int, bytes] | None = None) -> bytes | None:
    """One rank's events as the comma-joined body the Python path writes for them, given
    their aligned ``start``/``dur`` ns (:func:`tracemerge.place.placement.aligned_ns`),
    ``overrides`` ({trace index: args bytes}) and ``tids`` ({trace index: tid bytes}, the
    spans moved to lanes); None when a value is out of the core's reach."""
    scan = trace.scan
    assert scan is not None, "json_body of a trace the core did not read"
    index = trace.index if trace.index is not None else np.arange(len(trace), dtype=np.int64)
    over = {int(index[i]): v for i, v in overrides.items()}
    moved = {int(index[i]): v for i, v in (tids or {}).items()}
    return scan.write(np.ascontiguousarray(index, np.int64), np.ascontiguousarray(start, np.int64),
                      np.ascontiguousarray(dur, np.int64), int(place.pid_base), int(place.rank), over, moved)

