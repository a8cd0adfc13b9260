"""Reports: key averages (keyavg), RPC statistics (rpcstats), collective statistics
(collectives), the report model (model) and its renderers (render)."""

# --sort-by's and --group-by's choices, here so that the help reads them without importing
# the report's modules (numpy, the analyses); report.build checks them
SORT_KEYS = ("cpu_time_total", "self_cpu_time_total", "cpu_time", "count", "key", "node_id",
             "device_time_total", "self_device_time_total", "device_time",
             # torch's sort_by takes "cuda" for "device" (_build_table)
             "cuda_time_total", "self_cuda_time_total", "cuda_time")
GROUP_BY = ("name", "name,rank")
