"""The built-in sections' rows of ``tracemerge diff`` (:mod:`tracemerge.report.diff`): each a
function of one :class:`~tracemerge.report.build.Report` giving ``{key: {metric: value}}``,
named by its section's ``diff`` (:mod:`tracemerge.report.sections`)."""

from typing import TYPE_CHECKING, Dict

if TYPE_CHECKING:
    from tracemerge.report.build import Report

RPC_KINDS = ("rpc_async#", "rpc_sync#", "remote#")
# the metrics that are times (µs): a row's impact is its |delta|; a count's is 0
TIME_METRICS = frozenset(("end-to-end", "execution", "queueing", "transfer", "cpu_time_total", "self_cpu_time_total"))

# {key: {metric: value}} of one section of a report
Metrics = Dict[str, Dict[str, float]]


def rpc_metrics(report: "Report") -> Metrics:
    out: Metrics = {}
    if report.rpc is None:
        return out
    for k in report.rpc.keys:
        n = k.complete
        m = {"calls": float(k.count)}
        if n and k.e2e_us:
            queue = k.queue_us.get("mean", 0.0) * n
            m.update({"end-to-end": k.e2e_us["mean"] * n, "execution": k.exec_us["mean"] * n, "queueing": queue,
                      "transfer": k.overhead_us["mean"] * n - queue})
        out[k.name] = m
    return out


def callee_metrics(report: "Report") -> Metrics:
    if report.rpc is None:
        return {}
    return {f"{c.name} (rank {c.callee})": {"queueing": c.queue_mean_us * c.calls, "execution": c.exec_mean_us * c.calls}
            for c in report.rpc.callees}


def _is_rpc_span(key: object) -> bool:
    return isinstance(key, str) and key.startswith(RPC_KINDS)


def key_metrics(report: "Report") -> Metrics:
    out: Metrics = {}
    for r in report.key_averages:
        if _is_rpc_span(r.key) or r.device_type != "CPU":
            continue  # device rows (a GPU trace's kernels) have no CPU time; their counts would join the op's
        key = r.key if not r.is_user_annotation else f"{r.key} (user annotation)"
        m = out.setdefault(key, {"cpu_time_total": 0.0, "self_cpu_time_total": 0.0, "count": 0.0})
        m["cpu_time_total"] += r.cpu_time_total
        m["self_cpu_time_total"] += r.self_cpu_time_total
        m["count"] += r.count
    return out
