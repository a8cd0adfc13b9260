"""Writing one timeline: per-rank placement on the reference clock (placement), size
controls (selection), RPC flow arrows (flows), the parallel per-rank engine (engine) and
the ``combine`` entry point (combine)."""

# here, not in per_rank.py, so that the CLI's help reads it without numpy (start-up)
ALIGN_NAME = "rank{rank}.pt.trace.json.gz"   # align's output names: HTA, TraceLens and tb-profiler find the rank
