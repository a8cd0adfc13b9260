"""What a report format is: a name, a render function, and the report paths that choose it."""

from dataclasses import dataclass
from typing import Callable, Optional, Tuple


@dataclass(frozen=True)
class ReportFormat:
    """One report format; registered by one line in :data:`tracemerge.report.render.RENDERERS`.

    ``render(report, sort_by, row_limit) -> str``. ``suffixes``: ``combine --report PATH``
    names that choose it. ``option``: the CLI option that asks for it — ``--format NAME``
    when None, else its own (``--html PATH``).
    """

    name: str
    render: Callable[..., str]
    suffixes: Tuple[str, ...] = ()
    option: Optional[str] = None
