"""The in-memory model: one columnar table of events per rank file.

Numeric columns are numpy arrays; strings (names, categories) and pids/tids are interned
into small lists and referenced by int32 codes, so per-event work is vectorised and a
rank costs a few dozen bytes per event plus its raw ``args``, which are kept untouched
for passthrough: as undecoded JSON when the typed reader read the file (:class:`Args`).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_not
from typing import Any, Callable, Iterator, Optional, SupportsIndex, Union, cast

import msgspec
import numpy as np

from tracemerge.algorithms.arrays import distinct

NO_TS = np.iinfo(np.int64).min  # an event without "ts" (legal for "M" metadata)
NO_DUR = -1                     # an event without "dur"

# The keys held in columns; every other key of an event is kept in ``extra``.
COLUMN_KEYS = frozenset(("ph", "cat", "name", "pid", "tid", "ts", "dur", "args"))
FLOW_ID_KEYS = ("id", "id2", "bind_id")   # the keys a flow or async event is keyed by
# the args keys whose integer values are ids (namespaced per rank by place.ids; the compiled
# core records their values while it scans, in this order: _core.c's ARG_ID_KEYS)
ARG_ID_KEYS = ("External id", "correlation", "Correlation ID", "External ID")
# event indices: a list, or an int array
Indices = Union[Sequence[int], np.ndarray]
# events whose args Args.chunked_dicts decodes at once
DICTS_CHUNK = 4096


class Args(Sequence):
    """The ``args`` of each event: ``args[i]`` is a dict (or another JSON value, or None).

    ``items`` holds what the reader made: dicts, or ``msgspec.Raw`` JSON that is decoded
    only when an event's args are read (``raw``: every item is Raw or None), so a merge
    that passes args through never builds them.
    """

    __slots__ = ("items", "raw")

    def __init__(self, items: list, raw: bool = False) -> None:
        self.items, self.raw = items, raw

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: SupportsIndex) -> Any:  # type: ignore[override]
        return _decoded(self.items[i])

    def __iter__(self) -> Iterator[Any]:
        return map(_decoded, self.items)

    def __reduce__(self) -> tuple:
        return Args, (self.items, self.raw)

    def dicts(self, idx: Indices) -> list[Optional[dict]]:
        """The args of the events ``idx`` (a list of indices), decoded together; None for
        args that are not an object."""
        items = _LIST.decode(self.joined(idx)) if self.raw else list(map(self.items.__getitem__, idx))
        return [a if a.__class__ is dict else None for a in items]

    def joined(self, idx: Indices) -> bytes:
        """Raw args of the events ``idx`` as one JSON array, ``null`` for none: decoded in
        one call (the compiled core's ``Scan.args_array`` makes it from the spans)."""
        return b"[" + b",".join(a if a is not None else b"null" for a in map(self.items.__getitem__, idx)) + b"]"

    def chunked_dicts(self, idx: Indices, chunk: int = DICTS_CHUNK) -> Iterator[Optional[dict]]:
        """:meth:`dicts` of ``idx``, decoded :data:`DICTS_CHUNK` at a time: a caller that keeps
        one value of each holds one chunk's dicts, not all of them at once (a 60 MB rank's
        runtime calls and kernels were ~45 MB of dicts together)."""
        for lo in range(0, len(idx), chunk):
            yield from self.dicts(idx[lo:lo + chunk])

    def key_values(self, idx: Indices, key: str, missing: Any = msgspec.UNSET, no_object: Any = msgspec.UNSET,
                   chunk: int = DICTS_CHUNK) -> Iterator[Any]:
        """``args[i].get(key, missing)`` for each event ``i`` of ``idx`` whose args are an
        object, ``no_object`` for the others: what :meth:`chunked_dicts` tells of one key,
        where raw args decode only that key (no dict per event: the report's correlation ids
        of a rank's runtime calls and kernels were most of its time)."""
        one = msgspec.defstruct("One", [("value", Any, msgspec.UNSET)], rename={"value": key})
        decoder = msgspec.json.Decoder(list[Optional[one]])  # type: ignore[valid-type]
        for lo in range(0, len(idx), chunk):
            part = idx[lo:lo + chunk]
            if self.raw:
                text = self.joined(part)
                try:
                    found = decoder.decode(text)
                    yield from (no_object if a is None else missing if a.value is msgspec.UNSET else a.value
                                for a in found)
                    continue
                except msgspec.ValidationError:  # args that are not objects: decoded whole, below
                    items = _LIST.decode(text)
            else:
                items = self.take(part).items
            yield from (a.get(key, missing) if a.__class__ is dict else no_object for a in items)

    def take(self, idx: Indices) -> "Args":
        """The args of the events ``idx`` (a list of indices), still undecoded."""
        return Args(list(map(self.items.__getitem__, idx)), self.raw)

    def with_key(self, key: str) -> list[int]:
        """Sorted indices of the events whose args may have the top-level ``key``: a
        superset (raw JSON is searched for the quoted key, which may be nested), so
        callers check ``args[i]``."""
        if not self.raw:
            return [i for i, a in enumerate(self.items) if isinstance(a, dict) and key in a]
        token = msgspec.json.encode(key)
        joined = b"\0".join(filter(None, self.items))  # NUL cannot occur in JSON text
        if token not in joined:
            return []
        present = np.flatnonzero(np.fromiter(map(is_not, self.items, repeat(None)), bool, len(self.items)))
        starts = np.cumsum(np.fromiter(map(len, filter(None, self.items)), np.int64, len(present)) + 1) - 1
        at = [m.start() for m in re.finditer(re.escape(token), joined)]
        return distinct(present[np.searchsorted(starts, at)]).tolist()

    def raw_item(self, i: int) -> Any:
        """``items[i]``: the args of one event as the reader made them (raw JSON where raw)."""
        return self.items[i]


class Replaced(Args):
    """``base`` with the args of a few events replaced: ``over`` ({event index: item}, raw
    JSON where ``base`` is raw). ``base`` is untouched and its items are not made until
    something asks for them all (the compiled core's args are views made on first use)."""

    __slots__ = ("base", "over", "_items")

    def __init__(self, base: Args, over: dict[int, Any]) -> None:
        self.base, self.over, self.raw = base, over, base.raw
        self._items: Optional[list] = None

    @property
    def items(self) -> list:  # type: ignore[override]
        if self._items is None:
            self._items = list(self.base.items)
            for i, item in self.over.items():
                self._items[i] = item
        return self._items

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: SupportsIndex) -> Any:  # type: ignore[override]
        item = self.over.get(int(i), msgspec.UNSET)
        return self.base[i] if item is msgspec.UNSET else _decoded(item)

    def __reduce__(self) -> tuple:
        return Replaced, (self.base, self.over)

    def dicts(self, idx: Indices) -> list[Optional[dict]]:
        return self.take(idx).dicts(range(len(idx)))

    def take(self, idx: Indices) -> Args:
        taken = self.base.take(idx)
        at = np.flatnonzero(np.isin(np.asarray(idx, np.int64), list(self.over))).tolist() if len(idx) else []
        if at:
            items = list(taken.items)
            for k in at:
                items[k] = self.over[int(idx[k])]
            taken = Args(items, taken.raw)
        return taken

    def raw_item(self, i: int) -> Any:
        return self.over[i] if i in self.over else self.base.raw_item(i)

    def with_key(self, key: str) -> list[int]:
        return sorted(set(self.base.with_key(key)) | set(self.over))


