"""Markdown: the same sections as the text table, as Markdown tables."""

from tracemerge.report.cells import callee_rows, collective_rows, format_share, format_time, rpc_rows
from tracemerge.report.model import sorted_rows


def _md_table(head, body):
    esc = [[str(v).replace("|", "\\|") for v in row] for row in body]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in esc]


def render_markdown(report, sort_by, row_limit):
    rows = sorted_rows(report.key_averages, sort_by, row_limit)
    total_self = sum(r.self_cpu_time_total for r in report.key_averages)
    head = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls", "Node ID"]
    body = [[f"`{r.key}`", format_share(r.self_cpu_time_total, total_self), format_time(r.self_cpu_time_total),
             format_share(r.cpu_time_total, total_self), format_time(r.cpu_time_total), format_time(r.cpu_time),
             r.count, r.node_id] for r in rows]
    lines = ["## Key averages", ""] + _md_table(head, body) + ["", f"Self CPU time total: {format_time(total_self)}"]
    if report.rpc is not None:
        lines += ["", "## RPC latency", ""] + _md_table(*rpc_rows(report.rpc))
        lines += ["", "## RPC callees", ""] + _md_table(*callee_rows(report.rpc))
    if report.collectives:
        lines += ["", "## Collectives", ""] + _md_table(*collective_rows(report.collectives))
    if report.notes:
        lines += [""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
