"""Report renderers, one module per format (each defines its ``FORMAT``, a
:class:`~tracemerge.report.render.base.ReportFormat`), behind one :func:`render` call. A
new report format is one new module and one line in :data:`RENDERERS`; ``report
--format``'s choices and ``combine --report=PATH``'s suffix routing come from here. The
registry names its modules (:mod:`tracemerge.registry`), so ``report --help`` and ``diff
--help`` read the formats' names without importing a renderer, numpy or the analyses."""

from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from tracemerge.errors import TracemergeError
from tracemerge.registry import Registry

if TYPE_CHECKING:
    from tracemerge.report.build import Report
    from tracemerge.report.diff import Diff
    from tracemerge.report.render.base import ReportFormat
    from tracemerge.report.sections import Section

RENDERERS: "Registry[ReportFormat]" = Registry({
    "table": "tracemerge.report.render.table:FORMAT",
    "csv": "tracemerge.report.render.csvtext:FORMAT",
    "json": "tracemerge.report.render.jsondoc:FORMAT",
    "markdown": "tracemerge.report.render.markdown:FORMAT",
    "html": "tracemerge.report.render.htmlpage:FORMAT",
})
# the formats asked for by an option of their own (their FORMAT.option, e.g. --html PATH), not
# by --format NAME; named here so that the choices need no import (a test checks they agree)
OWN_OPTION = ("html",)
FORMATS = tuple(name for name in RENDERERS if name not in OWN_OPTION)   # report --format NAME
DEFAULT = "table"


def csv_sections() -> Tuple[str, ...]:
    """``report --section``'s choices: the tables a one-table format (CSV) can hold, the
    section registry's, the default first (read from the sections, which import the analyses,
    when asked: a registry with one more section is offered its tables)."""
    from tracemerge.report.sections import csv_tables
    return tuple(csv_tables())


def csv_needs_analysis(table: str) -> bool:
    """Whether ``report --section TABLE`` needs the analyses run (a table of a section they make)."""
    from tracemerge.report.sections import SECTIONS
    return any(s.analysis for s in SECTIONS if any(name == table for name, _ in s.csv))


def render(report: "Report", fmt: str = DEFAULT, sort_by: str = "cpu_time_total", row_limit: int = 100,
           section: Optional[str] = None, sections: "Optional[Sequence[Section]]" = None) -> str:
    """``section`` picks the table of a format that holds one (CSV); the others hold them all.
    ``sections``: the registry the format walks (:data:`~tracemerge.report.sections.SECTIONS`
    unless given another)."""
    if fmt not in RENDERERS:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    from tracemerge.report.sections import csv_tables, registered
    walked = tuple(registered(sections))
    form = RENDERERS[fmt]
    if section is None or section == next(iter(csv_tables(walked)), None):
        return form.render(report, sort_by, row_limit, walked)
    if not form.one_table:
        raise TracemergeError(f"--section {section}: only for --format csv (the other formats hold every section)")
    return form.render(report, sort_by, row_limit, walked, section=section)


def render_diff(diff: "Diff", fmt: str = DEFAULT, row_limit: int = 100) -> str:
    """A :class:`~tracemerge.report.diff.Diff` in ``fmt`` (every report format has one)."""
    form = RENDERERS.get(fmt)
    if form is None or form.render_diff is None:
        raise TracemergeError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    return form.render_diff(diff, row_limit)


def format_of(path: str) -> str:
    """The format a report path asks for by its suffix; the default (table) otherwise."""
    return next((f.name for f in RENDERERS.values() if f.suffixes and path.endswith(f.suffixes)), DEFAULT)