_LIST = msgspec.json.Decoder(list)


def _decoded(a: Any) -> Any:
    return msgspec.json.decode(a) if a.__class__ is msgspec.Raw else a


class Extra(Sequence):
    """The keys of each event other than COLUMN_KEYS: ``extra[i]`` is a dict or None.

    ``columns`` (from the typed reader) is ``{key: per-event values}``, ``msgspec.UNSET``
    where an event lacks the key, in the reader's key order: the ~10% of Kineto events
    with flow keys cost no dict each, and the transform namespaces ids on whole columns.
    ``rest`` (the typed reader) returns all the columns, read on first use: a merge to JSON
    reads only the columns it rewrites, given up front (:meth:`read`).
    ``items`` (the generic reader) holds the dicts themselves.
    """

    __slots__ = ("items", "_columns", "_rest", "n")

    def __init__(self, items: Optional[list] = None, columns: Optional[dict[str, list]] = None,
                 n: Optional[int] = None, rest: Optional[Callable[[], dict[str, list]]] = None) -> None:
        self.items, self._columns, self._rest = items, columns, rest
        self.n: int = len(items) if items is not None else cast(int, n)

    @property
    def columns(self) -> dict[str, list]:
        if self._rest is not None:
            self._columns, self._rest = self._rest(), None
        return cast("dict[str, list]", self._columns)

    def read(self, key: str) -> Optional[list]:
        """The column of ``key`` (None when no event has it) among those given up front."""
        return cast("dict[str, list]", self._columns).get(key)

    def column(self, key: str, idx: Indices) -> list:
        """``key``'s value for each event of ``idx`` (indices), ``msgspec.UNSET`` where an
        event lacks the key: no dict per event."""
        if self.items is not None:
            return [e.get(key, msgspec.UNSET) if e else msgspec.UNSET for e in map(self.items.__getitem__, idx)]
        values = self.columns.get(key)
        return list(map(values.__getitem__, idx)) if values is not None else [msgspec.UNSET] * len(idx)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: SupportsIndex) -> Optional[dict]:  # type: ignore[override]
        if self.items is not None:
            return self.items[i]
        out = {k: v[i] for k, v in self.columns.items() if v[i] is not msgspec.UNSET}
        return out or None

    def __iter__(self) -> Iterator[Optional[dict]]:
        return iter(self.items) if self.items is not None else map(self.__getitem__, range(self.n))

    def __reduce__(self) -> tuple:
        return Extra, (self.items, self.columns if self.items is None else None, self.n)

    def take(self, idx: Indices) -> "Extra":
        """The extra keys of the events ``idx`` (a list of indices)."""
        if self.items is not None:
            return Extra(list(map(self.items.__getitem__, idx)))
        return Extra(columns={k: list(map(v.__getitem__, idx)) for k, v in self.columns.items()}, n=len(idx))


