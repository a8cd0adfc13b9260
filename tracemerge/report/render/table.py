"""The text table: torch's ``key_averages().table()`` with a Node ID column, then the other
sections (:data:`~tracemerge.report.sections.SECTIONS`) as titled tables."""

from typing import Any, Callable, Dict, List, Sequence

from tracemerge.analysis.tables import diff_table
from tracemerge.report.build import Report, postmortem_view, sorted_rows
from tracemerge.report.cells import key_footer, key_rows
from tracemerge.report.diff import Diff
from tracemerge.report.keyavg import KeyAverage
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.sections import Section, shown


def _fixed_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], first_width: int) -> List[str]:
    widths = [first_width] + [max(12, len(h)) for h in headers[1:]]
    fmt = "".join("{:>" + str(w) + "}  " for w in widths)
    sep = "".join("-" * w + "  " for w in widths)
    lines = [sep, fmt.format(*headers), sep]
    lines += [fmt.format(*(str(v) for v in row)) for row in rows]
    lines.append(sep)
    return lines


def short_name(key: str, width: int = 55) -> str:
    """A name cut to fit the column as torch's ``table()`` cuts it (the first ``width - 3``
    characters, then "..."), except RPC keys: those keep their end — ``(caller -> callee)``,
    ``#remote`` and a ``--remote-ops`` op — and lose the middle, since rows that differ only
    there (one function called by several trainers, its ops) would read the same."""
    if len(key) < width - 3:
        return key
    arrow = key.find(" -> ")
    opening = key.rfind("(", 0, arrow) if arrow >= 0 else -1
    closing = key.find(")", arrow) if opening >= 0 else -1
    if closing < 0:
        return key[:width - 3] + "..."
    total, paren, rest = width - 3, key[opening:closing + 1], key[closing + 1:]
    head = total - 3 - len(paren) - len(rest)
    if head >= 8:
        return key[:head] + "..." + paren + rest
    keep = total - 8 - 3 - len(paren) - 3
    if keep >= 8:
        return key[:8] + "..." + paren + "..." + rest[-keep:]
    return key[:8] + "..." + key[-(total - 11):]


RPC_NAME_WIDTH = 120


def _is_rpc_key(key: object) -> bool:
    return isinstance(key, str) and " -> " in key


def key_table(rows: List[KeyAverage], all_rows: List[KeyAverage], width: int = 55) -> List[str]:
    """torch's table; the name column widens for RPC keys (up to RPC_NAME_WIDTH), which
    tell rows apart by their ends."""
    width = max([width] + [min(len(r.key) + 4, RPC_NAME_WIDTH) for r in rows if _is_rpc_key(r.key)])
    name_w = min(max([len(r.key) for r in rows] + [4]) + 4, width)
    headers, body, _ = key_rows(rows, all_rows, lambda key: short_name(key, width))
    return _fixed_table(headers, body, name_w) + key_footer(all_rows)


def render_table(report: Report, sort_by: str, row_limit: int) -> str:
    lines: List[str] = []
    for section in shown(report):
        own = OWN.get(section.name)
        lines += own(report, sort_by, row_limit) if own else _section(section, report, row_limit)
    lines += [f"hint: {n}" if "thread-limited" in n else f"note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def _section(section: Section, report: Report, row_limit: int) -> List[str]:
    """A section's tables, each under its title: torch's fixed columns (the first sized to
    its names) or columns sized to their cells."""
    lines: List[str] = []
    for title, (head, body) in section.tables(report, row_limit):
        if section.fixed_columns:
            first = max([len(str(r[0])) for r in body] + [len(head[0])]) + 2
            lines += ["", title] + _fixed_table(head, body, first)
        else:
            lines += ["", title] + _aligned(head, body)
    return lines


def _postmortem(report: Report, sort_by: str, row_limit: int) -> List[str]:
    found, tables = postmortem_view(report)  # a failed job: said first
    lines = [f"post-mortem: {line}" for line in found]
    for title, (head, body) in tables:
        lines += [title] + _aligned(head, body) + [""]
    return lines


def _key_averages(report: Report, sort_by: str, row_limit: int) -> List[str]:
    return key_table(sorted_rows(report.key_averages, sort_by, row_limit), report.key_averages)


# the sections this format lays out its own way; the others are their titled tables
OWN: Dict[str, Callable[[Report, str, int], List[str]]] = {"postmortem": _postmortem, "key_averages": _key_averages}


def _aligned(head: List[str], body: List[List[Any]]) -> List[str]:
    """A table sized to its cells: numbers right-aligned, the last column (a name) left-aligned."""
    cells = [[str(v) for v in row] for row in [head] + body]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    sep = "  ".join("-" * w for w in widths)
    out = []
    for row in cells:
        parts = [c.rjust(w) for c, w in zip(row[:-1], widths)] + [row[-1]]
        out.append("  ".join(parts).rstrip())
    return [sep, out[0], sep] + out[1:] + [sep]


def render_diff_table(diff: Diff, row_limit: int) -> str:
    head, body = diff_table(diff, row_limit)
    lines = [f"before: {' '.join(diff.before)}", f"after:  {' '.join(diff.after)}", ""]
    lines += _aligned(head, body) if body else ["no differences"]
    lines += [f"note: {n}" for n in diff.notes]
    return "\n".join(lines) + "\n"


FORMAT = ReportFormat("table", render_table, (), render_diff=render_diff_table)
