"""The text table: torch's ``key_averages().table()`` with a Node ID column, then the RPC
and collective sections."""

from tracemerge.report.cells import callee_rows, collective_rows, format_share, format_time, rpc_rows
from tracemerge.report.model import sorted_rows


def _fixed_table(headers, rows, first_width):
    widths = [first_width] + [max(12, len(h)) for h in headers[1:]]
    fmt = "".join("{:>" + str(w) + "}  " for w in widths)
    sep = "".join("-" * w + "  " for w in widths)
    lines = [sep, fmt.format(*headers), sep]
    lines += [fmt.format(*(str(v) for v in row)) for row in rows]
    lines.append(sep)
    return lines


def key_table(rows, all_rows, width=55):
    total_self = sum(r.self_cpu_time_total for r in all_rows)
    name_w = min(max([len(r.key) for r in rows] + [4]) + 4, width)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls", "Node ID"]
    body = []
    for r in rows:
        name = r.key if len(r.key) < width - 3 else r.key[:width - 3] + "..."
        body.append([name, format_share(r.self_cpu_time_total, total_self), format_time(r.self_cpu_time_total),
                     format_share(r.cpu_time_total, total_self), format_time(r.cpu_time_total),
                     format_time(r.cpu_time), r.count, r.node_id])
    lines = _fixed_table(headers, body, name_w)
    lines.append(f"Self CPU time total: {format_time(total_self)}")
    return lines


def render_table(report, sort_by, row_limit):
    lines = key_table(sorted_rows(report.key_averages, sort_by, row_limit), report.key_averages)
    sections = []
    if report.rpc is not None:
        sections += [("RPC latency", rpc_rows(report.rpc)), ("RPC callees", callee_rows(report.rpc))]
    if report.collectives:
        sections.append(("Collectives", collective_rows(report.collectives)))
    for title, (head, body) in sections:
        first = max([len(str(r[0])) for r in body] + [len(head[0])]) + 2
        lines += ["", title] + _fixed_table(head, body, first)
    lines += [f"hint: {n}" if "thread-limited" in n else f"note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
