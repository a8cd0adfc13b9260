"""Progress of the per-rank work on stderr: ranks read or written, bytes, time left.

Drawn in place on one line, and only when stderr is a terminal (a log file or a pipe gets
nothing); ``--quiet`` turns it off too. Engines call it once per finished rank.
"""

import os
import sys
import time
from typing import Any, Callable, Optional, TextIO

# what a finished task of each per-rank function did to its rank
VERBS = {"encode_rank": "written"}


class Progress:
    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stderr
        self.started: dict[str, float] = {}
        self.bytes: dict[str, int] = {}
        self.shown = False

    @classmethod
    def for_terminal(cls, quiet: bool = False) -> Optional["Progress"]:
        """A Progress when stderr is a terminal and not ``quiet``, else None."""
        try:
            tty = sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        return cls() if tty and not quiet else None

    def __call__(self, fn: Callable[..., Any], done: int, total: int, call: tuple, result: Any) -> None:
        """Task ``done`` of ``total`` of ``fn`` finished; ``call`` are its arguments."""
        verb = VERBS.get(getattr(fn, "__name__", ""), "read")
        now = time.monotonic()
        start = self.started.setdefault(verb, now)
        if isinstance(result, dict) and isinstance(result.get("bytes"), int):
            size = result["bytes"]
        else:
            size = sum(_file_size(a) for a in call if isinstance(a, str))
        self.bytes[verb] = self.bytes.get(verb, 0) + size
        left = (now - start) / done * (total - done) if done else 0.0
        line = (f"tracemerge: ranks {verb} {done}/{total} · {self.bytes[verb] / 1e6:.1f} MB"
                + (f" · ETA {left:.0f} s" if done < total else ""))
        self.stream.write("\r\033[K" + line)
        self.shown = True
        if done == total:
            self.clear()
        self.stream.flush()

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
