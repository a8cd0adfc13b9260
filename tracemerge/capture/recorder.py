"""The process-wide recorder that instrumentation appends to while a capture is active.

It is process-global, not per context object, because the callee side of an RPC runs in
a server thread that knows nothing of the caller's ``profile`` block: the served wrapper
just asks whether this process is capturing.
"""

import itertools
import threading
import time
import uuid
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

# The fields of an RPC that the caller sends with a wrapped call, as a tuple in this order
# (cheaper to pickle than a dict); the callee's record has them too.
HEADER_KEYS = ("rpc_id", "kind", "func", "name", "caller", "callee", "caller_name", "callee_name")
_CALLEE = HEADER_KEYS.index("callee")


# A call this process issued, kept as one list from the call's path on: making its record
# dict and span there, and keeping them, costs several µs per call end to end (measured,
# issue 27), so ``issued_record``/``issued_span`` make them when taken, off the call's
# path. The fields, by index:
(C_HEADER,     # the HEADER_KEYS tuple
 C_NATIVE,     # a builtin sent as itself (Peers)
 C_SEND,       # send_ns (t1)
 C_TID,        # the thread that issued it (its span's)
 C_COMPLETE,   # complete_ns (t4), once noted
 C_STATUS,     # "pending", "ok" or "error"
 C_ASYNC,      # whether its span ended on another thread (None until known)
 C_LAZY,       # its span ends in C++ (Recorder.unsettled); its end is read off the span
 C_SEEN,       # when a call settled lazily was seen done: with no span to read its end
               # from (trace=False), the record's complete_by_ns
 C_SHAPES,     # a native builtin's argument shapes, when the profiler records shapes
 ) = range(10)


def issued_record(call: list) -> dict:
    """The record of an issued ``call`` (docs/rank-file-format.md)."""
    record = dict(zip(HEADER_KEYS, call[C_HEADER]), role="caller", status=call[C_STATUS])
    if call[C_NATIVE]:
        record["native"] = True
        if call[C_SHAPES] is not None:
            record["shapes"] = call[C_SHAPES]
    record["send_ns"] = call[C_SEND]
    if call[C_COMPLETE] is not None:
        record["complete_ns"] = call[C_COMPLETE]
    elif not call[C_LAZY] and call[C_SEEN] is not None:
        # no span holds its end (trace=False): when it was seen done bounds it
        record["complete_by_ns"] = call[C_SEEN]
    return record


def issued_span(call: list, record: dict) -> "Span":
    """The caller span of an issued ``call`` whose record is ``record``."""
    header = call[C_HEADER]
    args = {"rpc_id": header[0], "role": "caller"}
    if call[C_ASYNC] is not None:
        args["async"] = call[C_ASYNC]
    return Span(header[3], call[C_TID], call[C_SEND], args, ends=record if call[C_LAZY] else None)


class Span(NamedTuple):
    """A profiler span this process opened whose trace event must carry ``args``.

    ``mark_ns`` is a ``time.time_ns()`` taken just after the span opened on thread
    ``tid``; the writer finds the event by (tid, name) and start time. A tuple: one is
    made per RPC on each side, on the call's path.

    ``rename``: a span torch opened itself, unnamed (``rref.to_here()``'s): ``mark_ns``
    is taken just *before* it opens, and the writer gives the event this name.
    """

    name: str
    tid: int
    mark_ns: int
    args: dict
    rename: str = ""
    # the caller record whose ``complete_ns`` is this span's end in the trace: set for
    # spans that end in C++ when their future completes (``Recorder.unsettled``)
    ends: Optional[dict] = None


