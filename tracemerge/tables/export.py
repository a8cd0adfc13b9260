"""``tracemerge export``: the job's tables as a directory of Parquet files.

::

    DIR/events/rank=N/part-0.parquet   a rank's events (part-1: callee spans drawn from its callers' records)
    DIR/<table>.parquet                rpcs, collectives, clocks, key_averages, rpc_latency, ...
    DIR/tracemerge.json                the summary: inputs, alignment, rows per rank, RPC sides

Each rank's events are written by the worker that reads it, so memory stays that of one
rank and the files are as many as the ranks (hive partitioning: DuckDB, pyarrow, Dask and
Spark read ``rank`` from the path). The directory appears whole or not at all: it is
written as a temporary sibling and renamed at the end; an existing one is replaced only
with ``force``, and only when export wrote it (:func:`written_by_export`) and it holds no
input. The temporary sibling's name carries the run's pid and boot, so the next export
beside it removes what a killed run (SIGKILL, the OOM killer) left (:func:`remove_stale`).
"""

import os
import re
import shutil
import tempfile
from typing import Any, Dict, Iterable, Optional, Sequence, Union

import orjson

import tracemerge
from tracemerge.errors import OutputError
from tracemerge.files import names
from tracemerge.files.output import check_name_length
from tracemerge.inputs.rankinfo import rank_of
from tracemerge.job import Alignment, Job
from tracemerge.job.checks import rpc_sides
from tracemerge.place.selection import Selection, describe
from tracemerge.tables.events import require_arrow
from tracemerge.tables.parts import build

# the summary export writes last; with the rest of what it writes, what marks a directory as its own
SUMMARY = "tracemerge.json"
_PART = re.compile(r"part-\d+\.parquet")
_RANK_DIR = re.compile(r"rank=-?\d+")


def written_by_export(directory: str) -> bool:
    """Whether ``directory`` is one export wrote: its ``tracemerge.json`` is an export summary
    and it holds nothing else than export writes (``*.parquet``, ``events/rank=N/part-K.parquet``)
    — or it is empty. Only such a directory is replaced by ``--force``: a user's directory
    (a project holding the traces, notes) never is."""
    try:
        entries = os.listdir(directory)
        if not entries:
            return True
        if SUMMARY not in entries or os.path.islink(os.path.join(directory, SUMMARY)):
            return False
        with open(os.path.join(directory, SUMMARY), "rb") as f:
            summary = orjson.loads(f.read(1 << 24))
        if not isinstance(summary, dict) or not {"version", "rows_by_rank", "inputs"} <= summary.keys():
            return False
        for name in entries:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                return False
            if name == "events" and os.path.isdir(path):
                for rank_dir in os.listdir(path):
                    inner = os.path.join(path, rank_dir)
                    if not _RANK_DIR.fullmatch(rank_dir) or os.path.islink(inner) or not os.path.isdir(inner):
                        return False
                    if not all(_PART.fullmatch(p) and os.path.isfile(os.path.join(inner, p))
                               and not os.path.islink(os.path.join(inner, p)) for p in os.listdir(inner)):
                        return False
            elif not (name == SUMMARY or (name.endswith(".parquet") and os.path.isfile(path))):
                return False
    except (OSError, ValueError):
        return False
    return True


def check_directory(output: str, force: bool, inputs: Iterable[str] = ()) -> None:
    """Refuse an output that exists without ``force``, or whose parent is missing or read-only:
    before any input is read. With ``force``, refuse one that is not a directory export wrote
    (:func:`written_by_export`), or that holds one of ``inputs``."""
    if os.path.lexists(output) and not force:
        raise OutputError(f"{output}: exists (use --force to replace it)")
    if os.path.islink(output):
        raise OutputError(f"{output}: is a symbolic link: --force replaces only a directory tracemerge export wrote")
    if os.path.exists(output) and not os.path.isdir(output):
        raise OutputError(f"{output}: exists and is not a directory")
    if os.path.isdir(output):
        top = os.path.realpath(output)
        for path in inputs:
            real = os.path.realpath(path)
            if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
                raise OutputError(f"{output}: holds the input {path}; --force would delete it: choose another -o")
        if not written_by_export(output):
            raise OutputError(f"{output}: exists and was not written by tracemerge export (no export summary "
                              f"{SUMMARY}, or files export does not write): --force replaces only such a "
                              "directory; choose another -o or remove it yourself")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise OutputError(f"{parent}: no such directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{parent}: cannot write there")
    # the temporary directory beside it, and the old one moved aside (_publish), are longer names
    check_name_length(output, len(_temporary_prefix("", 1 << 22, "0" * 12)) + len("XXXXXXXX.old"))


