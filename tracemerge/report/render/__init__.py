"""Report renderers, one module per format (each defines its ``FORMAT``, a
:class:`~tracemerge.report.render.base.ReportFormat`), behind one :func:`render` call. A
new report format is one new module and one line in :data:`RENDERERS`; ``report
--format``'s choices and ``combine --report PATH``'s suffix routing come from here."""

from typing import Any, Dict

from tracemerge.errors import TracemergeError
from tracemerge.report.render import csvtext, htmlpage, jsondoc, markdown, table
from tracemerge.report.render.base import ReportFormat

RENDERERS: Dict[str, ReportFormat] = {f.name: f for f in (
    table.FORMAT,
    csvtext.FORMAT,
    jsondoc.FORMAT,
    markdown.FORMAT,
    htmlpage.FORMAT,
)}
FORMATS = tuple(name for name, f in RENDERERS.items() if f.option is None)   # report --format NAME
DEFAULT = "table"


def render(report: Any, fmt: str = DEFAULT, sort_by: str = "cpu_time_total", row_limit: int = 100) -> str:
    if fmt not in RENDERERS:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    return RENDERERS[fmt].render(report, sort_by, row_limit)


def format_of(path: str) -> str:
    """The format a report path asks for by its suffix; the default (table) otherwise."""
    return next((f.name for f in RENDERERS.values() if f.suffixes and path.endswith(f.suffixes)), DEFAULT)
