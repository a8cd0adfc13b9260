"""The process-wide recorder that instrumentation appends to while a capture is active.

It is process-global, not per context object, because the callee side of an RPC runs in
a server thread that knows nothing of the caller's ``profile`` block: the served wrapper
just asks whether this process is capturing.
"""

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class Span:
    """A profiler span this process opened whose trace event must carry ``args``.

    ``mark_ns`` is a ``time.time_ns()`` taken just after the span opened on thread
    ``tid``; the writer finds the event by (tid, name) and start time.
    """

    name: str
    tid: int
    mark_ns: int
    args: dict


@dataclass
class Recorder:
    # called just before RPC shuts down inside the block, while every worker still answers
    # (the capture learns who it is there when RPC started inside the block)
    on_rpc_end: Optional[Callable[[], None]] = None
    rpcs: list = field(default_factory=list)
    collectives: list = field(default_factory=list)
    spans: list = field(default_factory=list)
    # callee sides asked for when rpc.shutdown() ran inside the block (the file is written
    # after it, when no callee can be asked any more): "clock_rank" objects, as fetched
    fetched: list = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind, item):
        """Append to ``rpcs``, ``collectives`` or ``spans`` (from any thread)."""
        with self._lock:
            getattr(self, kind).append(item)

    def next_rpc_id(self, caller):
        """A new id of a call from RPC worker ``caller`` (its id: unique in the RPC world)."""
        # next() on itertools.count is atomic under the GIL: ids stay unique across threads
        return f"{caller}:{next(self._seq)}"

    def take(self, start_ns, stop_ns):
        """Records and spans that began in [start_ns, stop_ns]; drops everything begun
        before stop_ns, which no later window can contain."""
        out = {}
        with self._lock:
            for name, when in (("rpcs", _rpc_start), ("collectives", _start), ("spans", _mark)):
                items = getattr(self, name)
                out[name] = [x for x in items if start_ns <= when(x) <= stop_ns]
                setattr(self, name, [x for x in items if when(x) > stop_ns])
        return out


    def caller_records(self):
        """The calls this process issued so far (records stay for ``take``)."""
        with self._lock:
            return [r for r in self.rpcs if r["role"] == "caller"]

    def keep_sides(self, sides):
        with self._lock:
            self.fetched += sides

    def fetched_sides(self, calls):
        """The fetched sides of ``calls`` (caller records), taken out of ``fetched``; a
        callee's error object comes along when one of ``calls`` went to that callee."""
        ids = {r["rpc_id"] for r in calls}
        callees = {r["callee"] for r in calls}
        out, rest = [], []
        with self._lock:
            for side in self.fetched:
                if "calls" not in side:
                    (out if side["clock_rank"] in callees else rest).append(side)
                    continue
                mine = [c for c in side["calls"] if c["rpc_id"] in ids]
                if mine:
                    out.append(dict(side, calls=mine))
                if len(mine) < len(side["calls"]):
                    rest.append(dict(side, calls=[c for c in side["calls"] if c["rpc_id"] not in ids]))
            self.fetched = rest
        return out


def _rpc_start(record):
    return record["send_ns"] if record["role"] == "caller" else record["start_ns"]


def _start(record):
    return record["start_ns"]


def _mark(span):
    return span.mark_ns


class ServedSides:
    """The callee's side of every call this process served, until its caller takes them.

    Kept whether or not this process is capturing (the caller's ``profile`` asks for them
    when it writes its file); bounded, oldest first out, so a caller that never asks (it
    crashed, or was not capturing after all) cannot grow it without end.
    """

    LIMIT = 1_000_000

    def __init__(self):
        self._sides = {}  # rpc_id -> side; dicts keep insertion order, so the oldest go first
        self._lock = threading.Lock()

    def begin(self, header):
        side = {"rpc_id": header["rpc_id"], "start_ns": time.time_ns(), "tid": threading.get_native_id(),
                "status": "pending"}
        with self._lock:
            if len(self._sides) >= self.LIMIT:
                del self._sides[next(iter(self._sides))]
            self._sides[side["rpc_id"]] = side
        return side

    @staticmethod
    def end(side, ok):
        side["end_ns"] = time.time_ns()
        side["status"] = "ok" if ok else "error"

    def take(self, rpc_ids):
        """The sides of ``rpc_ids`` that are here (copies: an in-flight call may still end), removed."""
        with self._lock:
            found = [self._sides.pop(i, None) for i in rpc_ids]
        return [dict(side) for side in found if side is not None]


_lock = threading.Lock()
current = None  # the active Recorder, or None
# Process-wide for the same reason as ``current``: RPC server threads serve any caller.
served = ServedSides()


def activate(recorder):
    global current
    with _lock:
        if current is not None:
            raise RuntimeError("a tracemerge capture is already active in this process")
        current = recorder


def deactivate():
    global current
    current = None