@dataclass(eq=False)
class RankTrace:
    """One input file: its events as columns plus the file-level facts."""

    path: str
    meta: dict[str, Any]                      # top-level keys other than traceEvents / tracemerge
    tracemerge: Optional[dict[str, Any]]      # the rank-file block, None for plain traces
    base_ns: Optional[int]          # baseTimeNanoseconds, None when the file has none
    names: list[Any]                     # string table for ``name`` and ``cat`` codes
    pids: list[Any]                      # original pid values (int or str), by pid code
    tids: list[Any]                      # original tid values, by tid code
    ph: np.ndarray                  # uint8, ord(ph)
    name: np.ndarray                # int32 code into names
    cat: np.ndarray                 # int32 code into names, -1 when absent
    pid: np.ndarray                 # int32 code into pids
    tid: np.ndarray                 # int32 code into tids
    ts: np.ndarray                  # int64 ns on the file's own clock, NO_TS when absent
    dur: np.ndarray                 # int64 ns, NO_DUR when absent
    args: Args                      # args per event (a plain list is wrapped)
    extra: Extra                    # the event's other keys per event (a plain list is wrapped)
    warnings: list[str] = field(default_factory=list)
    truncated: bool = False         # read up to the last complete event of a cut file
    # which core read it where the compiled core did not ('python: <why>'), kept with the
    # events so that a rank a worker holds says why, as one read again does
    read_by: Optional[str] = None
    # the typed reader's event structs, which the transform patches into output events
    # (``inputs.chrome._Event``); None for the generic reader
    events: Optional[list] = None

    def __post_init__(self) -> None:
        if not isinstance(self.args, Args):
            self.args = Args(self.args)
        if not isinstance(self.extra, Extra):
            self.extra = Extra(self.extra)

    def __len__(self) -> int:
        return len(self.ph)

    def drop_events(self) -> None:
        """Free the typed reader's event structs (the JSON writer's), after reading the
        extra keys out of them: every column stays."""
        if self.events is not None:
            self.extra.columns  # noqa: B018 (read now: they come from the structs)
            self.events = None

    @property
    def thread_stride(self) -> int:
        """The number that makes ``pid code * thread_stride + tid code`` one key per thread."""
        return max(len(self.tids), 1)

    def thread_keys(self, idx: Union[slice, np.ndarray, list[int]] = slice(None)) -> np.ndarray:
        """int64 thread key (``pid code * thread_stride + tid code``) of the events ``idx``:
        one number per (pid, tid), which splits back by ``divmod(key, thread_stride)``."""
        return self.pid[idx].astype(np.int64) * self.thread_stride + self.tid[idx]

    @property
    def timed(self) -> np.ndarray:
        """Mask of events that carry a timestamp."""
        return self.ts != NO_TS

    def time_span(self) -> Optional[tuple[int, int]]:
        """(first, last) ns over timed events, ends of complete events included."""
        mask = self.timed
        if not mask.any():
            return None
        ts = self.ts[mask]
        ends = ts + np.maximum(self.dur[mask], 0)
        return int(ts.min()), int(ends.max())

    def metadata(self, kind: str) -> dict[tuple[int, int], Any]:
        """{(pid code, tid code): name} of the "M" events named ``kind`` (the last one wins)."""
        code = self.code_of(kind)
        out: dict[tuple[int, int], Any] = {}
        if code is None:
            return out
        for i in np.flatnonzero((self.ph == ord("M")) & (self.name == code)):
            a = self.args[i]
            if isinstance(a, dict) and "name" in a:  # args of another JSON type name nothing
                out[(int(self.pid[i]), int(self.tid[i]))] = a["name"]
        return out

    def code_of(self, name: str) -> Optional[int]:
        try:
            return self.names.index(name)
        except ValueError:
            return None
