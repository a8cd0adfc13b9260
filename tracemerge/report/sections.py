"""The report's sections, one registry every report format walks.

A section is what one analysis adds to a report: its titled tables (the text table,
Markdown and HTML lay them out), its JSON keys, and the CSV tables ``report --section``
may pick. Every renderer walks :data:`SECTIONS` in order — the ``lead`` sections (a failed
job's post-mortem) first, before the notes — so a new analysis is one module defining a
:class:`Section` and one line in :data:`SECTIONS`; a renderer lays out by its own hand only
the sections it draws more than tables for (the key averages' torch layout, HTML's plots).
"""

from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple

from tracemerge.analysis.job_timeline import TIMELINE as RANK_TIMELINE
from tracemerge.analysis.postmortem import as_dict as postmortem_dict
from tracemerge.analysis.summary import Analysis, analysis_dict
from tracemerge.analysis.tables import (
    Table,
    collective_waits,
    path_totals,
    path_where,
    path_windows,
    rank_waits,
    rpc_waits,
    step_ranks,
    stragglers_table,
)
from tracemerge.errors import TracemergeError
from tracemerge.place.rank_pass import Product
from tracemerge.report.build import Report, postmortem_view, row_dict, row_fields, sorted_rows
from tracemerge.report.cells import callee_rows, collective_rows, rpc_rows
from tracemerge.report.diff_metrics import Metrics, callee_metrics, key_metrics, rpc_metrics
from tracemerge.report.gpu import gpu_rows

Titled = List[Tuple[str, Table]]
# a CSV table: (report, sort_by, row_limit) -> (its fields, its rows as dicts)
CsvRows = Callable[[Report, str, int], Tuple[Sequence[str], Iterable[Dict[str, Any]]]]


def _none(report: Report, row_limit: int) -> Titled:
    return []


def _no_keys(report: Report, sort_by: str, row_limit: int) -> Dict[str, Any]:
    return {}


def _always(report: Report) -> bool:
    return True


@dataclass(frozen=True)
class Section:
    """One section of the report; registered by one line in :data:`SECTIONS`.

    ``present(report)``: whether the report has it (renderers skip it otherwise).
    ``tables(report, row_limit) -> [(title, (head, body))]``: its tables, cells plain
    values. ``data(report, sort_by, row_limit) -> {key: value}``: its keys in the JSON
    report. ``csv``: the tables it offers ``report --format csv --section NAME``, as
    ``(NAME, rows)``. ``lead``: said before everything else (and the notes).
    ``fixed_columns``: the text table lays its tables out in torch's fixed-width columns
    (else sized to their cells). HTML heads the section with ``title``. ``export``: the
    tables ``tracemerge export`` and ``tables.load`` make of it, as ``(NAME, "module:function")``,
    the function taking the job's :class:`~tracemerge.tables.job_tables.Products` and
    returning a pyarrow Table (named, not imported: the tables layer sits above this one).
    ``per_rank``: what it needs of each rank's events, as ``(NAME, "module:function")``
    products of :mod:`tracemerge.place.rank_pass` (a function of one rank's ``RankView``,
    run by the worker that holds the rank): ``report``, ``combine --report`` and ``export``
    make them in their one pass over the ranks, the report holds them as
    ``report.per_rank[NAME]`` and the export tables as ``Products.per_rank(NAME)``, both
    ``{rank: value}``. ``diff``: its rows of ``tracemerge diff``, as ``(NAME, metrics)``,
    ``metrics(report) -> {key: {metric: value}}`` (times in µs).
    """

    name: str
    title: str
    present: Callable[[Report], bool] = _always
    tables: Callable[[Report, int], Titled] = _none
    data: Callable[[Report, str, int], Dict[str, Any]] = _no_keys
    csv: Tuple[Tuple[str, CsvRows], ...] = ()
    lead: bool = False
    fixed_columns: bool = False
    export: Tuple[Tuple[str, str], ...] = ()
    per_rank: Tuple[Product, ...] = ()
    diff: Tuple[Tuple[str, Callable[[Report], Metrics]], ...] = ()


