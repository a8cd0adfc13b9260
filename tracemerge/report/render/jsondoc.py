"""JSON: the whole report (:func:`~tracemerge.report.sections.report_dict`: every section's keys)."""

from dataclasses import asdict
from typing import Sequence

import orjson

from tracemerge.files import names
from tracemerge.report.build import Report
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.sections import Section, report_dict


def render_json(report: Report, sort_by: str, row_limit: int, sections: Sequence[Section]) -> str:
    return names.dumps(report_dict(report, sort_by, row_limit, sections),
                       option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"


def render_diff_json(diff: Diff, row_limit: int) -> str:
    """Every row (``row_limit`` is for the tables)."""
    return names.dumps(asdict(diff), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"


FORMAT = ReportFormat("json", render_json, (".json",), render_diff=render_diff_json)
