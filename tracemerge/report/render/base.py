"""What a report format is: a name, a render function, and the report paths that choose it."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Tuple

if TYPE_CHECKING:
    from tracemerge.report.diff import Diff


@dataclass(frozen=True)
class ReportFormat:
    """One report format; registered by one line in :data:`tracemerge.report.render.RENDERERS`.

    ``render(report, sort_by, row_limit) -> str``. ``suffixes``: ``combine --report=PATH``
    names that choose it. ``option``: the CLI option that asks for it — ``--format NAME``
    when None, else its own (``--html PATH``). ``render_diff(diff, row_limit) -> str``:
    ``tracemerge diff`` in this format. ``sections``: for a format that holds one table
    at a time (CSV), the tables ``report --section`` may pick, the default first; ``render``
    then takes ``section=``.
    """

    name: str
    render: Callable[..., str]     # (report, sort_by, row_limit[, section=]) -> text
    suffixes: Tuple[str, ...] = ()
    option: Optional[str] = None
    render_diff: Optional[Callable[["Diff", int], str]] = None
    sections: Tuple[str, ...] = ()
