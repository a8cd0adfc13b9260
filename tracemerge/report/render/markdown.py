"""Markdown: the same sections as the text table, as Markdown tables."""

from typing import Any, List, Sequence

from tracemerge.analysis.tables import analysis_sections, diff_table
from tracemerge.report.build import Report, postmortem_view, sorted_rows
from tracemerge.report.cells import callee_rows, collective_rows, key_footer, key_rows, rpc_rows
from tracemerge.report.diff import Diff
from tracemerge.report.gpu import gpu_rows
from tracemerge.report.render.base import ReportFormat


def _md_table(head: Sequence[str], body: Sequence[Sequence[Any]]) -> List[str]:
    esc = [[str(v).replace("|", "\\|") for v in row] for row in body]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in esc]


def render_markdown(report: Report, sort_by: str, row_limit: int) -> str:
    rows = sorted_rows(report.key_averages, sort_by, row_limit)
    head, body, _ = key_rows(rows, report.key_averages, lambda key: f"`{key}`")
    found, tables = postmortem_view(report)  # a failed job: said first
    lines = (["## Post-mortem", ""] + [f"- {line}" for line in found] + [""]) if found else []
    for title, table in tables:
        lines += [f"### {title}", ""] + _md_table(*table) + [""]
    lines += ["## Key averages", ""] + _md_table(head, body) + [""] + key_footer(report.key_averages)
    if report.rpc is not None:
        lines += ["", "## RPC latency", ""] + _md_table(*rpc_rows(report.rpc))
        lines += ["", "## RPC callees", ""] + _md_table(*callee_rows(report.rpc))
    if report.collectives:
        lines += ["", "## Collectives", ""] + _md_table(*collective_rows(report.collectives))
    if report.gpu:
        lines += ["", "## GPU (per rank)", ""] + _md_table(*gpu_rows(report.gpu))
    if report.analysis is not None:
        for title, table in analysis_sections(report.analysis, row_limit):
            lines += ["", f"## {title}", ""] + _md_table(*table)
    if report.notes:
        lines += [""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def render_diff_markdown(diff: Diff, row_limit: int) -> str:
    lines = ["## Diff", "", f"- before: {' '.join(f'`{p}`' for p in diff.before)}",
             f"- after: {' '.join(f'`{p}`' for p in diff.after)}", ""]
    lines += _md_table(*diff_table(diff, row_limit))
    if diff.notes:
        lines += [""] + [f"- {n}" for n in diff.notes]
    return "\n".join(lines) + "\n"


FORMAT = ReportFormat("markdown", render_markdown, (".md",), render_diff=render_diff_markdown)
