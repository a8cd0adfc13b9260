"""``combine`` with the analyses drawn in: the layer above both the merge and the analyses
(:mod:`tracemerge.merge` imports no analysis; ``combine --critical-path`` finds the path here
and hands the merge one more process to draw)."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from tracemerge.analysis import drawing
from tracemerge.analysis.critical_path import Window
from tracemerge.analysis.critical_path import critical_path as find_critical_path
from tracemerge.analysis.job_timeline import job_timeline
from tracemerge.merge.combine import Written
from tracemerge.merge.combine import write as write_merged
from tracemerge.output import check_output
from tracemerge.place import selection as select

if TYPE_CHECKING:
    from tracemerge.job import Alignment, Job


@dataclass(frozen=True)
class PathDrawing:
    """The cross-rank critical path as the merge draws it (:class:`tracemerge.merge.combine.Drawn`)."""

    windows: List[Window]
    process: str = drawing.PROCESS
    pid: int = drawing.PID
    key: str = "critical_path"

    def events(self, base_ns: int) -> List[Dict[str, Any]]:
        return drawing.path_events(self.windows, base_ns)

    def summary(self) -> Dict[str, Any]:
        return {"windows": len(self.windows), "segments": sum(len(w.segments) for w in self.windows)}


def write(job: "Job", alignment: Optional["Alignment"], output: str, force: bool = False, fmt: Optional[str] = None,
          selection: Optional[select.Selection] = None, critical_path: bool = False) -> Written:
    """:func:`tracemerge.merge.combine.write`; ``critical_path``: the cross-rank critical path
    (:mod:`tracemerge.analysis`) is found first (from the ranks' timelines, made by the
    workers that hold them) and drawn as one more process; the summary says where
    (``critical_path``)."""
    alignment = job.clock_model(alignment)
    check_output(output, job.inputs, force)  # before the path: a long merge never ends in "cannot write"
    drawn = PathDrawing(find_critical_path(job_timeline(job, alignment))) if critical_path else None
    return write_merged(job, alignment, output, force, fmt, selection, drawn)


def combine(job: "Job", alignment: Optional["Alignment"], output: str, force: bool = False, fmt: Optional[str] = None,
            selection: Optional[select.Selection] = None, critical_path: bool = False) -> Dict[str, Any]:
    """Write the merged trace to ``output`` ("-" for stdout); returns its summary
    (:func:`tracemerge.merge.combine.combine`, and ``critical_path``: see :func:`write`)."""
    return write(job, alignment, output, force, fmt, selection, critical_path).summary
