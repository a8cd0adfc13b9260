"""What a report format is: a name, a render function, and the report paths that choose it."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Tuple

if TYPE_CHECKING:
    from tracemerge.report.diff import Diff


@dataclass(frozen=True)
class ReportFormat:
    """One report format; registered by one line in :data:`tracemerge.report.render.RENDERERS`.

    ``render(report, sort_by, row_limit, sections) -> str``: ``sections`` the registry it
    walks (:data:`~tracemerge.report.sections.SECTIONS`, or a caller's own), drawing each
    section's view (:mod:`tracemerge.report.view`). ``suffixes``: ``combine --report=PATH``
    names that choose it. ``option``: the CLI option that asks for it — ``--format NAME``
    when None, else its own (``--html PATH``). ``render_diff(diff, row_limit) -> str``:
    ``tracemerge diff`` in this format. ``one_table``: the format holds one table at a time
    (CSV): ``report --section`` picks one of the sections' ``csv`` tables, the first by
    default, and ``render`` then takes ``section=``.
    """

    name: str
    render: Callable[..., str]     # (report, sort_by, row_limit, sections[, section=]) -> text
    suffixes: Tuple[str, ...] = ()
    option: Optional[str] = None
    render_diff: Optional[Callable[["Diff", int], str]] = None
    one_table: bool = False
