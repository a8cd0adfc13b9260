"""The cells of the report tables, shared by every renderer: torch's table() time and
share formatting (torch/autograd/profiler_util.py) and the rows of the RPC and collective
sections."""

from typing import Any, Callable, Dict, List, Sequence, Tuple

from tracemerge.report.collectives import CollectiveStats
from tracemerge.report.keyavg import KeyAverage, device_label, has_device_time, self_device_total
from tracemerge.report.rpcstats import RpcReport

# (head, body): a table's column names and rows of cells
Table = Tuple[List[str], List[List[Any]]]


def format_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def format_share(us: float, total: float) -> str:
    return "NaN" if total == 0 else f"{us * 100.0 / total:.2f}%"


def _ms(d: Dict[Any, float], k: Any) -> str:
    return f"{d[k] / 1000:.3f}" if k in d else "-"


def rpc_rows(rpc: RpcReport) -> Table:
    head = ["RPC", "Calls", "E2E mean ms", "p50", "p95", "p99", "max", "Exec mean ms", "Overhead mean ms",
            "Queue mean ms", "Queue p95"]
    body = [[k.name, k.count if k.complete == k.count else f"{k.complete}/{k.count}", _ms(k.e2e_us, "mean"),
             _ms(k.e2e_us, "p50"), _ms(k.e2e_us, "p95"), _ms(k.e2e_us, "p99"), _ms(k.e2e_us, "max"),
             _ms(k.exec_us, "mean"), _ms(k.overhead_us, "mean"), _ms(k.queue_us, "mean"), _ms(k.queue_us, "p95")]
            for k in rpc.keys]
    return head, body


def callee_rows(rpc: RpcReport) -> Table:
    head = ["Callee", "Calls", "Server threads", "Max concurrent", "All busy %", "Queue mean ms", "Exec mean ms"]
    body = [[f"{c.name} (rank {c.callee})", c.calls, c.threads, c.max_concurrent, f"{c.all_busy_share:.0%}",
             f"{c.queue_mean_us / 1000:.3f}", f"{c.exec_mean_us / 1000:.3f}"] for c in rpc.callees]
    return head, body


def collective_rows(colls: Sequence[CollectiveStats]) -> Table:
    head = ["Group", "Op", "Count", "Bytes", "Skew mean ms", "Skew max ms", "Slowest rank", "Mean wait per rank ms"]
    body = [[c.group, c.op, c.count, c.bytes, _ms(c.skew_us, "mean"), _ms(c.skew_us, "max"),
             c.slowest_rank if c.slowest_rank >= 0 else "-",
             _waits(c.wait_us)] for c in colls]
    return head, body


# ranks whose waits a collectives row lists; a larger group lists its longest waits and the rest's mean
LISTED_WAITS = 16


def _waits(wait_us: Dict[int, float]) -> str:
    """``rank:ms`` of each rank's mean wait, in rank order; in a group of more than
    LISTED_WAITS ranks, the LISTED_WAITS longest (longest first) and the others' mean (a
    cell of a thousand ranks is no table; the JSON report keeps them all)."""
    shown = list(wait_us.items())
    rest: List[float] = []
    if len(shown) > LISTED_WAITS:
        shown.sort(key=lambda rw: (-rw[1], rw[0]))
        shown, rest = shown[:LISTED_WAITS], [w for _, w in shown[LISTED_WAITS:]]
    cell = " ".join(f"{r}:{w / 1000:.3f}" for r, w in shown) or "-"
    return cell + (f" (the other {len(rest)} ranks: mean {sum(rest) / len(rest) / 1000:.3f})" if rest else "")


KEY_HEAD = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls", "Node ID"]


def key_rows(rows: List[KeyAverage], all_rows: List[KeyAverage],
             name: Callable[[str], str] = lambda key: key) -> Tuple[List[str], List[list], float]:
    """(head, body, self CPU time total) of the key-averages table, as torch's table() has
    it: shares of the self time of ``all_rows``, the shown ``rows`` only; ``name`` dresses
    each key for its format (cut, quoted). When some row has device time, torch's device
    columns follow ``CPU time avg`` (``Self CUDA``, ``Self CUDA %``, ``CUDA total``,
    ``CUDA time avg``; the device's own name for MTIA, XPU, ...), their shares of the
    footer's ``Self CUDA time total``."""
    total_self = sum(r.self_cpu_time_total for r in all_rows)
    device = has_device_time(all_rows)
    total_device = self_device_total(all_rows)
    head = list(KEY_HEAD)
    if device:
        d = device_label(all_rows)
        head[6:6] = [f"Self {d}", f"Self {d} %", f"{d} total", f"{d} time avg"]
    body = []
    for r in rows:
        cells = [name(r.key), format_share(r.self_cpu_time_total, total_self), format_time(r.self_cpu_time_total),
                 # torch's table gives an asynchronous row (an rpc_async in flight) no CPU total share: 0
                 0 if r.is_async else format_share(r.cpu_time_total, total_self), format_time(r.cpu_time_total),
                 format_time(r.cpu_time)]
        if device:
            cells += [format_time(r.self_device_time_total), format_share(r.self_device_time_total, total_device),
                      format_time(r.device_time_total), format_time(r.device_time)]
        body.append(cells + [r.count, r.node_id])
    return head, body, total_self


def key_footer(all_rows: List[KeyAverage]) -> List[str]:
    """torch's lines under the table: ``Self CPU time total``, and ``Self CUDA time total``
    (the summed duration of the device events, user annotations' GPU copies left out) when
    the table has device columns."""
    lines = [f"Self CPU time total: {format_time(sum(r.self_cpu_time_total for r in all_rows))}"]
    if has_device_time(all_rows):
        lines.append(f"Self {device_label(all_rows)} time total: {format_time(self_device_total(all_rows))}")
    return lines
