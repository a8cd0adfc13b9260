"""JSON: the whole report (:func:`~tracemerge.report.model.report_dict`)."""

import orjson

from tracemerge.report.model import report_dict


def render_json(report, sort_by, row_limit):
    return orjson.dumps(report_dict(report, sort_by, row_limit),
                        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
