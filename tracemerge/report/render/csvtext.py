"""CSV: one table per file — by default one row per key-average row (the other sections
are in JSON); ``section`` picks another table: the critical path's segments, the wait
states, the step times, the stragglers or a failed job's post-mortem."""

import csv
import io
from dataclasses import asdict
from typing import Any, Dict, Iterable, Sequence

from tracemerge.errors import TracemergeError
from tracemerge.report.build import Report, row_dict, row_fields, sorted_rows
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat

SECTIONS = ("key_averages", "critical_path", "rpc_waits", "collective_waits", "step_times", "stragglers", "postmortem")


def render_csv(report: Report, sort_by: str, row_limit: int, section: str = "key_averages") -> str:
    if section not in SECTIONS:
        raise TracemergeError(f"--section {section!r}: choose from {', '.join(SECTIONS)}")
    if section == "key_averages":
        fields = row_fields(report.key_averages)
        return _csv(fields, (row_dict(r, fields) for r in sorted_rows(report.key_averages, sort_by, row_limit)))
    if section == "postmortem":
        # one row per finding: a rank that ended early, a call never completed, a collective never joined
        pm = report.postmortem
        found: list = [] if not pm else (
            [{"kind": "rank", "rank": e.rank, "what": e.how, "at_ns": e.at_ns, "known_from": e.known_from,
              "detail": e.blocked_in} for e in pm.ended]
            + [{"kind": "rpc", "rank": c.callee, "what": c.name, "at_ns": c.send_ns, "waited_ns": c.waited_ns,
                "detail": f"{c.rpc_id} from rank {c.caller}, {c.status}"} for c in pm.in_flight]
            + [{"kind": "collective", "rank": " ".join(map(str, u.missing)), "what": f"{u.op} {u.group}:{u.seq}",
                "at_ns": u.start_ns, "waited_ns": max(u.waiting.values(), default=0),
                "detail": "waiting: " + " ".join(map(str, u.waiting))} for u in pm.unjoined])
        return _csv(("kind", "rank", "what", "at_ns", "known_from", "waited_ns", "detail"), found)
    analysis = report.analysis
    if analysis is None:
        raise TracemergeError(f"--section {section}: the analyses are not done on a merged trace (they are "
                              "found from the rank files' own events and records); give the rank files")
    waits, steps = analysis.waits, analysis.steps
    assert waits is not None and steps is not None  # analyse() makes both
    if section == "critical_path":
        rows = ({"window": w.window, **{k: v for k, v in asdict(s).items()}} for w in analysis.critical_path
                for s in w.segments)
        return _csv(("window", "rank", "tid", "name", "kind", "start_ns", "end_ns"), rows)
    if section == "rpc_waits":
        return _csv(("name", "caller", "callee", "calls", "queueing_ns", "queueing_mean_ns", "callee_idle_ns",
                     "callee_idle_mean_ns"), map(asdict, waits.rpc))
    if section == "collective_waits":
        return _csv(("group", "op", "rank", "count", "wait_ns", "wait_mean_ns", "last_arrivals"),
                    map(asdict, waits.collectives))
    if section == "step_times":
        rows = ({"step": name, "rank": rank, "duration_ns": d, "z": z}
                for name, ds, zs in zip(steps.steps, steps.duration_ns, steps.z)
                for rank, d, z in zip(steps.ranks, ds, zs) if d is not None)
        return _csv(("step", "rank", "duration_ns", "z"), rows)
    rows = ({"rank": s.rank, "score": s.score, "slow_steps": s.slow_steps, "steps": s.steps, "excess_ns": s.excess_ns,
             "kinds": " ".join(f"{k}={v:.0f}" for k, v in s.kinds.items())} for s in steps.stragglers)
    return _csv(("rank", "score", "slow_steps", "steps", "excess_ns", "kinds"), rows)


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


FORMAT = ReportFormat("csv", render_csv, (".csv",), render_diff=render_diff_csv, sections=SECTIONS)
