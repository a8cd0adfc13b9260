"""tracemerge: one aligned timeline from the per-rank profiler traces of a distributed PyTorch job.

The library API the CLI is built on::

    from tracemerge import AlignRequest, Job, combine
    job = Job.open(["rank0.json.gz", "rank1.json.gz"], align=AlignRequest("auto"))  # read, describe, join, align
    summary = combine(job, job.alignment, "trace.pftrace")                         # write; returns the summary
    align(job, "aligned/")                 # or each rank in its own file on the reference clock (docs/interop.md)

``tracemerge.load(paths)`` returns the aligned job as tables (pandas, Arrow; docs/tables.md).

(``Session`` is ``Job`` under its first name; ``job.align("auto")`` solves another
clock model of the same job.)

Capture (inside each worker, needs torch) lives in :mod:`tracemerge.capture`, the only
module that imports torch.
"""

from typing import Any

__version__ = "0.1.0"

# Exports load on first use (PEP 562), so ``import tracemerge.capture`` inside a training
# worker does not pull in the reader, the clock solver and the writers.
_EXPORTS = {
    "AlignRequest": "tracemerge.job",
    "Alignment": "tracemerge.job",
    "ClockModel": "tracemerge.clocks.clock",
    "Session": "tracemerge.job",
    "Job": "tracemerge.job",
    "combine": "tracemerge.commands.compose",
    "align": "tracemerge.merge.per_rank",
    "read_trace": "tracemerge.inputs",
    "load": "tracemerge.tables",
}

__all__ = ["AlignRequest", "Alignment", "ClockModel", "Job", "Session", "align", "combine", "load", "read_trace",
           "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tracemerge' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
