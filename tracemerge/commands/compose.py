"""``combine`` with the analyses drawn in: the layer above both the merge and the analyses
(:mod:`tracemerge.merge` imports no analysis; ``combine --critical-path`` finds the path here
and hands the merge one more process to draw). A plain merge does not import the analyses."""

import os
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from tracemerge.files.output import check_output
from tracemerge.merge.combine import Written
from tracemerge.merge.combine import write as write_merged
from tracemerge.place import selection as select

if TYPE_CHECKING:
    from tracemerge.job import Alignment, Job


def write(job: "Job", alignment: Optional["Alignment"], output: str, force: bool = False, fmt: Optional[str] = None,
          selection: Optional[select.Selection] = None, critical_path: bool = False) -> Written:
    """:func:`tracemerge.merge.combine.write`; ``critical_path``: the cross-rank critical path
    (:mod:`tracemerge.analysis`) is found first (from the ranks' timelines, made by the
    workers that hold them) and drawn as one more process; the summary says where
    (``critical_path``)."""
    alignment = job.clock_model(alignment)
    drawn = None
    if critical_path:
        from tracemerge.analysis.critical_path import critical_path as find_critical_path
        from tracemerge.analysis.drawing import PathDrawing
        from tracemerge.analysis.job_timeline import job_timeline

        check_output(output, job.inputs, force)  # before the path: a long merge never ends in "cannot write"
        drawn = PathDrawing(find_critical_path(job_timeline(job, alignment)))
    return write_merged(job, alignment, output, force, fmt, selection, drawn)


def combine(job: "Job", alignment: Optional["Alignment"], output: Union[str, "os.PathLike[str]"], force: bool = False,
            fmt: Optional[str] = None, selection: Optional[select.Selection] = None,
            critical_path: bool = False) -> Dict[str, Any]:
    """Write the merged trace to ``output`` ("-" for stdout); returns its summary
    (:func:`tracemerge.merge.combine.combine`, and ``critical_path``: see :func:`write`)."""
    return write(job, alignment, os.fspath(output), force, fmt, selection, critical_path).summary