@dataclass
class Recorder:
    # called just before RPC shuts down inside the block, while every worker still answers
    # (the capture learns who it is there when RPC started inside the block)
    on_rpc_end: Optional[Callable[[], None]] = None
    # called (on the call's thread) when the first call is sent, the first call served and
    # the first collective issued: the journal flushes then (a rank that dies in its first
    # second leaves them); one set lookup a call after that
    on_first: Optional[Callable[[], None]] = None
    _firsts: set = field(default_factory=set)
    # the calls this process issued (C_* lists)
    calls: list = field(default_factory=list)
    collectives: list = field(default_factory=list)
    spans: list = field(default_factory=list)
    # (header, side) of the calls served while capturing (add_served)
    served: list = field(default_factory=list)
    # callee sides asked for when rpc.shutdown() ran inside the block (the file is written
    # after it, when no callee can be asked any more): "clock_rank" objects, as fetched
    fetched: list = field(default_factory=list)
    # the callees that admitted this process's builtins (``Peers``), each with the clock
    # reading its answer carried: {"callee", "asked_ns", "answered_ns", "answer":
    # {"clock_rank", "boot_id", "read_ns"}} (the block's ``native_callees``; combine places
    # the calls on the callee's clock with it when the two do not share one)
    native_callees: list = field(default_factory=list)
    # {callee id: time.monotonic() its next clock sample is due} (rpc._maybe_sample), of
    # the callees builtins went to natively; their clock samples join native_callees
    clock_due: dict = field(default_factory=dict)
    # callers admitted to send builtins here natively, ever in this capture: the writer
    # then keeps the outermost ops of the RPC server threads (the block's ``served_ops``),
    # which combine pairs with those callers' calls
    admitted: list = field(default_factory=list)
    # Whether this process's profiler records the ops of RPC server threads (all threads,
    # no schedule): only then may callers send builtins natively (their side is found in
    # the trace). Set once the profiler runs.
    serves_natively: bool = False
    # trace=False: builtins keep their C++ path to every callee, also one that does not
    # trace (such a call then has the caller's side only)
    builtins_always_native: bool = False
    # profile(wrap_builtins=True): builtins go wrapped like Python functions
    wrap_builtins: bool = False
    # the profiler records input shapes (record_shapes=True): a native builtin's record
    # keeps its arguments' shapes, which tell its op from others in flight with it
    shapes: bool = False
    _stopping: bool = False
    _askers: set = field(default_factory=set)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    # trace=True: the span of an rpc_async or remote call ends in C++ when its future
    # completes, where a Python done-callback would cost more than all the rest of the
    # call's capture (a GIL hand-off on the RPC agent's thread, and the relayed future).
    # The record is settled later, off the call's path (``settle``): its status from the
    # future, its end (``complete_ns``) from the span's event when the file is written.
    traced: bool = False
    # (call, future) of the calls not settled yet, oldest first
    unsettled: deque = field(default_factory=deque)
    _settling: threading.Lock = field(default_factory=threading.Lock)
    # the RPC agent last seen, this worker's and the callees' WorkerInfo under it
    # (rpc._worker_infos)
    agent: Any = None
    me: Any = None
    workers: dict = field(default_factory=dict)
    # (kind, func, callee as given) -> how such a call goes out (rpc._route), or None for
    # one that goes untraced: worked out at a function's first call to a callee, not at
    # every call
    routes: dict = field(default_factory=dict)
    # RRef -> (rpc_id, func) of the rpc.remote() call that made it, for naming its to_here()
    # (capture/rref.py); weak, so the job's RRefs are freed as they would be untraced
    rrefs: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    _seq: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, item: Any) -> None:
        """Append to ``collectives``, ``spans`` or ``native_callees`` (from any thread)."""
        with self._lock:
            getattr(self, kind).append(item)
        if kind == "collectives":
            self._first(kind)

    def add_call(self, call: list) -> None:
        """A call issued (a C_* list)."""
        with self._lock:
            self.calls.append(call)
        self._first("calls")

    def _first(self, kind: str) -> None:
        if kind not in self._firsts:
            self._firsts.add(kind)
            if self.on_first is not None:
                self.on_first()

    def settle(self, everything: bool = False) -> None:
        """Settle the calls whose future completed: their status ``ok``/``error`` and the
        time they were seen done (``seen_ended``). By default only from the oldest on (cheap enough for every call); ``everything``: all
        of them (when the records are taken)."""
        pending = self.unsettled
        if not everything and not (pending and pending[0][1].done()):
            return
        with self._settling:
            for _ in range(len(pending)):
                call, fut = entry = pending.popleft()
                if not fut.done():
                    if not everything:
                        pending.appendleft(entry)
                        break
                    pending.append(entry)
                    continue
                seen_ended(call, fut)

    def admit(self, caller: int) -> Optional[str]:
        """A caller asks whether it may send builtins natively: this capture's token when
        it serves natively, else None. The caller is told when this capture stops."""
        with self._lock:
            if not self.serves_natively or self._stopping:
                return None
            if caller not in self._askers:
                self._askers.add(caller)
                self.admitted.append(caller)
            return self.token

    def native_in_flight(self, callee: int) -> list:
        """The calls sent natively to RPC worker ``callee`` that have not ended yet (C_*
        lists): their callee must record until they were served (``rpc._revoke``)."""
        with self._lock:
            return [c for c in self.calls
                    if c[C_NATIVE] and c[C_HEADER][_CALLEE] == callee and c[C_STATUS] == "pending"]

    def stop_admitting(self) -> list:
        """No caller is admitted any more; the callers admitted so far, to be told."""
        with self._lock:
            self._stopping = True
            askers, self._askers = sorted(self._askers), set()
        return askers

    def next_rpc_id(self, caller: int) -> str:
        """A new id of a call from RPC worker ``caller`` (its id: unique in the RPC world)."""
        # next() on itertools.count is atomic under the GIL: ids stay unique across threads
        return f"{caller}:{next(self._seq)}"

    def add_served(self, header: tuple, side: dict) -> None:
        """A call this process serves while capturing: its record and span are made from
        the caller's ``header`` and the served ``side`` when taken, off the call's path."""
        with self._lock:
            self.served.append((header, side))
        self._first("served")

    def take(self, start_ns: int, stop_ns: int) -> dict:
        """Records and spans that began in [start_ns, stop_ns]; drops everything begun
        before stop_ns, which no later window can contain."""
        self.settle(everything=True)
        out = {}
        with self._lock:
            for name, when in (("calls", _send), ("collectives", _start), ("spans", _mark),
                               ("served", _served_start)):
                items = getattr(self, name)
                out[name] = [x for x in items if start_ns <= when(x) <= stop_ns]
                setattr(self, name, [x for x in items if when(x) > stop_ns])
        out["rpcs"] = []
        for call in out.pop("calls"):
            record = issued_record(call)
            out["rpcs"].append(record)
            out["spans"].append(issued_span(call, record))
        for header, side in out.pop("served"):
            record, span = callee_record(header, side)
            out["rpcs"].append(record)
            out["spans"].append(span)
        return out


    def caller_records(self) -> list:
        """The calls this process issued so far (records stay for ``take``)."""
        with self._lock:
            calls = list(self.calls)
        return [issued_record(c) for c in calls]

    def keep_sides(self, sides: list) -> None:
        with self._lock:
            self.fetched += sides

    def fetched_sides(self, calls: list) -> list:
        """The fetched sides of ``calls`` (caller records), taken out of ``fetched``; a
        callee's error object comes along when one of ``calls`` went to that callee."""
        ids = {r["rpc_id"] for r in calls}
        callees = {r["callee"] for r in calls}
        out: list = []
        rest: list = []
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


