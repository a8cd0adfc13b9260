"""CSV: one table per file — by default one row per key-average row (the other sections
are in JSON); ``section`` picks another of the tables the sections offer
(:func:`~tracemerge.report.sections.csv_tables`): the critical path's segments, the wait
states, the step times, the stragglers or a failed job's post-mortem."""

import csv
import io
from dataclasses import asdict
from typing import Any, Dict, Iterable, Optional, Sequence

from tracemerge.errors import TracemergeError
from tracemerge.report.build import Report
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.sections import Section, csv_tables


def render_csv(report: Report, sort_by: str, row_limit: int, sections: Sequence[Section],
               section: Optional[str] = None) -> str:
    tables = csv_tables(sections)
    name = section if section is not None else next(iter(tables))
    if name not in tables:
        raise TracemergeError(f"--section {name!r}: choose from {', '.join(tables)}")
    return _csv(*tables[name](report, sort_by, row_limit))


def _csv(fields: Sequence[str], rows: Iterable[Dict[str, Any]]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return out.getvalue()


def render_diff_csv(diff: Diff, row_limit: int) -> str:
    """Every row (``row_limit`` is for the tables), times in µs."""
    fields = ("section", "key", "metric", "before", "after", "delta", "relative", "impact")
    return _csv(fields, (asdict(r) for r in diff.rows))


FORMAT = ReportFormat("csv", render_csv, (".csv",), render_diff=render_diff_csv, one_table=True)
