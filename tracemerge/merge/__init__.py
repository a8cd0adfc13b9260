"""Writing one timeline: per-rank placement on the reference clock (placement), size
controls (selection), RPC flow arrows (flows), the parallel per-rank engine (engine) and
the ``combine`` entry point (combine)."""
