"""The journal: what a rank did, on disk at least every second, for when it dies unwritten.

A rank file is written when the block ends (or a signal ends it, capture/signals.py); a
rank that dies by ``os._exit``, SIGKILL, the OOM killer or a segfault never writes one,
and its records die with it. So while a capture is active a flusher thread appends to
``rank{R}.journal`` beside the rank file, every ``PERIOD_S`` and at each block boundary:
the records made since (calls issued, calls served, collectives; pending ones too, and
once more when they end) and a line saying it was alive then — every ``EARLY_PERIOD_S``
in its first ``EARLY_S``, and at once when the first call is sent or served and the first
collective issued. It is ``pid{P}.journal`` until the rank is known, then renamed
``rank{R}.journal`` (once, atomically) with the identity written at once. Each flush is one
``os.write`` of whole lines: the kernel keeps what was written when the process dies, and
a journal cut in a line is read up to its last whole line. Format: docs/rank-file-format.md
("The journal").

The flusher reads the recorder's lists off the calls' path, so recording a call costs
nothing more; a record made and taken into a rank file between two flushes may be
missing from the journal, but then the rank file holds it.
"""

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import orjson

from tracemerge.capture import recorder

JOURNAL_VERSION = 1
# a record's line is {kind: record}: its start, per kind, put before the record's own
# bytes (the same bytes as dumping the wrapping dict, without making one per record)
_RPC_LINE = b'{"rpc":'
_COLLECTIVE_LINE = b'{"collective":'
PERIOD_S = 0.5
# the first seconds flush more often: a job dies most often there (its peers, its setup),
# and a rank that dies then must still leave its first records (docs/capture.md measures the cost)
EARLY_S = 2.0
EARLY_PERIOD_S = 0.05
SUFFIX = ".journal"


def name_of(rank: Optional[int], pid: int) -> str:
    """The journal's file name: ``rank{R}.journal``, ``pid{P}.journal`` while the rank is unknown."""
    return f"rank{rank}{SUFFIX}" if rank is not None else f"pid{pid}{SUFFIX}"


class Journal:
    """Appends ``recorder``'s records to ``path`` every ``period_s`` (a daemon thread) and
    on :meth:`flush`; ``meta()`` gives the identity and anchors written first (and again
    when they change)."""

    def __init__(self, path: Path, meta: Callable[[], Dict[str, Any]], rec: "recorder.Recorder",
                 period_s: float = PERIOD_S) -> None:
        self.path = path
        self._meta = meta
        self._rec = rec
        self._period_s = period_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # poke: flush now (the flusher's thread, off the caller's path)
        self._started = time.monotonic()
        self._fd: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._last_meta: Optional[Dict[str, Any]] = None
        # per recorder list: (the list object last seen, how many of its items were journaled)
        self._seen: Dict[str, Tuple[Any, int]] = {}
        # entries journaled while not ended, by key: written again when they end
        self._open: Dict[Any, Tuple[str, Any]] = {}

    def start(self) -> "Journal":
        self._started = time.monotonic()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.flush(first=True)
        self._thread = threading.Thread(target=self._run, name="tracemerge-journal", daemon=True)
        self._thread.start()
        return self

    def poke(self) -> None:
        """Have the flusher flush now (the first call sent or served, the first collective)."""
        self._wake.set()

    def rename(self, path: Path) -> None:
        """Go on as ``path`` (the rank became known): one rename, atomic; the open file goes on."""
        with self._lock:
            if self._fd is None or path == self.path:
                return
            try:
                os.rename(self.path, path)
            except OSError:  # never fail the training job over its journal's name
                return
            self.path = path

    def pause(self) -> None:
        """Stop the flusher thread; what is recorded meanwhile waits for the next flush (the
        capture without its journal: ``benchmarks/capture_overhead.py --paired journal``)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def resume(self) -> None:
        """After :meth:`pause`: flush what waited, then flush every ``period_s`` again."""
        if self._fd is None or self._thread is not None:
            return
        self.flush()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tracemerge-journal", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stop, wake = self._stop, self._wake
        while not stop.is_set():
            early = time.monotonic() - self._started < EARLY_S
            wake.wait(min(self._period_s, EARLY_PERIOD_S) if early else self._period_s)
            wake.clear()
            if stop.is_set():
                return
            try:
                self.flush()
            except Exception:  # never fail the training job over its journal
                return

    def flush(self, first: bool = False, closing: bool = False) -> None:
        """Append what is new since the last flush, and that this rank is alive now."""
        with self._lock:
            if self._fd is None:
                return
            lines: List[bytes] = []
            meta = self._meta()
            if meta != self._last_meta:
                head = {"tracemerge_journal": JOURNAL_VERSION, "meta": meta} if first else {"meta": meta}
                lines.append(orjson.dumps(head))
                self._last_meta = meta
            settle = getattr(self._rec, "settle", None)
            if settle is not None:
                settle(everything=True)  # statuses of calls whose futures completed
            for line_start, key, record in self._new():
                lines.append(line_start + orjson.dumps(record) + b"}")
            now = time.time_ns()
            lines.append(orjson.dumps({"closed_ns": now} if closing else {"alive_ns": now}))
            os.write(self._fd, b"\n".join(lines) + b"\n")

    def close(self, remove: bool = False) -> None:
        """Stop, with a last flush (the block ended); ``remove``: its rank file is written,
        which holds all the journal does, so the journal goes."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self._period_s)
        if not remove:
            self.flush(closing=True)
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                if remove:
                    try:
                        os.unlink(self.path)
                    except OSError:
                        pass

    def _new(self) -> List[Tuple[bytes, Any, dict]]:
        """(line start, key, record) of the records new or ended since the last flush."""
        out = []
        for name in ("calls", "served", "collectives"):
            items = getattr(self._rec, name, None)
            if items is None:
                continue
            seen, count = self._seen.get(name, (None, 0))
            if seen is not items:  # the recorder took its records (a file was written): a new list
                count = 0
            fresh = items[count:]
            self._seen[name] = (items, count + len(fresh))
            for item in fresh:
                kind, key, record, ended = _entry(name, item)
                if key in self._open:
                    continue
                out.append((kind, key, record))
                if not ended:
                    self._open[key] = (name, item)
        for key, (name, item) in list(self._open.items()):
            kind, _, record, ended = _entry(name, item)
            if ended:
                out.append((kind, key, record))
                del self._open[key]
        return out


def _entry(name: str, item: Any) -> Tuple[bytes, Any, dict, bool]:
    """(its line's start, key, record as the rank file holds it, ended) of one of the
    recorder's items."""
    if name == "calls":
        record = recorder.issued_record(item)
        if "complete_ns" not in record and "complete_by_ns" not in record and item[recorder.C_SEEN] is not None:
            # its span's end is read when the file is written: until then, when it was seen done bounds it
            record["complete_by_ns"] = item[recorder.C_SEEN]
        return _RPC_LINE, (record["rpc_id"], "caller"), record, record["status"] != "pending"
    if name == "served":
        # the journal needs no span; an async_execution side whose span's end is read when
        # the file is written has, until then, when it was seen done (end_by_ns)
        record = recorder.served_record(*item)
        return _RPC_LINE, (record["rpc_id"], "callee"), record, record["status"] != "pending"
    record = dict(item)
    return (_COLLECTIVE_LINE, (record["group"], record.get("seq"), record["start_ns"]), record,
            "end_ns" in record or "error" in record)