def _made_by(*names: str) -> Tuple[Tuple[str, str], ...]:
    """``export`` entries for tables of :mod:`tracemerge.tables.job_tables`, ``NAME_table`` each."""
    return tuple((name, f"tracemerge.tables.job_tables:{name}_table") for name in names)


def _products(*names: Tuple[str, str]) -> Tuple[Product, ...]:
    """``per_rank`` entries for products of :mod:`tracemerge.report.rank_products`, ``(NAME, function)`` each."""
    return tuple((name, f"tracemerge.report.rank_products:{function}") for name, function in names)


def _analysis(report: Report, section: str) -> Analysis:
    """The report's analyses, for a CSV table of them; an error when it has none."""
    if report.analysis is None:
        raise TracemergeError(f"--section {section}: the analyses are not done on a merged trace (they are "
                              "found from the rank files' own events and records); give the rank files")
    return report.analysis


# --- key averages -------------------------------------------------------------------

def _key_csv(report: Report, sort_by: str, row_limit: int) -> Tuple[Sequence[str], Iterable[Dict[str, Any]]]:
    fields = row_fields(report.key_averages)
    return fields, (row_dict(r, fields) for r in sorted_rows(report.key_averages, sort_by, row_limit))


KEY_AVERAGES = Section(
    "key_averages", "Key averages",
    data=lambda r, sort_by, limit: {
        "key_averages": [row_dict(x, row_fields(r.key_averages)) for x in sorted_rows(r.key_averages, sort_by, limit)],
        "group_by": r.group_by},
    csv=(("key_averages", _key_csv),),
    export=_made_by("key_averages"), diff=(("key_averages", key_metrics),),
    per_rank=_products(("key_averages", "key_average_rows"), ("open_at_stop", "open_at_stop")))

# --- the ranks and their clocks (HTML draws them) -------------------------------------

CLOCKS = Section(
    "clocks", "Clocks",
    data=lambda r, sort_by, limit: {"ranks": r.ranks, "reference": r.reference, "align": r.align,
                                    "alignment": r.clocks},
    export=_made_by("clocks"))

# --- RPC, collectives, GPU ----------------------------------------------------------

RPC = Section(
    "rpc", "RPC latency", lambda r: r.rpc is not None,
    lambda r, limit: [("RPC latency", rpc_rows(r.rpc)), ("RPC callees", callee_rows(r.rpc))] if r.rpc else [],
    lambda r, sort_by, limit: {"rpc": asdict(r.rpc) if r.rpc is not None else None},
    fixed_columns=True, export=_made_by("rpcs", "rpc_latency", "rpc_callees"),
    diff=(("rpc", rpc_metrics), ("callee", callee_metrics)),
    per_rank=_products(("server_threads", "rpc_server_threads")))

COLLECTIVES = Section(
    "collectives", "Collectives", lambda r: bool(r.collectives),
    lambda r, limit: [("Collectives", collective_rows(r.collectives))],
    lambda r, sort_by, limit: {"collectives": [asdict(c) for c in r.collectives]},
    fixed_columns=True, export=_made_by("collectives", "collective_stats"))

GPU = Section(
    "gpu", "GPU (per rank)", lambda r: bool(r.gpu),
    lambda r, limit: [("GPU (per rank)", gpu_rows(r.gpu))],
    # GPU traces only, so CPU-only reports stay as they were
    lambda r, sort_by, limit: {"gpu": [{**asdict(g), "overlap_share": g.overlap_share} for g in r.gpu]} if r.gpu
    else {},
    fixed_columns=True, export=_made_by("gpu"), per_rank=_products(("gpu", "gpu_time")))

# --- the busy threads over the run (HTML draws it) ------------------------------------

TIMELINE = Section("timeline", "Busy timeline", per_rank=_products(("busy_spans", "busy_spans")))

# --- the analyses (report --analysis) -------------------------------------------------


def _has_analysis(report: Report) -> bool:
    return report.analysis is not None


def _critical_path_tables(report: Report, row_limit: int) -> Titled:
    windows = report.analysis.critical_path if report.analysis is not None else []
    if not windows:
        return []
    return [("Critical path by rank and kind", path_totals(windows)),
            ("Critical path: where the time went", path_where(windows, row_limit)),
            ("Critical path per window", path_windows(windows, row_limit))]


