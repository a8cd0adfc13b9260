"""Placing one rank in the merged trace, per rank and without other ranks' events: its pid
block, label and clock (placement), rank-namespaced ids (ids), the size controls
(selection), the RPC flow arrows' plan (arrows) and the callee spans drawn from callers'
records (remote_spans). The formats encode what these make; ``merge`` drives them."""

# here, not in selection.py, so that the CLI's --overview reads it without numpy (start-up)
OVERVIEW_US = 1000.0   # --overview without a value: complete events of 1 ms and more
# align's output names (merge/per_rank.py: each rank placed on the reference clock in a file of
# its own), here for the CLI's help likewise: HTA, TraceLens and tb-profiler find the rank in them
ALIGN_NAME = "rank{rank}.pt.trace.json.gz"
