"""Worker-side capture: per-rank profiler dumps with clock anchors, RPC and collective records.

This is the only part of tracemerge that imports torch::

    from tracemerge.capture import profile
    with profile(out_dir) as p:      # writes out_dir/rank{R}.json.gz on exit
        ...

See docs/capture.md.
"""

from tracemerge.capture.session import profile

__all__ = ["profile"]
