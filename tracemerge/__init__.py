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

from tracemerge.clock import ClockModel  # noqa: E402
from tracemerge.combine import combine  # noqa: E402
from tracemerge.read import read_trace  # noqa: E402
from tracemerge.session import Alignment, Session  # noqa: E402

__all__ = ["Alignment", "ClockModel", "Session", "combine", "read_trace", "__version__"]
