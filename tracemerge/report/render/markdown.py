"""Markdown: every section's view (:mod:`tracemerge.report.view`) in registry order, as the
text table has them, as Markdown: blocks a blank line apart, each table under its title
(``##``; one level under the section's title where the section opens with findings), the
names of code quoted, figures left out, the notes a list at the end."""

from typing import Any, List, Sequence

from tracemerge.analysis.tables import diff_table
from tracemerge.report.build import Report
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.sections import Section, views
from tracemerge.report.view import Findings, Item, Table


def _md_table(head: Sequence[str], body: Sequence[Sequence[Any]]) -> List[str]:
    esc = [[str(v).replace("|", "\\|") for v in row] for row in body]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in esc]


def _blocks(section: Section, items: Sequence[Item]) -> List[List[str]]:
    """The section's blocks of lines; a figure has none."""
    headed = any(isinstance(i, Findings) for i in items)
    out = [[f"## {section.title}"]] if headed else []
    for item in items:
        if isinstance(item, Findings):
            out.append([f"- {line}" for line in item.lines])
        elif isinstance(item, Table):
            body = [[f"`{row[0]}`"] + list(row[1:]) for row in item.body] if item.code else item.body
            out += [[f"{'###' if headed else '##'} {item.title}"], _md_table(item.head, body)]
            if item.footer:
                out.append(list(item.footer))
    return out


def render_markdown(report: Report, sort_by: str, row_limit: int, sections: Sequence[Section]) -> str:
    blocks = [block for section, items in views(report, sort_by, row_limit, sections)
              for block in _blocks(section, items)]
    if report.notes:
        blocks.append([f"- {n.text}" for n in report.notes])
    lines: List[str] = []
    for block in blocks:
        lines += ([""] if lines else []) + block
    return "\n".join(lines) + "\n"


def render_diff_markdown(diff: Diff, row_limit: int) -> str:
    lines = ["## Diff", "", f"- before: {' '.join(f'`{p}`' for p in diff.before)}",
             f"- after: {' '.join(f'`{p}`' for p in diff.after)}", ""]
    lines += _md_table(*diff_table(diff, row_limit))
    if diff.notes:
        lines += [""] + [f"- {n}" for n in diff.notes]
    return "\n".join(lines) + "\n"


FORMAT = ReportFormat("markdown", render_markdown, (".md",), render_diff=render_diff_markdown)
