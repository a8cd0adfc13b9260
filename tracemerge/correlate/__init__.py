"""Correlate: the records of all ranks joined into what ties ranks together — RPC calls
with both sides (by ``rpc_id``) and collectives grouped by (group, seq) — made once per
job (:class:`~tracemerge.correlate.match.Correlation`) and then only read by the clock
model, the checks, the writers and the reports."""
