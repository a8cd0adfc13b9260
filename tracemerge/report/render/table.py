"""The text table: every section's view (:mod:`tracemerge.report.view`) in registry order,
the key averages as torch's ``key_averages().table()`` with a Node ID column.

Tables under their titles, torch's fixed-width columns or columns sized to their cells as
each table asks; findings as lines headed by their label, leading straight into their
section's tables; a blank line between the others; figures left out (nothing here draws);
the notes last, each headed by its kind's label.
"""

from typing import Any, List, Sequence

from tracemerge.analysis.tables import diff_table
from tracemerge.report.build import Report
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.sections import Section, views
from tracemerge.report.view import ALIGNED, TORCH, Findings, Item, Table


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


def _torch_table(table: Table, width: int = 55) -> List[str]:
    """torch's table, the names cut to fit; the name column widens for RPC keys (up to
    RPC_NAME_WIDTH), which tell rows apart by their ends."""
    names = [row[0] for row in table.body]
    width = max([width] + [min(len(k) + 4, RPC_NAME_WIDTH) for k in names if _is_rpc_key(k)])
    name_w = min(max([len(k) for k in names] + [4]) + 4, width)
    body = [[short_name(row[0], width)] + list(row[1:]) for row in table.body]
    return _fixed_table(table.head, body, name_w)


def _lines(item: Item) -> List[str]:
    """An item's lines; none for a figure."""
    if isinstance(item, Findings):
        return [f"{item.label}: {line}" for line in item.lines]
    if not isinstance(item, Table):
        return []
    if item.layout == TORCH:   # torch's table has no title line
        return _torch_table(item) + list(item.footer)
    if item.layout == ALIGNED:
        laid = _aligned(item.head, item.body)
    else:
        first = max([len(str(r[0])) for r in item.body] + [len(item.head[0])]) + 2
        laid = _fixed_table(item.head, item.body, first)
    return [item.title] + laid + list(item.footer)


def render_table(report: Report, sort_by: str, row_limit: int, sections: Sequence[Section]) -> str:
    lines: List[str] = []
    after_findings = True   # nothing before the first block
    for _, items in views(report, sort_by, row_limit, sections):
        for item in items:
            found = _lines(item)
            if not found:
                continue
            lines += ([] if after_findings else [""]) + found
            after_findings = isinstance(item, Findings)
    lines += [f"{n.label}: {n.text}" for n in report.notes]
    return "\n".join(lines) + "\n"


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
