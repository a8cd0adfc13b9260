"""Markdown: the same sections as the text table (:data:`~tracemerge.report.sections.SECTIONS`), as Markdown tables."""

from typing import Any, Callable, Dict, List, Sequence

from tracemerge.analysis.tables import diff_table
from tracemerge.report.build import Report, postmortem_view, sorted_rows
from tracemerge.report.cells import key_footer, key_rows
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.sections import shown


def _md_table(head: Sequence[str], body: Sequence[Sequence[Any]]) -> List[str]:
    esc = [[str(v).replace("|", "\\|") for v in row] for row in body]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in esc]


def render_markdown(report: Report, sort_by: str, row_limit: int) -> str:
    lines: List[str] = []
    for section in shown(report):
        own = OWN.get(section.name)
        if own:
            lines += own(report, sort_by, row_limit)
        else:
            for title, table in section.tables(report, row_limit):
                lines += ["", f"## {title}", ""] + _md_table(*table)
    if report.notes:
        lines += [""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def _postmortem(report: Report, sort_by: str, row_limit: int) -> List[str]:
    found, tables = postmortem_view(report)  # a failed job: said first
    lines = (["## Post-mortem", ""] + [f"- {line}" for line in found] + [""]) if found else []
    for title, table in tables:
        lines += [f"### {title}", ""] + _md_table(*table) + [""]
    return lines


def _key_averages(report: Report, sort_by: str, row_limit: int) -> List[str]:
    rows = sorted_rows(report.key_averages, sort_by, row_limit)
    head, body, _ = key_rows(rows, report.key_averages, lambda key: f"`{key}`")
    return ["## Key averages", ""] + _md_table(head, body) + [""] + key_footer(report.key_averages)


# the sections this format lays out its own way; the others are their titled tables
OWN: Dict[str, Callable[[Report, str, int], List[str]]] = {"postmortem": _postmortem, "key_averages": _key_averages}


def render_diff_markdown(diff: Diff, row_limit: int) -> str:
    lines = ["## Diff", "", f"- before: {' '.join(f'`{p}`' for p in diff.before)}",
             f"- after: {' '.join(f'`{p}`' for p in diff.after)}", ""]
    lines += _md_table(*diff_table(diff, row_limit))
    if diff.notes:
        lines += [""] + [f"- {n}" for n in diff.notes]
    return "\n".join(lines) + "\n"


FORMAT = ReportFormat("markdown", render_markdown, (".md",), render_diff=render_diff_markdown)
