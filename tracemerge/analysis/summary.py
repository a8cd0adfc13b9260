"""All the analyses of one job together, as a report carries them and as JSON."""

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from tracemerge.analysis.critical_path import Window, critical_path, totals
from tracemerge.analysis.job_timeline import JobTimeline
from tracemerge.analysis.stragglers import StepTimes, stragglers
from tracemerge.analysis.waits import WaitStates, wait_states


@dataclass
class Analysis:
    critical_path: List[Window] = field(default_factory=list)
    waits: Optional[WaitStates] = None
    steps: Optional[StepTimes] = None


def analyse(job: JobTimeline) -> Analysis:
    """The :class:`Analysis` of a :class:`~tracemerge.analysis.job_timeline.JobTimeline`."""
    return Analysis(critical_path=critical_path(job), waits=wait_states(job), steps=stragglers(job))


def analysis_dict(analysis: Analysis) -> Dict[str, Any]:
    """The JSON keys the analyses add to a report: ``critical_path`` (the windows, each
    ``{"window", "start_ns", "end_ns", "segments"}``), ``critical_path_totals`` (ns by rank
    and by kind, per window and over all), ``wait_states`` and ``stragglers``."""
    windows = analysis.critical_path
    by_rank, by_kind = totals(windows)
    return {
        "critical_path": [w.as_dict() for w in windows],
        "critical_path_totals": {"by_rank": by_rank, "by_kind": by_kind,
                                 "windows": [{"window": w.window, "by_rank": w.by_rank, "by_kind": w.by_kind}
                                             for w in windows]},
        "wait_states": asdict(analysis.waits) if analysis.waits is not None else None,
        "stragglers": asdict(analysis.steps) if analysis.steps is not None else None,
    }
