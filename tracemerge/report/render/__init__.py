"""Report renderers, one module per format (each defines its ``FORMAT``, a
:class:`~tracemerge.report.render.base.ReportFormat`), behind one :func:`render` call. A
new report format is one new module and one line in :data:`RENDERERS`; ``report
--format``'s choices and ``combine --report PATH``'s suffix routing come from here."""

from typing import Dict, Optional

from tracemerge.errors import TracemergeError
from tracemerge.report.build import Report
from tracemerge.report.diff import Diff
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


SECTIONS = csvtext.SECTIONS   # report --section: the tables a one-table format can hold


def render(report: Report, fmt: str = DEFAULT, sort_by: str = "cpu_time_total", row_limit: int = 100,
           section: Optional[str] = None) -> str:
    """``section`` picks the table of a format that holds one (CSV); the others hold them all."""
    if fmt not in RENDERERS:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    form = RENDERERS[fmt]
    if section is None or section == (form.sections or SECTIONS)[0]:
        return form.render(report, sort_by, row_limit)
    if not form.sections:
        raise TracemergeError(f"--section {section}: only for --format csv (the other formats hold every section)")
    return form.render(report, sort_by, row_limit, section=section)


def render_diff(diff: Diff, fmt: str = DEFAULT, row_limit: int = 100) -> str:
    """A :class:`~tracemerge.report.diff.Diff` in ``fmt`` (every report format has one)."""
    form = RENDERERS.get(fmt)
    if form is None or form.render_diff is None:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    return form.render_diff(diff, row_limit)


def format_of(path: str) -> str:
    """The format a report path asks for by its suffix; the default (table) otherwise."""
    return next((f.name for f in RENDERERS.values() if f.suffixes and path.endswith(f.suffixes)), DEFAULT)
