"""``tracemerge export``: the job's tables as a directory of Parquet files.

::

    DIR/events/rank=N/part-0.parquet   a rank's events (part-1: callee spans drawn from its callers' records)
    DIR/<table>.parquet                rpcs, collectives, clocks, key_averages, rpc_latency, ...
    DIR/tracemerge.json                the summary: inputs, alignment, rows per rank, RPC sides

Each rank's events are written by the worker that reads it, so memory stays that of one
rank and the files are as many as the ranks (hive partitioning: DuckDB, pyarrow, Dask and
Spark read ``rank`` from the path). The directory appears whole or not at all: it is
written as a temporary sibling and renamed at the end; an existing one is replaced only
with ``force``.
"""

import os
import shutil
import tempfile
from typing import Any, Dict, Optional, Sequence

import orjson

import tracemerge
from tracemerge.errors import OutputError
from tracemerge.inputs.rankinfo import rank_of
from tracemerge.job import Alignment, Job
from tracemerge.job.checks import rpc_sides
from tracemerge.place.selection import Selection, describe
from tracemerge.tables.events import require_arrow
from tracemerge.tables.parts import build


def check_directory(output: str, force: bool) -> None:
    """Refuse an output that exists without ``force``, or whose parent is missing or read-only:
    before any input is read."""
    if os.path.lexists(output) and not force:
        raise OutputError(f"{output}: exists (use --force to replace it)")
    if os.path.exists(output) and not os.path.isdir(output):
        raise OutputError(f"{output}: exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise OutputError(f"{parent}: no such directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{parent}: cannot write there")


def export(job: Job, output: str, alignment: Optional[Alignment] = None, selection: Optional[Selection] = None,
           force: bool = False, group_by: str = "name", critical_path: bool = False, gpu: bool = False,
           comm_kernels: Sequence[str] = ()) -> Dict[str, Any]:
    """Write the tables of ``job`` to the directory ``output``; returns its summary. ``comm_kernels``:
    regexes of further communication kernels for the gpu table (``--comm-kernel``)."""
    require_arrow()
    import pyarrow.parquet as pq

    check_directory(output, force)
    parent = os.path.dirname(os.path.abspath(output))
    try:
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(output))}.tracemerge-", dir=parent)
    except OSError as e:
        raise OutputError(f"{output}: cannot write beside it: {e.strerror or e}") from None
    try:
        built = build(job, alignment, selection, os.path.join(tmp, "events"), group_by, critical_path=critical_path,
                      gpu=gpu, comm_kernels=comm_kernels)
        for name, table in built.tables.items():
            pq.write_table(table, os.path.join(tmp, f"{name}.parquet"))
        summary = _summary(job, built.alignment, built.parts, selection or Selection())
        with open(os.path.join(tmp, "tracemerge.json"), "wb") as f:
            f.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
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
