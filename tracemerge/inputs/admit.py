"""The front door: which paths are read as inputs, before any reader opens them.

- A quoted glob (``'rank*.json.gz'``) is expanded here, as ``diff`` expands it, for every
  command; a path that exists is taken as it is, even with ``*`` in its name.
- Only regular files are read. A pipe given on the command line (process substitution,
  ``info <(zcat rank0.json.gz)``; a FIFO) is first read whole into a temporary regular file
  (:func:`spool`), since the readers read a file more than once (its head, then its events,
  in a worker); a pipe with no writer ends after ``TRACEMERGE_PIPE_WAIT`` seconds (default
  10). Devices (``/dev/zero``, ``/dev/urandom``), sockets and a FIFO given to the API are
  refused (:func:`problem`): an endless or blocking read is never started.
- A merged trace (written by ``combine``) is no rank file: where rank files are needed
  (``combine``, ``export``, ``offsets``, ``whatif``, ``report`` with other files) it is
  refused, naming the rank files it was made from (:func:`merged_problem`).
"""

import glob
import io
import math
import os
import select
import stat
import time
from typing import Any, Iterable, List, Optional, Tuple

from tracemerge.errors import TraceError, UsageError
from tracemerge.files.codecs import MAX_INFLATE_ENV, decompressor, parse_size
from tracemerge.files.output import special_kind
from tracemerge.inputs.head import read_head

PIPE_WAIT_ENV = "TRACEMERGE_PIPE_WAIT"
PIPE_WAIT_S = 10.0
PIPE_WAIT_MAX_S = 86400.0
# a pipe is copied to disk up to this much unless --max-inflate / TRACEMERGE_MAX_INFLATE says
# otherwise (0: no bound): an endless writer (`<(cat /dev/zero)`) ends here, not on a full disk
PIPE_LIMIT = 8 << 30
_CHUNK = 1 << 20

# the keys `tracemerge combine` writes before a merged trace's events (its summary comes last)
MERGED_HEAD = {"schemaVersion", "displayTimeUnit", "baseTimeNanoseconds"}


def is_merged_block(block: Optional[dict]) -> bool:
    """A trace's ``"tracemerge"`` block is a merged trace's summary: it maps output pids to ranks."""
    return isinstance(block, dict) and isinstance(block.get("pids"), dict) and "inputs" in block


def expand(args: Iterable[str]) -> List[str]:
    """``args`` with each quoted glob replaced by the files it matches, sorted as a shell
    sorts them; a path that exists is kept as it is. Raises ValueError for a glob that
    matches nothing."""
    out: List[str] = []
    for arg in args:
        if os.path.lexists(arg) or not glob.has_magic(arg):
            out.append(arg)
            continue
        matched = sorted(p for p in glob.glob(arg) if not os.path.isdir(p))
        if not matched:
            raise ValueError(f"{arg}: the pattern matches no file")
        out += matched
    return out


