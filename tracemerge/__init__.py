"""tracemerge: one aligned timeline from the per-rank profiler traces of a distributed PyTorch job.

The library API the CLI is built on::

    from tracemerge import Session, combine
    session = Session.open(["rank0.json.gz", "rank1.json.gz"])   # read, rank, describe
    alignment = session.align("auto")                             # clock model per rank
    summary = combine(session, alignment, "trace.pftrace")       # write; returns the summary

Capture (inside each worker, needs torch) lives in :mod:`tracemerge.capture`, the only
module that imports torch.
"""

__version__ = "0.1.0"

# Exports load on first use (PEP 562), so ``import tracemerge.capture`` inside a training
# worker does not pull in the reader, the clock solver and the writers.
_EXPORTS = {
    "Alignment": "tracemerge.session",
    "ClockModel": "tracemerge.clocks.clock",
    "Session": "tracemerge.session",
    "combine": "tracemerge.merge.combine",
    "read_trace": "tracemerge.inputs.chrome",
}

__all__ = ["Alignment", "ClockModel", "Session", "combine", "read_trace", "__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tracemerge' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