def _wait_tables(report: Report, row_limit: int) -> Titled:
    waits = report.analysis.waits if report.analysis is not None else None
    if waits is None:
        return []
    return [(title, table(waits)) for title, table, rows in (
        ("Wait states: RPC", rpc_waits, waits.rpc), ("Wait states: collectives", collective_waits, waits.collectives),
        ("Wait states per rank", rank_waits, waits.by_rank)) if rows]


def _step_tables(report: Report, row_limit: int) -> Titled:
    steps = report.analysis.steps if report.analysis is not None else None
    if steps is None or not (steps.steps or steps.stragglers):
        return []
    return ([("Step times per rank", step_ranks(steps))] if steps.steps else []) + (
        [("Stragglers", stragglers_table(steps))] if steps.stragglers else [])


def _analysis_keys(*keys: str) -> Callable[[Report, str, int], Dict[str, Any]]:
    """The JSON keys ``keys`` of the analyses (:func:`~tracemerge.analysis.summary.analysis_dict`)."""
    def data(report: Report, sort_by: str, row_limit: int) -> Dict[str, Any]:
        if report.analysis is None:
            return {}
        found = analysis_dict(report.analysis)
        return {k: found[k] for k in keys}
    return data


def _critical_path_csv(report: Report, sort_by: str, row_limit: int) -> Tuple[Sequence[str], Iterable[Dict[str, Any]]]:
    windows = _analysis(report, "critical_path").critical_path
    return (("window", "rank", "tid", "name", "kind", "start_ns", "end_ns"),
            ({"window": w.window, **asdict(s)} for w in windows for s in w.segments))


CRITICAL_PATH = Section(
    "critical_path", "Critical path", _has_analysis, _critical_path_tables,
    _analysis_keys("critical_path", "critical_path_totals"),
    (("critical_path", _critical_path_csv),), export=_made_by("critical_path"),
    per_rank=(RANK_TIMELINE,))


def _waits(report: Report, section: str) -> Any:
    waits = _analysis(report, section).waits
    assert waits is not None  # analyse() makes it
    return waits


WAITS = Section(
    "waits", "Wait states", _has_analysis, _wait_tables,
    _analysis_keys("wait_states"),
    (("rpc_waits", lambda r, sort_by, limit: (
        ("name", "caller", "callee", "calls", "queueing_ns", "queueing_mean_ns", "callee_idle_ns",
         "callee_idle_mean_ns"), map(asdict, _waits(r, "rpc_waits").rpc))),
     ("collective_waits", lambda r, sort_by, limit: (
         ("group", "op", "rank", "count", "wait_ns", "wait_mean_ns", "last_arrivals"),
         map(asdict, _waits(r, "collective_waits").collectives)))))


def _steps(report: Report, section: str) -> Any:
    steps = _analysis(report, section).steps
    assert steps is not None  # analyse() makes it
    return steps


def _step_times_csv(report: Report, sort_by: str, row_limit: int) -> Tuple[Sequence[str], Iterable[Dict[str, Any]]]:
    steps = _steps(report, "step_times")
    return (("step", "rank", "duration_ns", "z"),
            ({"step": name, "rank": rank, "duration_ns": d, "z": z}
             for name, ds, zs in zip(steps.steps, steps.duration_ns, steps.z)
             for rank, d, z in zip(steps.ranks, ds, zs) if d is not None))


def _stragglers_csv(report: Report, sort_by: str, row_limit: int) -> Tuple[Sequence[str], Iterable[Dict[str, Any]]]:
    return (("rank", "by", "score", "slow_steps", "steps", "excess_ns", "waits_caused_ns", "kinds", "late_work"),
            ({"rank": s.rank, "by": s.by, "score": s.score, "slow_steps": s.slow_steps, "steps": s.steps,
              "excess_ns": s.excess_ns, "waits_caused_ns": s.waits_caused_ns,
              "kinds": " ".join(f"{k}={v:.0f}" for k, v in s.kinds.items()),
              "late_work": " ".join(f"{k}={v:.0f}" for k, v in s.late_work.items())}
             for s in _steps(report, "stragglers").stragglers))