def seen_ended(call: list, fut: Any) -> None:
    """A call settled lazily ended, seen now: its status, and the time it was seen done,
    which bounds its end where no span holds it (trace=False; a span's end is read when
    the file is written)."""
    call[C_STATUS] = "ok" if succeeded(fut) else "error"
    if call[C_SEEN] is None:
        call[C_SEEN] = time.time_ns()


def succeeded(fut: Any) -> bool:
    """Whether a completed future holds a value (not an exception)."""
    try:
        fut.value()
        return True
    except BaseException:
        return False


def _send(call: list) -> int:
    return call[C_SEND]


def _served_start(served: tuple) -> int:
    return served[1]["start_ns"]


def served_record(header: tuple, side: dict) -> dict:
    """The record of a call served while capturing, from its header and side (an
    ``async_execution`` side's status read off its future, if done: :func:`settle_side`)."""
    settle_side(side)
    record = dict(zip(HEADER_KEYS, header), role="callee", status=side["status"], start_ns=side["start_ns"])
    if "end_ns" in side:
        record["end_ns"] = side["end_ns"]
    _bound_end(side, record)
    return record


def _bound_end(side: dict, out: dict) -> None:
    """A side with no end noted but seen done: when it was seen done bounds its end
    (``end_by_ns``); the writer puts the end of its span in place of this where the
    profile holds one (not: trace=False, a thread not profiled, a caller's copy)."""
    if "end_ns" not in side and "seen_ns" in side:
        out["end_by_ns"] = side["seen_ns"]


