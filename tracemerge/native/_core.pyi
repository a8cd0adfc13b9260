"""Types of the compiled core (``_core.c``; docs/native.md): one scan of a Chrome/Kineto
document, the splice writer, the .pftrace debug annotations."""

from typing import Any, Dict, List, Optional, Tuple, Union

from _typeshed import ReadableBuffer
from numpy import ndarray

# a buffer of int64 (numpy's arrays among them: numpy declares their buffer protocol to
# type checkers only from Python 3.12 on, as __buffer__)
_Int64Buffer = Union[ReadableBuffer, ndarray]

# flags of an event, set per event in the scan's flags column (Scan.columns)
F_TS: int
F_DUR: int
F_TID_NULL: int
F_TID_ABSENT: int
F_NAME: int
F_CAT: int
F_ARGS: int
# what Scan.arg_ids gives where the args lack the key, and where the event has no args
ARG_ID_ABSENT: int
ARG_ID_NO_ARGS: int


class Scan:
    """One scanned trace document: per-event records and the tables the columns code into."""

    @property
    def n(self) -> int: ...                      # number of events
    @property
    def names(self) -> List[Any]: ...            # the name/cat table
    @property
    def pids(self) -> List[Any]: ...             # the pid table
    @property
    def tids(self) -> List[Any]: ...             # the tid table
    @property
    def top(self) -> Dict[str, Optional[Tuple[int, int]]]: ...  # top-level keys: (start, end), None for traceEvents
    @property
    def keys(self) -> List[str]: ...             # the event keys any event uses
    def columns(self) -> Tuple[bytes, bytes, bytes, bytes]: ...   # (ph, codes, times, flags)
    def flow_ids(self, which: int) -> Tuple[List[int], List[int]]: ...  # (indices, ids) of id (0) or bind_id (1)
    def extra_tokens(self, key: str) -> Tuple[List[int], List[bytes]]: ...  # (indices, raw bytes) of an extra key
    def args_spans(self) -> bytes: ...           # int64 (offset, length) pairs
    def args_with(self, token: bytes) -> List[int]: ...  # indices of the args that contain a token
    def args_array(self, idx: _Int64Buffer) -> bytes: ...  # the JSON array of the args of int64 indices
    def arg_ids(self, idx: _Int64Buffer, key: int) -> bytes: ...  # int64 values of ARG_ID_KEYS[key]; -1, -2
    def write(self, idx: _Int64Buffer, ts_ns: _Int64Buffer, dur_ns: _Int64Buffer, pid_base: int, rank: int,
              overrides: Dict[int, bytes], tids: Dict[int, bytes] = ...) -> Optional[bytes]: ...


def scan(data: ReadableBuffer) -> Union[Scan, str]:
    """A Scan of ``data``, or a str saying why the core does not take it."""


def annotations(items: List[Any], start: int, rank: int, iids: Dict[str, bytes],
                new_names: List[bytes]) -> Tuple[List[bytes], int]:
    """(debug annotations of each of ``items[start:]``, the index of the first one it declined)."""


def walk(start: _Int64Buffer, end: _Int64Buffer) -> Tuple[bytes, bool]:
    """(parents as int64 bytes, proper) of one thread's slices sorted by (start, -end): torch's
    stack walk, and whether they form a proper tree (``nesting.walk``)."""
