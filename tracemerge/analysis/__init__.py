"""Post-mortem analyses across ranks over plain data: the critical path
(:mod:`~tracemerge.analysis.critical_path`), wait states (:mod:`~tracemerge.analysis.waits`),
stragglers (:mod:`~tracemerge.analysis.stragglers`) and run-to-run diffs
(:mod:`~tracemerge.report.diff`). :func:`~tracemerge.analysis.job_timeline.job_timeline` builds
what the first three read from an open session and its alignment."""
