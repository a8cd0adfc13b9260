"""Errors that end a command with a one-line message and a documented exit code."""

import contextlib
from typing import Iterator, Optional

# Exit codes (documented in README.md). click itself exits 2 on a usage error.
EXIT_OK = 0
EXIT_INTERNAL = 1   # a bug: an unexpected exception (TRACEMERGE_DEBUG=1 shows its traceback)
EXIT_USAGE = 2
EXIT_INPUT = 3      # an input file is missing, unreadable or malformed
EXIT_CONFLICT = 4   # inputs disagree: duplicate or unknown ranks, files of different jobs
EXIT_OUTPUT = 5     # the output cannot be written: exists without --force, equals an input, disk full, pipe closed
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
EXIT_TERMINATED = 143   # SIGTERM (128 + 15): cleaned up as for Ctrl-C


class TracemergeError(Exception):
    """Base of every error the CLI turns into a message and an exit code."""

    exit_code: int = EXIT_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class TraceError(TracemergeError):
    """A problem with one input file, optionally at one event."""

    def __init__(self, path: object, problem: str, index: Optional[int] = None) -> None:
        where = f"{path}: event {index}: " if index is not None else f"{path}: "
        super().__init__(where + problem)
        self.path = str(path)
        self.problem = problem
        self.index = index

    def __reduce__(self) -> tuple:
        # rebuilt from its parts when it crosses from a worker process to the parent
        return type(self), (self.path, self.problem, self.index)


class UsageError(TracemergeError):
    """An option's value does not fit the inputs (a rank no file has, ...)."""

    exit_code = EXIT_USAGE


class RankConflict(TracemergeError):
    exit_code = EXIT_CONFLICT


class OutputError(TracemergeError):
    exit_code = EXIT_OUTPUT


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like KeyboardInterrupt (not caught by ``except Exception``)."""


@contextlib.contextmanager
def reading(path: object) -> Iterator[None]:
    """Failures of Python itself on an input's content, as errors naming the file: JSON
    nested deeper than the interpreter's recursion limit (valid JSON, but no reader here
    follows ~1000 levels), text no UTF-8 holds found after the reader's own checks, memory
    running out while the file is read (under a memory limit)."""
    try:
        yield
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply (an event's args or a key nested ~1000 levels; "
                               "the readers follow fewer)") from None
    except UnicodeError as e:
        raise TraceError(path, f"text that is not UTF-8 ({getattr(e, 'reason', e)})") from None
    except MemoryError:
        raise TraceError(path, "out of memory reading it (a process holds ~5x a rank's JSON size: "
                               "see docs/performance.md; fewer --jobs may help)") from None