def is_pipe(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def problem(path: str) -> Optional[str]:
    """Why ``path`` is not read at all (a device, a socket, a FIFO), else None: the readers'
    own errors say what else is wrong (missing, unreadable, malformed)."""
    kind = special_kind(path)
    if kind is None:
        return None
    if kind.startswith("a FIFO"):
        return (f"is {kind}: tracemerge reads a pipe only when it is given on the command line (e.g. "
                "<(zcat rank0.json.gz)); save it to a file")
    return f"is {kind}, not a trace file: tracemerge reads regular files (and pipes given on the command line)"


def merged_problem(path: str) -> Optional[str]:
    """Why the merged trace ``path`` cannot stand for a rank, naming the files it was made
    from; None for any other file (told from its head, then confirmed by its summary)."""
    try:
        # the first KBs first: a rank file's head can be most of a small file, and every
        # input would be read twice where one read is the rule (docs/performance.md)
        if not _first_kb(path).lstrip().startswith(b'{"schemaVersion"'):
            return None
        head = read_head(path)
    except TraceError:
        return None  # the reader says what is wrong with it
    if head is None or set(head) != MERGED_HEAD:
        return None
    from tracemerge.inputs import read_trace  # a full read, only of a file that starts as a merged trace does

    try:
        block = read_trace(path).tracemerge
    except TraceError:
        return None
    if block is None or not is_merged_block(block):
        return None
    inputs: Any = block.get("inputs") or []
    paths = [str(i.get("path")) for i in inputs if isinstance(i, dict)]
    listed = " ".join(paths[:4]) + (f" … ({len(paths)} files)" if len(paths) > 4 else "")
    return ("a merged trace written by tracemerge combine, not a rank file: it holds "
            f"{len(paths)} ranks' events already; give the rank files it was made from"
            + (f" ({listed})" if listed else "") + " (report and info read it alone)")


def _first_kb(path: str) -> bytes:
    """The first decompressed bytes of ``path`` from its first 4 KB (enough for combine's
    header, which a merged trace starts with)."""
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except OSError:
        return b""  # the reader says why it cannot be read
    inflate = decompressor(path, io.BytesIO(), data)
    return data if inflate is None else inflate.read(1 << 16)


def admit(paths: List[str], skip_bad: bool) -> Tuple[List[str], Tuple[Tuple[str, str], ...]]:
    """(the paths to read, (path, problem) of those turned away): devices, sockets, FIFOs
    (:func:`problem`) and merged traces (:func:`merged_problem`). Without ``skip_bad`` the
    first one turned away is the error (exit 3)."""
    kept, away = [], []
    for path in paths:
        why = problem(path) or merged_problem(path)
        if why is None:
            kept.append(path)
        elif not skip_bad:
            raise TraceError(path, why)
        else:
            away.append((path, why))
    return kept, tuple(away)


def pipe_wait_s() -> float:
    """``TRACEMERGE_PIPE_WAIT`` seconds (default 10), at most a day: a wait set and mistyped
    (``x``, ``-1``) is refused by name, never ignored, and one that no poll can hold
    (``inf``, ``1e300``: an internal error) too (UsageError, exit 2)."""
    given = os.environ.get(PIPE_WAIT_ENV)
    if not given:  # unset or empty, as TRACEMERGE_MAX_INFLATE
        return PIPE_WAIT_S
    try:
        wait = float(given)
    except ValueError:
        wait = math.nan
    if not 0 <= wait <= PIPE_WAIT_MAX_S:  # NaN too
        raise UsageError(f"{PIPE_WAIT_ENV}={given!r} is not a number of seconds from 0 to {PIPE_WAIT_MAX_S:g} "
                         "(a day)")
    return wait


def _pipe_limit() -> Optional[int]:
    given = os.environ.get(MAX_INFLATE_ENV)
    if given:
        try:
            return parse_size(given) or None
        except ValueError as e:  # refused by name, as the inflate bound is (codecs.inflate_limit)
            raise UsageError(f"{MAX_INFLATE_ENV}={given!r}: {e}") from None
    return PIPE_LIMIT


def spool(path: str, directory: str, wait_s: Optional[float] = None) -> str:
    """Copy the pipe ``path`` whole into a new regular file in ``directory``; its name.
    The first byte (or the writer's end) must come within ``wait_s`` seconds: a FIFO nobody
    writes to is an error, not a hang."""
    wait_s = pipe_wait_s() if wait_s is None else wait_s
    limit = _pipe_limit()
    try:
        # non-blocking: opening a FIFO with no writer would block in open() itself
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    name = os.path.join(directory, f"{len(os.listdir(directory))}-" + _safe(os.path.basename(path)))
    try:
        with open(name, "wb") as out:
            total = 0
            deadline = time.monotonic() + wait_s
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while True:
                events = poller.poll(max(0.0, deadline - time.monotonic()) * 1000 if not total else None)
                if not events:
                    raise TraceError(path, f"a pipe with no writer: nothing came in {wait_s:g} s "
                                           f"({PIPE_WAIT_ENV} sets the wait)")
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    if not total and not events[0][1] & select.POLLHUP:
                        # a FIFO no writer opened yet reads as empty: wait for one
                        time.sleep(0.05)
                        if time.monotonic() < deadline:
                            continue
                        raise TraceError(path, f"a pipe with no writer: nothing came in {wait_s:g} s "
                                               f"({PIPE_WAIT_ENV} sets the wait)")
                    break
                total += len(chunk)
                if limit is not None and total > limit:
                    raise TraceError(path, f"the pipe gave more than {limit >> 20} MiB (--max-inflate SIZE or "
                                           f"{MAX_INFLATE_ENV} raises the bound, 0 lifts it)")
                out.write(chunk)
    except BaseException:
        try:
            os.unlink(name)
        except OSError:
            pass
        raise
    finally:
        os.close(fd)
    return name


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "pipe"
