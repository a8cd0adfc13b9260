"""``tracemerge report``: key averages, RPC breakdown, collectives, clocks; and their renderers.

:func:`build_report` reads rank files (or one merged trace written by ``combine``) into a
:class:`Report` of plain data; :func:`render` turns it into a table like torch's
``key_averages().table()`` (with a Node ID column), CSV, JSON or Markdown.
"""

import csv
import io
import os
import sys
from dataclasses import asdict, dataclass, field

import numpy as np
import orjson

from tracemerge.report.collectives import collective_report
from tracemerge.codecs import plain_name
from tracemerge.clocks.correlate import match_collectives, match_rpcs
from tracemerge.errors import OutputError, TracemergeError
from tracemerge.report.keyavg import group_rows, key_averages, op_tree
from tracemerge.output import atomic_output, check_output
from tracemerge.inputs.chrome import read_trace
from tracemerge.report.rpcstats import rpc_report, server_threads

FORMATS = ("table", "csv", "json", "markdown")
SORT_KEYS = ("cpu_time_total", "self_cpu_time_total", "cpu_time", "count", "key", "node_id")
GROUP_BY = ("name", "name,rank")
ROW_FIELDS = ("key", "count", "node_id", "cpu_time_total", "self_cpu_time_total", "cpu_time")
TIMELINE_BINS = 120


@dataclass
class Report:
    key_averages: list                 # [KeyAverage], grouped, unsorted
    group_by: str
    ranks: list                        # [{rank, worker_name, hostname, path}]
    clocks: list                       # ClockModel dicts, one per rank
    reference: int
    align: str
    rpc: object = None                 # RpcReport, None without RPC records
    collectives: list = field(default_factory=list)
    timeline: dict = field(default_factory=dict)   # {start_ns, bin_ns, busy: {rank: [avg busy threads]}}
    notes: list = field(default_factory=list)


def is_merged(trace):
    """A trace written by ``tracemerge combine``: its summary maps output pids to ranks."""
    block = trace.tracemerge or {}
    return isinstance(block.get("pids"), dict) and "inputs" in block


def _busy(trace, tree, to_ref, start_ns, bin_ns):
    """Average number of busy threads per time bin: top-level host ops, clipped to bins."""
    top = tree.kept & (tree.parent < 0)
    s = to_ref(tree.start[top]) - start_ns
    e = to_ref(tree.end[top]) - start_ns
    edges = np.arange(TIMELINE_BINS + 1, dtype=np.int64) * bin_ns
    busy = [(np.clip(e, lo, hi) - np.clip(s, lo, hi)).sum() / bin_ns for lo, hi in zip(edges[:-1], edges[1:])]
    return [round(float(b), 4) for b in busy]


def build_report(paths, session_opener, align_args=(), group_by="name", remote_ops=False):
    """The :class:`Report` of ``paths``; ``session_opener(paths)`` opens rank files as a Session."""
    if group_by not in GROUP_BY:
        raise TracemergeError(f"--group-by {group_by!r}: choose from {', '.join(GROUP_BY)}")
    if len(paths) == 1:
        trace = read_trace(paths[0])
        if is_merged(trace):
            return _merged_report(trace, group_by, remote_ops)
    session = session_opener(paths)
    return session_report(session, session.align(*align_args), group_by, remote_ops)


