"""``tracemerge diff``: two runs compared, row by row, by what changed most.

Both runs are reports (:class:`tracemerge.report.Report`: key averages, RPC breakdown,
callee load). Rows are matched by key and compared metric by metric; every time is a
total over the run in µs, so deltas add up and can be ranked:

- ``rpc`` rows, per RPC key (kind, function, caller → callee): ``end-to-end``,
  ``execution``, ``queueing`` and ``transfer`` (the overhead δ without the queueing), each
  the per-call mean times the calls with both sides; and ``calls``.
- ``callee`` rows, per callee rank: ``queueing`` and ``execution`` over every call it served.
- ``key_averages`` rows, per key: ``cpu_time_total``, ``self_cpu_time_total`` and
  ``count``. RPC spans (``rpc_async#…``, ``…#remote``) are left out here: their wall time
  is what the ``rpc`` rows measure from the records, on both clocks, and would count twice.

delta = after − before; relative = delta / before (None when before is 0 or absent). Rows
are sorted by impact, |delta| of the time (counts have none), then by section and key.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Tuple

from tracemerge.report.diff_metrics import TIME_METRICS
from tracemerge.report.sections import diff_tables

if TYPE_CHECKING:
    from tracemerge.report.build import Report

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


def diff_reports(before: "Report", after: "Report", before_inputs: Sequence[str] = (),
                 after_inputs: Sequence[str] = ()) -> Diff:
    """The :class:`Diff` of two reports."""
    out = Diff(before=list(before_inputs), after=list(after_inputs))
    tables = diff_tables()
    for section, metrics in tables.items():
        b, a = metrics(before), metrics(after)
        for key in list(b) + [k for k in a if k not in b]:
            mb, ma = b.get(key, {}), a.get(key, {})
            for metric in list(mb) + [m for m in ma if m not in mb]:
                vb, va = mb.get(metric), ma.get(metric)
                delta = (va or 0.0) - (vb or 0.0)
                if vb is not None and va is not None and delta == 0:
                    continue
                relative = delta / vb if vb else None
                out.rows.append(DiffRow(section=section, key=key, metric=metric, before=vb, after=va, delta=delta,
                                        relative=relative, impact=abs(delta) if metric in TIME_METRICS else 0.0))
    order = {s: i for i, s in enumerate(tables)}
    out.rows.sort(key=lambda r: (-r.impact, order[r.section], r.key, r.metric))
    out.notes.append(TOTALS_NOTE)
    for side, report in (("before", before), ("after", after)):
        for note in report.notes:
            out.notes.append(f"{side}: {note}")
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
