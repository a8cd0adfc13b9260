"""Reports: key averages (keyavg), RPC statistics (rpcstats), collective statistics
(collectives), the report model (model) and its renderers (render)."""
