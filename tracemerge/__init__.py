"""tracemerge: one aligned timeline from the per-rank profiler traces of a distributed PyTorch job."""

__version__ = "0.1.0"
