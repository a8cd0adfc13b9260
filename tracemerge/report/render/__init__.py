"""Report renderers, one module per format, behind one :func:`render` call."""

from tracemerge.errors import TracemergeError
from tracemerge.report.render.csvtext import SECTIONS, render_csv, render_diff_csv
from tracemerge.report.render.jsondoc import render_diff_json, render_json
from tracemerge.report.render.markdown import render_diff_markdown, render_markdown
from tracemerge.report.render.table import render_diff_table, render_table


RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json, "markdown": render_markdown}
FORMATS = tuple(RENDERERS)


def render(report, fmt="table", sort_by="cpu_time_total", row_limit=100, section=SECTIONS[0]):
    """``section`` picks the CSV's table (csvtext.SECTIONS); the other formats hold them all."""
    if fmt not in RENDERERS:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    if fmt == "csv":
        return render_csv(report, sort_by, row_limit, section)
    if section != SECTIONS[0]:
        raise TracemergeError(f"--section {section}: only for --format csv (the other formats hold every section)")
    return RENDERERS[fmt](report, sort_by, row_limit)


DIFF_RENDERERS = {"table": render_diff_table, "csv": render_diff_csv, "json": render_diff_json,
                  "markdown": render_diff_markdown}


def render_diff(diff, fmt="table", row_limit=100):
    """A :class:`~tracemerge.analysis.diff.Diff` in ``fmt`` (the formats of ``render``)."""
    if fmt not in DIFF_RENDERERS:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    return DIFF_RENDERERS[fmt](diff, row_limit)