def callee_record(header: tuple, side: dict) -> tuple:
    """(record, span) of a call served while capturing, from its header and side. An
    ``async_execution`` side whose span ended in C++ has its end (``end_ns``) read off the
    span when the file is written, as a caller's ``rpc_async`` has."""
    record = served_record(header, side)
    args = {"rpc_id": record["rpc_id"], "role": "callee"}
    if "end_ns" in side:
        args["async"] = side.get("end_tid", side["tid"]) != side["tid"]
    ends = record if side.get("in_span") else None
    return record, Span(record["name"] + "#remote", side["tid"], side["start_ns"], args, ends=ends)


def settle_side(side: dict) -> None:
    """An ``async_execution`` side whose future completed: its status, and when it was seen
    done (``seen_ns``), which bounds its end where no span holds it. No Python runs when
    its future completes: this is asked when the side is read, or at the next call served."""
    fut = side.get("future")
    if fut is not None and fut.done():
        side["status"] = "ok" if succeeded(fut) else "error"
        side.setdefault("seen_ns", time.time_ns())
        side.pop("future", None)  # settled once, on whichever thread read it first


def _start(record: dict) -> int:
    return record["start_ns"]


def _mark(span: Span) -> int:
    return span.mark_ns


# a side's keys kept in this process only: the C++-ended span's future, where its end is
_SIDE_ONLY = ("end_tid", "future", "in_span", "seen_ns")


class ServedSides:
    """The callee's side of every call this process served, until its caller takes them.

    Kept whether or not this process is capturing (the caller's ``profile`` asks for them
    when it writes its file); bounded, oldest first out, so a caller that never asks (it
    crashed, or was not capturing after all) cannot grow it without end.
    """

    LIMIT = 1_000_000

    def __init__(self) -> None:
        self._sides: dict = {}  # rpc_id -> side; dicts keep insertion order, so the oldest go first
        self._later: deque = deque()  # async sides waiting for their futures, oldest first
        self._lock = threading.Lock()

    def begin(self, rpc_id: str) -> dict:
        if self._later:
            self.settle()
        side = {"rpc_id": rpc_id, "start_ns": time.time_ns(), "tid": threading.get_native_id(),
                "status": "pending"}
        sides = self._sides
        if len(sides) >= self.LIMIT:
            with self._lock:
                while len(sides) >= self.LIMIT:
                    del sides[next(iter(sides))]
        # one dict store, atomic under the GIL: no lock on the served call's path (take
        # pops under the lock, each pop atomic too)
        sides[rpc_id] = side
        return side

    @staticmethod
    def end(side: dict, ok: bool, is_async: bool = False) -> None:
        side["end_ns"] = time.time_ns()
        side["status"] = "ok" if ok else "error"
        if is_async:  # where it ended: a span that ends on another thread is asynchronous
            side["end_tid"] = threading.get_native_id()

    def later(self, side: dict, fut: Any, in_span: bool) -> None:
        """An ``async_execution`` side that ends when ``fut`` completes, with no callback on
        it: its status is read off the future (:func:`settle_side`) when the side is read
        or the next call is served; ``in_span``: its span ends in C++ and holds its end."""
        side["future"], side["in_span"] = fut, in_span
        with self._lock:
            if len(self._later) >= self.LIMIT:  # a future that never completes holds the queue: bounded
                self._later.popleft()
            self._later.append(side)

    def settle(self) -> None:
        """The waiting async sides whose futures completed, from the oldest on (a served
        call asks: cheap when the oldest has not completed)."""
        later = self._later
        with self._lock:
            while later:
                fut = later[0].get("future")
                if fut is not None and not fut.done():
                    return
                settle_side(later.popleft())

    def take(self, rpc_ids: list) -> list:
        """The sides of ``rpc_ids`` that are here (copies: an in-flight call may still end),
        removed; an async side not ended by a span it holds has ``end_by_ns`` (when it was
        seen done) in place of its end, which its caller cannot learn from this process."""
        with self._lock:
            found = [self._sides.pop(i, None) for i in rpc_ids]
        out = []
        for side in found:
            if side is None:
                continue
            settle_side(side)
            copy = {k: v for k, v in side.items() if k not in _SIDE_ONLY}
            _bound_end(side, copy)
            out.append(copy)
        return out


