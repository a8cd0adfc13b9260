"""CSV: one row per key-average row (the RPC and collective sections are in JSON only)."""

import csv
import io

from tracemerge.report.model import ROW_FIELDS, row_dict, sorted_rows


def render_csv(report, sort_by, row_limit):
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=ROW_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in sorted_rows(report.key_averages, sort_by, row_limit):
        w.writerow(row_dict(r))
    return out.getvalue()