STRAGGLERS = Section(
    "stragglers", "Step times", _has_analysis,
    _step_tables,
    _analysis_keys("stragglers"),
    (("step_times", _step_times_csv), ("stragglers", _stragglers_csv)))

# --- a failed job's post-mortem: said first -------------------------------------------


def _postmortem_csv(report: Report, sort_by: str, row_limit: int) -> Tuple[Sequence[str], Iterable[Dict[str, Any]]]:
    # one row per finding: a rank that ended early, a call never completed, a collective never
    # joined, a collective whose ranks' Flight Recorder entries disagree
    pm = report.postmortem
    found: List[Dict[str, Any]] = [] if not pm else (
        [{"kind": "rank", "rank": e.rank, "what": e.how, "at_ns": e.at_ns, "known_from": e.known_from,
          "detail": e.blocked_in} for e in pm.ended]
        + [{"kind": "rpc", "rank": c.callee, "what": c.name, "at_ns": c.send_ns, "waited_ns": c.waited_ns,
            "detail": f"{c.rpc_id} from rank {c.caller}, {c.status}"} for c in pm.in_flight]
        + [{"kind": "collective", "rank": " ".join(map(str, u.missing)), "what": f"{u.op} {u.group}:{u.seq}",
            "at_ns": u.start_ns, "waited_ns": max(u.waiting.values(), default=0),
            "detail": "waiting: " + " ".join(map(str, u.waiting))} for u in pm.unjoined]
        + [{"kind": "mismatch", "rank": m.rank, "what": f"{m.op} {m.group}:{m.seq}", "at_ns": None,
            "known_from": "Flight Recorder", "detail": f"{m.kind}: {m.culprit}" if m.culprit else m.kind}
           for m in pm.mismatches])
    return ("kind", "rank", "what", "at_ns", "known_from", "waited_ns", "detail"), found


POSTMORTEM = Section(
    "postmortem", "Post-mortem", lambda r: bool(r.postmortem),
    lambda r, limit: postmortem_view(r)[1],
    # a failed job's only, so the reports of others stay as they were
    lambda r, sort_by, limit: {"postmortem": postmortem_dict(r.postmortem)} if r.postmortem else {},
    (("postmortem", _postmortem_csv),),
    lead=True)


# Every section, in the order the formats show them (``lead`` ones first) and JSON holds
# their keys; the first CSV table is ``report --format csv``'s default.
SECTIONS: Tuple[Section, ...] = (
    KEY_AVERAGES,
    CLOCKS,
    RPC,
    COLLECTIVES,
    GPU,
    TIMELINE,
    CRITICAL_PATH,
    WAITS,
    STRAGGLERS,
    POSTMORTEM,
)


def shown(report: Report) -> List[Section]:
    """The report's sections in the order the formats show them: the ``lead`` ones first."""
    present = [s for s in SECTIONS if s.present(report)]
    return [s for s in present if s.lead] + [s for s in present if not s.lead]


def per_rank_products(exported: bool = False) -> Tuple[Product, ...]:
    """What the sections ask of each rank (their ``per_rank``), in registry order;
    ``exported``: of the sections with ``export`` tables only (what ``export`` reads)."""
    return tuple(p for s in SECTIONS if s.export or not exported for p in s.per_rank)


def diff_tables() -> Dict[str, Callable[[Report], Metrics]]:
    """``tracemerge diff``'s tables by name (the sections' ``diff``), in registry order."""
    return {name: metrics for s in SECTIONS for name, metrics in s.diff}


def csv_tables() -> Dict[str, CsvRows]:
    """``report --section``'s tables by name, the default first."""
    return {name: rows for s in SECTIONS for name, rows in s.csv}


def report_dict(report: Report, sort_by: str = "cpu_time_total", row_limit: int = 0) -> Dict[str, Any]:
    """The JSON report: every section's keys in registry order, the notes after the
    collectives' (where they were before the GPU and the analyses were added: the keys a
    report has always had come first, in their order)."""
    doc: Dict[str, Any] = {}
    for s in SECTIONS:
        doc.update(s.data(report, sort_by, row_limit))
        if s.name == "collectives":
            doc["notes"] = report.notes
    doc.setdefault("notes", report.notes)
    return doc