class Peers:
    """Which callees this process may send builtins to natively.

    A builtin (``torch.add``) sent as itself runs on the callee's C++ path, where no Python
    runs: its callee side can only come from the callee's own profiler trace (its op on an
    RPC server thread), which ``combine`` pairs with the caller's record. So a caller sends
    a callee builtins natively only after the callee said that it records its server
    threads (``Recorder.admit``: the caller then gets a token); until then, or when it said
    no, builtins go wrapped like Python functions (whose served wrapper notes the side).
    Before that callee stops recording it tells every caller it admitted (``revoke``), and
    builtins to it go wrapped from then on; it stops once the builtins sent to it natively
    before have ended (``rpc._revoke`` finds them among the caller's records,
    ``Recorder.native_in_flight``). Nothing else is counted or kept per call: the pairing
    needs nothing but the records and the callee's trace.
    """

    # A callee that said no is asked again after this long: it may have been about to
    # start its profiler (the answer costs one round trip).
    RETRY_S = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._token: dict = {}      # callee id -> token (native) or None (wrap); absent: not asked
        self._asked: dict = {}      # callee id -> time.monotonic() of the last question
        self._stopped: set = set()  # tokens whose capture stopped (a late answer cannot revive one)

    def route(self, callee: int) -> Optional[bool]:
        """True: send natively; False: wrap; None: ask the callee first (``answer``), then
        ask again (the first call to it, or its last no is RETRY_S old)."""
        token = self._token.get(callee, False)  # read without the lock: one dict lookup
        if token:
            return True
        if self._said_no_lately(callee, token):
            # answered without the lock, which every call to a callee that does not profile
            # (e.g. under trace=False) took before (~3 % of 50 calls in flight)
            return False
        with self._lock:
            token = self._token.get(callee, False)
            if token is False or not self._said_no_lately(callee, token):
                self._token[callee] = None
                self._asked[callee] = time.monotonic()
                return None
            return bool(token)

    def _said_no_lately(self, callee: int, token: Any) -> bool:
        """Asked (token None: no, or no answer yet) within the last RETRY_S."""
        return token is None and time.monotonic() - self._asked.get(callee, 0.0) <= self.RETRY_S

    def admits(self, callee: int) -> bool:
        """Whether builtins to ``callee`` may go natively now (no question asked)."""
        return bool(self._token.get(callee, False))

    def answer(self, callee: int, token: Optional[str]) -> None:
        """The callee's answer to the question ``route`` asked for."""
        with self._lock:
            if token is not None and token not in self._stopped and self._token.get(callee) is None:
                self._token[callee] = token

    def revoke(self, callee: int, token: str) -> None:
        """``callee``'s capture ``token`` stops: builtins to it go wrapped from now on."""
        with self._lock:
            self._stopped.add(token)
            if self._token.get(callee) == token:
                self._token[callee] = None
                self._asked[callee] = time.monotonic()

    def forget_refusals(self) -> None:
        """A new capture here: callees that said no are asked again (they may record now)."""
        with self._lock:
            for callee in [c for c, t in self._token.items() if t is None]:
                del self._token[callee]


class Process:
    """This process's capture state, in one object (:data:`process`, the only one): the
    active Recorder, and what outlives a capture, the sides served and the callees' answers.
    Process-wide for the reason the module docstring gives: RPC server threads serve any
    caller and know nothing of a ``profile`` block."""

    __slots__ = ("_lock", "current", "served", "peers")  # read on every call's path: plain slots

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: Optional[Recorder] = None  # the active Recorder, or None
        # kept whether or not capturing: the callee sides of the calls served, for their callers
        self.served = ServedSides()
        # which callees admit builtins natively: a callee's capture asks what was sent there
        self.peers = Peers()

    def activate(self, recorder: Recorder) -> None:
        with self._lock:
            if self.current is not None:
                raise RuntimeError("a tracemerge capture is already active in this process")
            self.current = recorder

    def deactivate(self) -> None:
        self.current = None


process = Process()
