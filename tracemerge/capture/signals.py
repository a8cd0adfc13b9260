"""A capture that is told to end by a signal still writes its rank file.

Launchers end a job's workers by signal: ``mp.spawn`` and torchrun send SIGTERM to the
survivors when one worker dies, SLURM, Kubernetes and ``timeout`` send SIGTERM, a
terminal SIGINT or SIGHUP. By default Python dies of them (or raises KeyboardInterrupt
where the block may not reach its end), and a capture's records, held in memory, die with
it. :class:`OnSignal` runs ``on_signal`` (write the file) first, then ends the process the
way the signal would have: the handler that was there before is called (a Python one),
or the signal is delivered again under its old disposition, so the exit status is the
signal's.

Python runs a signal handler in the main thread only, between bytecodes, and the main
thread may be blocked in C++ (a collective that waits for a rank that never comes,
``fut.wait()``) or hold a lock the write needs. So the work is done by a watcher thread:
Python's C-level handler writes the signal's number to a wakeup socket at once, the
watcher reads it, runs ``on_signal`` and ends the process; the Python-level handler only
chains to the previous one once that is done.
"""

import ctypes
import os
import signal
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional

# the signals that end a worker and that Python can catch; SIGABRT only when sent by
# kill: abort() in C++ re-raises it as soon as the C-level handler returns
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGABRT") if hasattr(signal, name))

class OnSignal:
    """Within ``with OnSignal(on_signal):`` each of ``signals`` first calls
    ``on_signal(signum)`` (once, from whichever thread gets there first), then ends the
    process as the signal would have. Installed only from the main thread (elsewhere it
    does nothing: Python allows handlers there only); the previous handlers and wakeup fd
    are put back when the block ends. A signal the process ignored stays ignored."""

    def __init__(self, on_signal: Callable[[int], None], signals: tuple = SIGNALS) -> None:
        self._on_signal = on_signal
        self._signals = signals
        self._previous: Dict[int, Any] = {}
        self._once = threading.Lock()
        self._fired = threading.Event()
        self._closing = threading.Event()
        self._socks: List[socket.socket] = []
        self._old_fd: Optional[int] = None
        self._watcher: Optional[threading.Thread] = None
        # time.time_ns() when the signal was seen and when on_signal returned (docs/capture.md)
        self.seen_ns: Optional[int] = None
        self.written_ns: Optional[int] = None

    @property
    def fired(self) -> bool:
        """Whether a signal ran ``on_signal``."""
        return self._fired.is_set()

    def __enter__(self) -> "OnSignal":
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in self._signals:
            previous = signal.getsignal(sig)
            if previous in (signal.SIG_IGN, None):  # ignored (nohup), or set outside Python: leave it
                continue
            self._previous[sig] = previous
            signal.signal(sig, self._handle)
        if self._previous:
            reader, writer = socket.socketpair()
            writer.setblocking(False)
            self._socks = [reader, writer]
            self._old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
            self._watcher = threading.Thread(target=self._watch, args=(reader, self._old_fd),
                                             name="tracemerge-signals", daemon=True)
            self._watcher.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.restore()

    def restore(self) -> None:
        """Put the previous handlers and wakeup fd back (from the main thread); idempotent."""
        if threading.current_thread() is not threading.main_thread() or not self._socks:
            return
        if self._watcher is threading.current_thread():
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        signal.set_wakeup_fd(-1 if self._old_fd is None else self._old_fd)
        self._closing.set()
        try:
            self._socks[1].send(b"\0")  # wake the watcher to end
        except OSError:
            pass
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=1.0)
        for s in self._socks:
            s.close()
        self._socks = []

    def _handle(self, signum: int, frame: Any) -> None:
        """The Python-level handler (main thread): once the watcher has written the file,
        the previous handler; until then nothing (the watcher is at work)."""
        if not self._fired.is_set():
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.restore()
        if callable(previous):
            previous(signum, frame)  # e.g. KeyboardInterrupt, or the launcher's own handler
        else:
            _die(signum, previous)

    def _watch(self, reader: socket.socket, old_fd: Optional[int]) -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data or self._closing.is_set():
                return
            if old_fd is not None and old_fd >= 0:
                try:  # the wakeup fd set before ours (an event loop's) still hears of its signals
                    os.write(old_fd, data)
                except OSError:
                    pass
            for signum in data:
                if signum in self._previous:
                    self._fire(signum)
                    previous = self._previous[signum]
                    if callable(previous):
                        # the main thread chains to it in _handle (again, if it ran before
                        # the file was written)
                        signal.pthread_kill(threading.main_thread().ident or 0, signum)
                    else:
                        _die(signum, previous, from_watcher=True)
                    return

    def _fire(self, signum: int) -> None:
        self.seen_ns = time.time_ns()
        with self._once:
            if self._fired.is_set():
                return
            try:
                self._on_signal(signum)
            finally:
                self.written_ns = time.time_ns()
                self._fired.set()


def _die(signum: int, previous: Any, from_watcher: bool = False) -> None:
    """End the process as ``signum`` under ``previous`` would have."""
    if callable(previous):
        # a Python handler: the main thread runs it (from the watcher: the signal is still
        # flagged for the main thread, whose handler chains to it once it runs)
        return
    if from_watcher:
        # Python lets only the main thread set a disposition; the C library's call does
        # it from here (the process ends now, Python's view of its handlers no matter)
        ctypes.CDLL(None).signal(signum, ctypes.c_void_p(0))  # SIG_DFL
    else:
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(1.0)  # the signal is delivered at once; nothing after it runs