def session_report(session, alignment, group_by="name", remote_ops=False):
    """The :class:`Report` of an open Session under an alignment (what ``combine --report`` uses)."""
    clocks = alignment.clocks
    rows, threads, traces_info = [], {}, []
    first = min(clocks[i.rank].to_reference(i.first_ns) for i in session.infos)
    last = max(clocks[i.rank].to_reference(i.last_ns) for i in session.infos)
    bin_ns = max(1, -(-(last - first) // TIMELINE_BINS))
    busy = {}
    for info in session.infos:
        trace = session.trace(info.rank)
        if is_merged(trace):
            raise TracemergeError(f"{info.path}: a merged trace; report on it alone, or on the rank files")
        rows += key_averages(trace, np.full(len(trace.pids), info.rank, dtype=np.int64), remote_ops)
        threads[info.rank] = server_threads(trace)
        busy[info.rank] = _busy(trace, op_tree(trace), clocks[info.rank].to_reference, first, bin_ns)
        traces_info.append({"rank": info.rank, "worker_name": info.worker_name, "hostname": info.hostname,
                            "path": info.path})
    match = match_rpcs(session.infos)
    report = Report(key_averages=group_rows(rows, group_by == "name,rank"), group_by=group_by, ranks=traces_info,
                    clocks=[clocks[r].as_dict() for r in session.ranks], reference=alignment.reference,
                    align=alignment.method, timeline={"start_ns": first, "bin_ns": bin_ns, "busy": busy})
    if match.calls:
        report.rpc = rpc_report(match, clocks, threads)
        report.notes += [c.hint for c in report.rpc.callees if c.hint]
        if match.caller_only or match.callee_only:
            report.notes.append(f"{match.caller_only} RPCs have only the caller's record and {match.callee_only} "
                                "only the callee's; their times are left out of the breakdown")
    report.collectives = collective_report(match_collectives(session.infos), clocks)
    if not any(i.has_block for i in session.infos):
        report.notes.append("no rank-file records (plain Kineto traces): no RPC or collectives report")
    return report


def _merged_report(trace, group_by, remote_ops):
    block = trace.tracemerge
    rank_of_pid = {out: int(rank) for rank, m in block["pids"].items() for out in m.values()}
    node = np.array([rank_of_pid.get(p, -1) for p in trace.pids], dtype=np.int64)
    rows = key_averages(trace, node, remote_ops)
    inputs = block.get("inputs") or []
    return Report(
        key_averages=group_rows(rows, group_by == "name,rank"), group_by=group_by,
        ranks=[{k: i.get(k) for k in ("rank", "worker_name", "hostname", "path")} for i in inputs],
        clocks=list(block.get("alignment") or []), reference=block.get("reference", 0), align=block.get("align", ""),
        notes=["a merged trace carries no RPC or collective records: report on the rank files for those"])


def sorted_rows(rows, sort_by="cpu_time_total", row_limit=100):
    """Rows sorted as torch's table() sorts (numbers descending; key ascending), limited."""
    if sort_by not in SORT_KEYS:
        raise TracemergeError(f"--sort-by {sort_by!r}: choose from {', '.join(SORT_KEYS)}")
    if sort_by == "key":
        rows = sorted(rows, key=lambda r: r.key)
    else:
        rows = sorted(rows, key=lambda r: getattr(r, sort_by), reverse=True)
    return rows[:row_limit] if row_limit and row_limit > 0 else rows


def row_dict(r):
    return {f: getattr(r, f) for f in ROW_FIELDS}


# --- torch's table() formatting (torch/autograd/profiler_util.py) ---

def format_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def format_share(us, total):
    return "NaN" if total == 0 else f"{us * 100.0 / total:.2f}%"


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


def _ms(d, k):
    return f"{d[k] / 1000:.3f}" if k in d else "-"


def rpc_rows(rpc):
    head = ["RPC", "Calls", "E2E mean ms", "p50", "p95", "p99", "max", "Exec mean ms", "Overhead mean ms",
            "Queue mean ms", "Queue p95"]
    body = [[k.name, k.count if k.complete == k.count else f"{k.complete}/{k.count}", _ms(k.e2e_us, "mean"),
             _ms(k.e2e_us, "p50"), _ms(k.e2e_us, "p95"), _ms(k.e2e_us, "p99"), _ms(k.e2e_us, "max"),
             _ms(k.exec_us, "mean"), _ms(k.overhead_us, "mean"), _ms(k.queue_us, "mean"), _ms(k.queue_us, "p95")]
            for k in rpc.keys]
    return head, body


def callee_rows(rpc):
    head = ["Callee", "Calls", "Server threads", "Max concurrent", "All busy %", "Queue mean ms", "Exec mean ms"]
    body = [[f"{c.name} (rank {c.callee})", c.calls, c.threads, c.max_concurrent, f"{c.all_busy_share:.0%}",
             f"{c.queue_mean_us / 1000:.3f}", f"{c.exec_mean_us / 1000:.3f}"] for c in rpc.callees]
    return head, body


def collective_rows(colls):
    head = ["Group", "Op", "Count", "Bytes", "Skew mean ms", "Skew max ms", "Slowest rank", "Mean wait per rank ms"]
    body = [[c.group, c.op, c.count, c.bytes, _ms(c.skew_us, "mean"), _ms(c.skew_us, "max"),
             c.slowest_rank if c.slowest_rank >= 0 else "-",
             " ".join(f"{r}:{w / 1000:.3f}" for r, w in c.wait_us.items()) or "-"] for c in colls]
    return head, body


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


def render_csv(report, sort_by, row_limit):
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=ROW_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in sorted_rows(report.key_averages, sort_by, row_limit):
        w.writerow(row_dict(r))
    return out.getvalue()


def report_dict(report, sort_by="cpu_time_total", row_limit=0):
    return {
        "key_averages": [row_dict(r) for r in sorted_rows(report.key_averages, sort_by, row_limit)],
        "group_by": report.group_by,
        "ranks": report.ranks,
        "reference": report.reference,
        "align": report.align,
        "alignment": report.clocks,
        "rpc": asdict(report.rpc) if report.rpc is not None else None,
        "collectives": [asdict(c) for c in report.collectives],
        "notes": report.notes,
    }


def render_json(report, sort_by, row_limit):
    return orjson.dumps(report_dict(report, sort_by, row_limit),
                        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"


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


RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json, "markdown": render_markdown}


def render(report, fmt="table", sort_by="cpu_time_total", row_limit=100):
    if fmt not in RENDERERS:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    return RENDERERS[fmt](report, sort_by, row_limit)


EXTENSION_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown"}


def format_of(path):
    """The format a report path asks for by its extension; the table otherwise."""
    return next((f for ext, f in EXTENSION_FORMATS.items() if path.endswith(ext)), "table")


def write_text(path, text, inputs=(), force=True):
    """Write ``text`` to ``path`` atomically ("-" is stdout)."""
    check_output(path, inputs, force)
    with atomic_output(path) as stream:
        stream.write(text.encode())


def report_path_for(output):
    """Where ``combine --report`` without a PATH puts the report: beside the merged trace."""
    if output == "-":
        return "-"
    stem = plain_name(output)
    stem = stem[:-5] if stem.endswith(".json") else stem
    return stem + ".report.txt"


def combine_report_path(output, path, inputs, force):
    """Where ``combine --report [PATH]`` writes, refused before the merge runs when it is
    the merged trace itself, an input, or an existing file without ``force``."""
    path = path or report_path_for(output)
    if "-" not in (path, output) and os.path.realpath(path) == os.path.realpath(output):
        raise OutputError(f"{path}: the report would replace the merged trace; choose another --report PATH")
    check_output(path, inputs, force)
    return path


def write_combine_report(session, alignment, output, path, inputs=()):
    """``combine --report [PATH]``: the table (or the format PATH's extension asks for) beside the output."""
    path = path or report_path_for(output)
    text = render(session_report(session, alignment), format_of(path))
    if path == "-":
        sys.stderr.write(text)   # stdout carries the merged trace
    else:
        write_text(path, text, inputs)
    return path
