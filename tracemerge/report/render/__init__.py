"""Report renderers, one module per format, behind one :func:`render` call."""

from tracemerge.errors import TracemergeError
from tracemerge.report.render.csvtext import render_csv
from tracemerge.report.render.jsondoc import render_json
from tracemerge.report.render.markdown import render_markdown
from tracemerge.report.render.table import render_table


RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json, "markdown": render_markdown}
FORMATS = tuple(RENDERERS)


def render(report, fmt="table", sort_by="cpu_time_total", row_limit=100):
    if fmt not in RENDERERS:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    return RENDERERS[fmt](report, sort_by, row_limit)

