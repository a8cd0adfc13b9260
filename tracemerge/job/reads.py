"""How :meth:`tracemerge.job.Job.open` reads its files: the read strategies, one small
function each, that a command picks (``Job.open(..., read=reads.heads)``).

Every strategy takes ``(files, engine, skip_bad)`` and returns a :class:`Read`: for each
file, in order, its :class:`RankInfo` and the problem that left it out (``skip_bad``), and
the events it keeps for the work that follows. The strategies:

- :func:`events` (the default; ``combine``, ``whatif``): each file read whole and
  described; its events kept in memory while the inputs are small and no engine runs,
  else held by the local engine's worker that read them where half of the free memory
  holds them all, else dropped (each rank read again by the worker that needs it);
- :func:`columns` (``report``, ``diff``, ``export``, ``tables.load``): the same, with
  the events kept as columns and args only, without the typed reader's per-event structs
  (a merge's JSON writer needs those; the reports never do);
- :func:`descriptions` (``info``, ``align``): each file described by a scan in parallel,
  nothing kept;
- :func:`heads` (``offsets``, which needs only the clocks): a rank file described from its
  head alone (``RankInfo.partial``, its events unread), any other file scanned; with
  ``skip_bad``, which must find every bad event, every file is scanned.
"""

import functools
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, TypeVar, Union

from tracemerge import native
from tracemerge.errors import TraceError, reading
from tracemerge.files.codecs import GZIP_MAGIC, ZSTD_MAGIC
from tracemerge.inputs.rankinfo import RankInfo, describe
from tracemerge.job.describe_files import scan, scan_head
from tracemerge.model import RankTrace
from tracemerge.native import read_file
from tracemerge.runtime.engine import Engine, Held, LocalEngine, available_memory, gc_paused

T = TypeVar("T")
Found = Tuple[Optional[RankInfo], Optional[str]]  # (its description, None) or (None, why it was left out)
KEEP_IN_MEMORY_BYTES = 64 << 20  # JSON size (compressed inputs counted inflated) below which events stay loaded
# what a gzip or zstd trace inflates to, about (trace JSON compresses 8-15x): 64 MiB of
# gzipped ranks kept in memory were a GB decoded (report at 256 x 2 MB ranks)
INFLATION = 12
# what a rank's events held by a worker cost, per byte of its JSON: the compiled core's map of
# the file and its per-event records; the Python reader's decoded structs
HELD_PER_BYTE = {"native": 3, "python": 8}


@dataclass(frozen=True)
class Read:
    """What a strategy found: ``found[i]`` for ``files[i]``; ``kept``: {path: events} in
    memory, or held by the engine's worker that read them."""

    found: List[Found]
    kept: Dict[str, Union[RankTrace, Held]] = field(default_factory=dict)


ReadStrategy = Callable[[List[str], Optional[Engine], bool], Read]


def events(files: List[str], engine: Optional[Engine], skip_bad: bool) -> Read:
    """Each file read and described, its events (with the typed reader's structs) kept
    where memory allows: see the module's doc."""
    return _keeping(files, engine, skip_bad, columns_only=False)


def columns(files: List[str], engine: Optional[Engine], skip_bad: bool) -> Read:
    """:func:`events`, the events kept as columns and args only."""
    return _keeping(files, engine, skip_bad, columns_only=True)


def descriptions(files: List[str], engine: Optional[Engine], skip_bad: bool) -> Read:
    """Each file described by a scan, on the engine's workers; no events kept."""
    runner = engine or LocalEngine(1)
    return Read(runner.map(_attempt, [scan] * len(files), files, [skip_bad] * len(files)))


def heads(files: List[str], engine: Optional[Engine], skip_bad: bool) -> Read:
    """Rank files described from their heads, the other files scanned; no events kept."""
    if skip_bad:  # a head says nothing of the events, where a bad one must be found
        return descriptions(files, engine, skip_bad)
    found = (engine or LocalEngine(1)).map_light(scan_head, files)
    rest = iter(descriptions([p for p, info in zip(files, found) if info is None], engine, skip_bad).found)
    return Read([(info, None) if info is not None else next(rest) for info in found])


def _keeping(files: List[str], engine: Optional[Engine], skip_bad: bool, columns_only: bool) -> Read:
    if engine is None and sum(_size(p) for p in files) <= KEEP_IN_MEMORY_BYTES:
        return _in_memory(files, skip_bad, columns_only)
    if isinstance(engine, LocalEngine) and _can_hold(engine, files):
        return _held(files, engine, skip_bad, columns_only)
    return descriptions(files, engine, skip_bad)  # each rank read again by the worker that needs it


def _in_memory(files: List[str], skip_bad: bool, columns_only: bool) -> Read:
    """Read and described here, one file after the other; every rank's events kept."""
    read = Read([])
    for path in files:
        trace, problem = _attempt(functools.partial(read_file, columns_only=columns_only), path, skip_bad)
        read.found.append((None if trace is None else describe(trace), problem))
        if trace is not None:
            read.kept[path] = trace
    return read


def _held(files: List[str], engine: LocalEngine, skip_bad: bool, columns_only: bool) -> Read:
    """One read per file: each is read and described by a worker that keeps its events for
    the write (or the reports) that follows, on the same engine."""
    held = engine.hold(functools.partial(_read_kept, skip_bad=skip_bad, columns_only=columns_only), files, files)
    return Read([r for r, _ in held], {path: h for path, ((info, _), h) in zip(files, held) if info is not None})


def _attempt(read: Callable[[str], T], path: str, skip_bad: bool) -> Tuple[Optional[T], Optional[str]]:
    """(read(path), None); with ``skip_bad``, (None, problem) when the file is bad."""
    try:
        return read(path), None
    except TraceError as e:
        if not skip_bad:
            raise
        return None, e.problem if e.index is None else f"event {e.index}: {e.problem}"


def _can_hold(engine: LocalEngine, files: List[str]) -> bool:
    """Whether the local engine's workers can keep every file's events from the read that
    describes it to the write: half of the memory free now must hold them (Dask's workers
    are other machines', and the local workers' writes reopen the output through /proc)."""
    if not os.path.isdir(f"/proc/{os.getpid()}/fd"):
        return False
    need = sum(_size(p) for p in files) * HELD_PER_BYTE["native" if native.active() == "native" else "python"]
    return need <= available_memory() // 2


def _read_kept(path: str, skip_bad: bool, columns_only: bool) -> Tuple[Optional[RankTrace], Found]:
    """(the events of ``path``, to keep; (its RankInfo, problem)) — :func:`scan` that keeps what it read."""
    trace, problem = _attempt(functools.partial(_read_described, columns_only=columns_only), path, skip_bad)
    return (None, (None, problem)) if trace is None else (trace[0], (trace[1], None))


def _read_described(path: str, columns_only: bool) -> Tuple[RankTrace, RankInfo]:
    with gc_paused(), reading(path):
        trace = read_file(path, columns_only)
        return trace, describe(trace)


def _size(path: str) -> int:
    """About how many bytes of JSON ``path`` holds: its size, times INFLATION when it is
    compressed (told by its magic bytes, as the readers tell it)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
        size = os.path.getsize(path)
    except OSError:
        return 0
    return size * INFLATION if magic[:2] == GZIP_MAGIC or magic == ZSTD_MAGIC else size