def export(job: Job, output: Union[str, "os.PathLike[str]"], alignment: Optional[Alignment] = None,
           selection: Optional[Selection] = None, force: bool = False, group_by: str = "name",
           critical_path: bool = False, gpu: bool = False, comm_kernels: Sequence[str] = ()) -> Dict[str, Any]:
    """Write the tables of ``job`` to the directory ``output``; returns its summary. ``comm_kernels``:
    regexes of further communication kernels for the gpu table (``--comm-kernel``)."""
    output = os.fspath(output)
    require_arrow()
    import pyarrow.parquet as pq

    check_directory(output, force, job.inputs)
    parent = os.path.dirname(os.path.abspath(output))
    name = os.path.basename(os.path.abspath(output))
    remove_stale(parent, name)
    try:
        tmp = tempfile.mkdtemp(prefix=_temporary_prefix(name, os.getpid(), _boot_id()), dir=parent)
        # mkdtemp's 0700 would stay on the published directory: give it a new directory's mode
        os.chmod(tmp, 0o777 & ~_umask())
    except OSError as e:
        raise OutputError(f"{output}: cannot write beside it: {e.strerror or e}") from None
    try:
        built = build(job, alignment, selection, os.path.join(tmp, "events"), group_by, critical_path=critical_path,
                      gpu=gpu, comm_kernels=comm_kernels)
        for name, table in built.tables.items():
            pq.write_table(table, os.path.join(tmp, f"{name}.parquet"))
        summary = _summary(job, built.alignment, built.parts, selection or Selection())
        with open(os.path.join(tmp, "tracemerge.json"), "wb") as f:
            f.write(names.dumps(summary, option=orjson.OPT_INDENT_2))
        _publish(tmp, output, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def _publish(tmp: str, output: str, force: bool) -> None:
    """Rename the finished ``tmp`` to ``output``; an old ``output`` (with ``force``) is
    moved aside first and removed after, so ``output`` is never half written."""
    old = None
    if os.path.lexists(output):
        if not force:  # another run made it while this one worked
            raise OutputError(f"{output}: exists (use --force to replace it)")
        if os.path.islink(output) or not os.path.isdir(output) or not written_by_export(output):
            raise OutputError(f"{output}: changed while this run worked and is no longer a directory tracemerge "
                              "export wrote; not replaced")
        old = tmp + ".old"
        os.rename(output, old)
    try:
        os.rename(tmp, output)
    except OSError as e:
        if old is not None:
            os.rename(old, output)
        raise OutputError(f"{output}: cannot write: {e.strerror or e}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if os.path.isdir(old) else os.unlink(old)


def _temporary_prefix(name: str, pid: int, boot: str) -> str:
    return f".{name}.tracemerge-{pid}-{boot}-"


def _boot_id() -> str:
    """This boot's id (a short hex prefix), so that a pid is only ever compared with pids of
    the same boot of the same machine; "" where the kernel says none."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip().replace("-", "")[:12]
    except OSError:
        return ""


def remove_stale(parent: str, name: str) -> list:
    """Remove the temporary directories (and moved-aside ``.old`` ones) that export runs
    killed outright left beside ``parent/name``; returns their paths. A directory is removed
    only when its name proves it was such a run's: export's prefix for this output with the
    pid and boot id of a run of this boot whose pid is no longer alive. Directories of a live
    run, of another boot or machine (a shared filesystem), or named otherwise are left."""
    boot = _boot_id()
    if not boot:
        return []
    pattern = re.compile(re.escape(f".{name}.tracemerge-") + r"(\d+)-" + re.escape(boot) + r"-[^/]+")
    removed = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    for entry in entries:
        m = pattern.fullmatch(entry)
        if m is None or _alive(int(m.group(1))):
            continue
        path = os.path.join(parent, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's live process
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _summary(job: Job, alignment: Alignment, parts: list, selection: Selection) -> Dict[str, Any]:
    rows: Dict[str, int] = {}
    events = {"in": 0, "rows": 0, "filtered": 0}
    for p in parts:
        rows[str(p.rank)] = rows.get(str(p.rank), 0) + p.rows
        events["rows"] += p.rows
        if p.part == 0:
            events["in"] += p.counts.get("in", 0)
            events["filtered"] += p.counts.get("filtered", 0)
    for info in job.infos:  # ranks left out by --ranks are read by no worker: counted as combine counts them
        if not selection.keeps_rank(rank_of(info)):
            events["in"] += info.events
            events["filtered"] += info.events
    return {
        "version": tracemerge.__version__,
        "inputs": [{"path": i.path, "rank": i.rank, "worker_name": i.worker_name, "hostname": i.hostname,
                    "events": i.events} for i in job.infos],
        "skipped": [{"path": path, "problem": problem} for path, problem in job.skipped],
        "warnings": list(job.warnings),
        "reference": alignment.reference,
        "align": alignment.method,
        "alignment": [alignment.clocks[r].as_dict() for r in job.ranks],
        "causality": alignment.causality,
        "rpc_sides": rpc_sides(job.links.rpcs),
        "selection": describe(selection),
        "events": events,
        "rows_by_rank": rows,
        "cores": sorted({p.core for p in parts}),
    }
