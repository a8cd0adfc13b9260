"""``tracemerge diff``: two runs compared, row by row, by what changed most.

Both runs are reports (:class:`tracemerge.report.Report`). The sections of the registry
(:data:`tracemerge.report.sections.SECTIONS`) say what of them is compared: each
:class:`Compared` table of a section gives, per row key, its metrics, every time a total
over the run in µs, so deltas add up and can be ranked (the key averages' per key, the RPC
section's per RPC key and per callee rank). Rows are matched by key and compared metric by
metric.

delta = after − before; relative = delta / before (None when before is 0 or absent). Rows
are sorted by impact, |delta| of a time (counts have none), then by the tables' order in
the registry, key and metric.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Tuple

if TYPE_CHECKING:
    from tracemerge.report.build import Report
    from tracemerge.report.sections import Section

# said with every diff: the report shows per-call means, the diff totals (which add up)
TOTALS_NOTE = ("times are totals over each run (the report's per-call means times the calls): "
               "deltas of the rows add up")


@dataclass
class DiffRow:
    section: str
    key: str
    metric: str
    before: Optional[float]      # µs (times) or a count; None: the key is not in that run
    after: Optional[float]
    delta: float
    relative: Optional[float]
    impact: float                # |delta| µs for times, 0 for counts


@dataclass
class Diff:
    before: List[str]            # the inputs of each run
    after: List[str]
    rows: List[DiffRow] = field(default_factory=list)    # highest impact first
    notes: List[str] = field(default_factory=list)


# {key: {metric: value}} of one table of a report
Metrics = Dict[str, Dict[str, float]]


@dataclass(frozen=True)
class Compared:
    """A table of a section that ``tracemerge diff`` compares: ``name`` (the rows' section
    column), ``metrics(report)`` its rows' metrics by key, ``times`` the metrics that are
    times (µs totals: their |delta| ranks the rows; the others are counts)."""

    name: str
    metrics: Callable[["Report"], Metrics]
    times: FrozenSet[str]


def _rows(table: Compared, before: "Report", after: "Report") -> List[DiffRow]:
    b, a = table.metrics(before), table.metrics(after)
    out = []
    for key in list(b) + [k for k in a if k not in b]:
        mb, ma = b.get(key, {}), a.get(key, {})
        for metric in list(mb) + [m for m in ma if m not in mb]:
            vb, va = mb.get(metric), ma.get(metric)
            delta = (va or 0.0) - (vb or 0.0)
            if vb is not None and va is not None and delta == 0:
                continue
            out.append(DiffRow(section=table.name, key=key, metric=metric, before=vb, after=va, delta=delta,
                               relative=delta / vb if vb else None,
                               impact=abs(delta) if metric in table.times else 0.0))
    return out


def diff_reports(before: "Report", after: "Report", before_inputs: Sequence[str] = (),
                 after_inputs: Sequence[str] = (), sections: "Optional[Sequence[Section]]" = None) -> Diff:
    """The :class:`Diff` of two reports, over the tables the sections compare (``sections``:
    the registry, :data:`~tracemerge.report.sections.SECTIONS`, unless given another)."""
    from tracemerge.report.sections import compared
    tables = compared(sections)
    out = Diff(before=list(before_inputs), after=list(after_inputs))
    for table in tables:
        out.rows += _rows(table, before, after)
    order = {t.name: i for i, t in enumerate(tables)}
    out.rows.sort(key=lambda r: (-r.impact, order[r.section], r.key, r.metric))
    out.notes.append(TOTALS_NOTE)
    for side, report in (("before", before), ("after", after)):
        for note in report.notes:
            out.notes.append(f"{side}: {note.text}")
    return out


TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst")


@dataclass
class RunFiles:
    """The files one side of ``diff`` stands for, and what a directory held that was left out."""

    files: List[str]
    left_out: List[Tuple[str, str]] = field(default_factory=list)   # [(path, why)]


def run_files(arg: str) -> RunFiles:
    """The files of one run given as a directory, a quoted glob or one file.

    A directory is read as a run: its rank files and traces are taken; a merged trace
    beside them is left out (it holds the same events again), and is the run only where it
    is the directory's one trace; JSON that is no trace (no ``traceEvents``: a config, a
    report) is left out. Every file left out is named with why. Raises ValueError (said as
    a usage error) when nothing is left, or several merged traces and nothing else."""
    import glob
    import os

    from tracemerge.inputs.head import first_bytes, read_head
    from tracemerge.report.build import MERGED_HEAD

    if os.path.isdir(arg):
        found = sorted(os.path.join(arg, f) for f in os.listdir(arg) if f.endswith(TRACE_SUFFIXES))
        if not found:
            raise ValueError(f"{arg}: no {', '.join(TRACE_SUFFIXES)} files in the directory")
        merged, traces, left = [], [], []
        for path in found:
            head = read_head(path)
            if head is not None and set(head) == MERGED_HEAD:
                merged.append(path)
            elif head is not None or first_bytes(path).lstrip()[:1] == b"[" or b'"traceEvents"' in first_bytes(path):
                traces.append(path)
            else:
                left.append((path, "not a trace (no traceEvents)"))
        if traces:
            left += [(p, f"a merged trace: the directory's {len(traces)} trace files are taken, and it holds their "
                         "events again") for p in merged]
            return RunFiles(traces, left)
        if len(merged) == 1:
            return RunFiles(merged, left)
        if merged:
            raise ValueError(f"{arg}: {len(merged)} merged traces and no rank files: name the one to compare")
        raise ValueError(f"{arg}: no trace among its {', '.join(TRACE_SUFFIXES)} files ("
                         + "; ".join(f"{os.path.basename(p)}: {why}" for p, why in left) + ")")
    if any(c in arg for c in "*?["):
        matched = sorted(glob.glob(arg))
        if not matched:
            raise ValueError(f"{arg}: the pattern matches no file")
        return RunFiles(matched)
    return RunFiles([arg])
