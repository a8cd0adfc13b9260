"""The report's sections, one registry every report format walks.

A section is what one analysis adds to a report: what it shows (its ``view``: findings,
tables and figures, the primitives of :mod:`tracemerge.report.view` that every format
draws by their type), its JSON keys, the CSV tables ``report --section`` may pick, and the
tables ``tracemerge diff`` compares. Every renderer walks a registry (:data:`SECTIONS`
unless given another) in order — the ``lead`` sections (a failed job's post-mortem) first,
before the notes — and knows no section by its name, so a new analysis is one module
defining a :class:`Section` and one line in :data:`SECTIONS`.
"""

from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from tracemerge.analysis.critical_path import KINDS, UNTRACED, Window
from tracemerge.analysis.job_timeline import TIMELINE as RANK_TIMELINE
from tracemerge.analysis.postmortem import as_dict as postmortem_dict
from tracemerge.analysis.summary import Analysis, analysis_dict
from tracemerge.analysis.tables import (
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
from tracemerge.report.cells import callee_rows, collective_rows, key_footer, key_rows, rpc_rows
from tracemerge.report.diff import Compared, Metrics
from tracemerge.report.gpu import gpu_rows
from tracemerge.report.rpcstats import RpcKeyStats
from tracemerge.report.view import (
    FIXED,
    TORCH,
    Bars,
    Distribution,
    Figure,
    Findings,
    Heat,
    Latency,
    Span,
    Spans,
    SpanWindow,
    Strong,
    Table,
    View,
)

# a CSV table: (report, sort_by, row_limit) -> (its fields, its rows as dicts)
CsvRows = Callable[[Report, str, int], Tuple[Sequence[str], Iterable[Dict[str, Any]]]]
TRACE_AXIS = "ms from the trace's start (its first event, every rank on the reference clock)"


def _nothing(report: Report, sort_by: str, row_limit: int) -> View:
    return []


def _no_keys(report: Report, sort_by: str, row_limit: int) -> Dict[str, Any]:
    return {}


def _always(report: Report) -> bool:
    return True


@dataclass(frozen=True)
class Section:
    """One section of the report; registered by one line in :data:`SECTIONS`.

    ``present(report)``: whether the report has it (renderers skip it otherwise).
    ``view(report, sort_by, row_limit) -> [item]``: what it shows, each item a
    :mod:`~tracemerge.report.view` primitive (``Findings``, ``Table``, ``Figure``) of plain
    cells; HTML heads the section with ``title`` when it shows anything.
    ``data(report, sort_by, row_limit) -> {key: value}``: its keys in the JSON report.
    ``csv``: the tables it offers ``report --format csv --section NAME``, as ``(NAME, rows)``.
    ``lead``: said before everything else (and the notes). ``analysis``: made by the
    analyses (``report --analysis``): a CSV table of it makes ``report`` run them. ``notes_after``: the JSON
    report's ``notes`` follow this section's keys. ``diff``: the tables ``tracemerge diff``
    compares of it (:class:`~tracemerge.report.diff.Compared`). ``export``: the tables
    ``tracemerge export`` and ``tables.load`` make of it, as ``(NAME, "module:function")``,
    the function taking the job's :class:`~tracemerge.tables.job_tables.Products` and
    returning a pyarrow Table (named, not imported: the tables layer sits above this one).
    ``per_rank``: what it needs of each rank's events, as ``(NAME, "module:function")``
    products of :mod:`tracemerge.place.rank_pass` (a function of one rank's ``RankView``,
    run by the worker that holds the rank): ``report``, ``combine --report`` and ``export``
    make them in their one pass over the ranks, the report holds them as
    ``report.per_rank[NAME]`` and the export tables as ``Products.per_rank(NAME)``, both
    ``{rank: value}``.
    """

    name: str
    title: str
    present: Callable[[Report], bool] = _always
    view: Callable[[Report, str, int], View] = _nothing
    data: Callable[[Report, str, int], Dict[str, Any]] = _no_keys
    csv: Tuple[Tuple[str, CsvRows], ...] = ()
    lead: bool = False
    analysis: bool = False
    notes_after: bool = False
    diff: Tuple[Compared, ...] = ()
    export: Tuple[Tuple[str, str], ...] = ()
    per_rank: Tuple[Product, ...] = ()


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


def _key_view(report: Report, sort_by: str, row_limit: int) -> View:
    head, body, _ = key_rows(sorted_rows(report.key_averages, sort_by, row_limit), report.key_averages)
    return [Table("Key averages", head, body, layout=TORCH, footer=tuple(key_footer(report.key_averages)), code=True)]


RPC_KINDS = ("rpc_async#", "rpc_sync#", "remote#")


def _is_rpc_span(key: object) -> bool:
    return isinstance(key, str) and key.startswith(RPC_KINDS)


def _key_metrics(report: Report) -> Metrics:
    """Per key: ``cpu_time_total``, ``self_cpu_time_total`` and ``count``. RPC spans
    (``rpc_async#…``, ``…#remote``) are left out: their wall time is what the ``rpc`` rows
    measure from the records, on both clocks, and would count twice."""
    out: Metrics = {}
    for r in report.key_averages:
        if _is_rpc_span(r.key) or r.device_type != "CPU":
            continue  # device rows (a GPU trace's kernels) have no CPU time; their counts would join the op's
        key = r.key if not r.is_user_annotation else f"{r.key} (user annotation)"
        m = out.setdefault(key, {"cpu_time_total": 0.0, "self_cpu_time_total": 0.0, "count": 0.0})
        m["cpu_time_total"] += r.cpu_time_total
        m["self_cpu_time_total"] += r.self_cpu_time_total
        m["count"] += r.count
    return out


KEY_AVERAGES = Section(
    "key_averages", "Key averages",
    view=_key_view,
    data=lambda r, sort_by, limit: {
        "key_averages": [row_dict(x, row_fields(r.key_averages)) for x in sorted_rows(r.key_averages, sort_by, limit)],
        "group_by": r.group_by},
    csv=(("key_averages", _key_csv),),
    diff=(Compared("key_averages", _key_metrics, frozenset(("cpu_time_total", "self_cpu_time_total"))),),
    export=_made_by("key_averages"),
    per_rank=_products(("key_averages", "key_average_rows"), ("open_at_stop", "open_at_stop")))

# --- the ranks and their clocks (a figure) --------------------------------------------


def _clocks_view(report: Report, sort_by: str, row_limit: int) -> View:
    clocks = report.clocks
    offsets = Bars([f"rank {c['rank']} offset" for c in clocks], [c["offset_ns"] / 1000 for c in clocks], "µs",
                   errors=[(c.get("error_bound_ns") or 0) / 1000 for c in clocks])
    drifts = Bars([f"rank {c['rank']} drift" for c in clocks], [c["drift_ppm"] for c in clocks], "ppm")
    return [Figure((offsets, drifts), ("Aligned by ", Strong(report.align), f" to rank {report.reference}. Offset = "
                                       "the rank's clock minus the reference's, with its error bound when known."))]


CLOCKS = Section(
    "clocks", "Clocks",
    view=_clocks_view,
    data=lambda r, sort_by, limit: {"ranks": r.ranks, "reference": r.reference, "align": r.align,
                                    "alignment": r.clocks},
    export=_made_by("clocks"))

# --- RPC, collectives, GPU ----------------------------------------------------------


def _latency(keys: Sequence[RpcKeyStats]) -> Latency:
    """Per RPC key with times (a call seen from one side only has none): its end-to-end
    latency, its mean split into queueing, execution and the rest of the overhead
    (queueing is part of the overhead δ)."""
    rows = []
    for k in keys:
        if not k.e2e_us:
            continue
        e, queue = k.e2e_us, max(k.queue_us.get("mean", 0), 0)
        rows.append(Distribution(k.name, e["p50"], e["p95"], e["p99"], e["max"], e["mean"],
                                 (queue, k.exec_us["mean"], k.overhead_us["mean"] - queue)))
    return Latency(rows, ("queue", "exec", "other overhead"), "queue / exec / other", "latency, ms")


def _rpc_view(report: Report, sort_by: str, row_limit: int) -> View:
    if report.rpc is None:
        return []
    return [Figure((_latency(report.rpc.keys),)),
            Table("RPC latency", *rpc_rows(report.rpc), layout=FIXED),
            Table("RPC callees", *callee_rows(report.rpc), layout=FIXED, heading="Callees")]


def _rpc_metrics(report: Report) -> Metrics:
    """Per RPC key (kind, function, caller → callee): ``end-to-end``, ``execution``,
    ``queueing`` and ``transfer`` (the overhead δ without the queueing), each the per-call
    mean times the calls with both sides; and ``calls``."""
    out: Metrics = {}
    if report.rpc is None:
        return out
    for k in report.rpc.keys:
        n = k.complete
        m = {"calls": float(k.count)}
        if n and k.e2e_us:
            queue = k.queue_us.get("mean", 0.0) * n
            m.update({"end-to-end": k.e2e_us["mean"] * n, "execution": k.exec_us["mean"] * n, "queueing": queue,
                      "transfer": k.overhead_us["mean"] * n - queue})
        out[k.name] = m
    return out


def _callee_metrics(report: Report) -> Metrics:
    """Per callee rank: ``queueing`` and ``execution`` over every call it served."""
    if report.rpc is None:
        return {}
    return {f"{c.name} (rank {c.callee})": {"queueing": c.queue_mean_us * c.calls, "execution": c.exec_mean_us * c.calls}
            for c in report.rpc.callees}


RPC = Section(
    "rpc", "RPC latency", lambda r: r.rpc is not None,
    view=_rpc_view,
    data=lambda r, sort_by, limit: {"rpc": asdict(r.rpc) if r.rpc is not None else None},
    diff=(Compared("rpc", _rpc_metrics, frozenset(("end-to-end", "execution", "queueing", "transfer"))),
          Compared("callee", _callee_metrics, frozenset(("queueing", "execution")))),
    export=_made_by("rpcs", "rpc_latency", "rpc_callees"),
    per_rank=_products(("server_threads", "rpc_server_threads")))

COLLECTIVES = Section(
    "collectives", "Collectives", lambda r: bool(r.collectives),
    view=lambda r, sort_by, limit: [Table("Collectives", *collective_rows(r.collectives), layout=FIXED)],
    data=lambda r, sort_by, limit: {"collectives": [asdict(c) for c in r.collectives]},
    # the keys a report has always had come first, in their order: the notes stood here
    # before the GPU and the analyses were added
    notes_after=True,
    export=_made_by("collectives", "collective_stats"))

GPU = Section(
    "gpu", "GPU (per rank)", lambda r: bool(r.gpu),
    view=lambda r, sort_by, limit: [Table("GPU (per rank)", *gpu_rows(r.gpu), layout=FIXED)],
    # GPU traces only, so CPU-only reports stay as they were
    data=lambda r, sort_by, limit: {"gpu": [{**asdict(g), "overlap_share": g.overlap_share} for g in r.gpu]}
    if r.gpu else {},
    export=_made_by("gpu"), per_rank=_products(("gpu", "gpu_time")))

# --- the busy threads over the run (a figure) -----------------------------------------


def _timeline_view(report: Report, sort_by: str, row_limit: int) -> View:
    busy = report.timeline.get("busy") or {}
    if not busy:
        return [Figure(())]
    names = {r["rank"]: r["worker_name"] for r in report.ranks}
    peak = max([max(v) for v in busy.values() if v] + [1e-9])
    span_ms = report.timeline["bin_ns"] * max(len(v) for v in busy.values()) / 1e6
    heat = Heat([(f"rank {rank} {names.get(rank, '')}", values) for rank, values in sorted(busy.items())], peak,
                span_ms, TRACE_AXIS)
    return [Figure((heat,), (f"Darker = more threads busy in top-level host ops (peak {peak:.2f} on average per "
                             f"bin). One scale for the whole run: {span_ms:.3f} ms across.",))]


TIMELINE = Section("timeline", "Busy timeline", view=_timeline_view, per_rank=_products(("busy_spans", "busy_spans")))

# --- the analyses (report --analysis) -------------------------------------------------


def _has_analysis(report: Report) -> bool:
    return report.analysis is not None


UNTRACED_NOTE = (f"{UNTRACED}: time on the critical path on one of the job's own threads (a caller's, a "
                 "step's, a main thread) that no traced span covers: the thread was busy with work the "
                 "profiler did not record (Python between ops, or a wait on a lock or queue).")


def _path_figure(report: Report, windows: List[Window]) -> Figure:
    """Each window's critical path: a lane per rank, segments coloured by kind, its axis in
    ms from the trace's start (its first window's where the report has no timeline)."""
    t0_ns = report.timeline.get("start_ns")
    start = t0_ns if t0_ns is not None else min((w.start_ns for w in windows), default=0)
    drawn = []
    for w in windows:
        ranks = sorted({s.rank for s in w.segments})
        drawn.append(SpanWindow(w.window, w.start_ns, w.end_ns, [f"rank {rank}" for rank in ranks], [
            Span(ranks.index(s.rank), s.start_ns, s.end_ns, s.kind,
                 f"{s.kind}: {s.name} (rank {s.rank}, thread {s.tid}) {(s.end_ns - s.start_ns) / 1e6:.3f} ms")
            for s in w.segments]))
    untraced = any(seg.name == UNTRACED for w in windows for seg in w.segments)
    return Figure((Spans(drawn, KINDS, start, TRACE_AXIS),), (UNTRACED_NOTE,) if untraced else (),
                  "note untraced")


def _critical_path_view(report: Report, sort_by: str, row_limit: int) -> View:
    windows = report.analysis.critical_path if report.analysis is not None else []
    tables = [Table("Critical path by rank and kind", *path_totals(windows)),
              Table("Critical path: where the time went", *path_where(windows, row_limit)),
              Table("Critical path per window", *path_windows(windows, row_limit))] if windows else []
    return [_path_figure(report, windows), *tables]


def _wait_view(report: Report, sort_by: str, row_limit: int) -> View:
    waits = report.analysis.waits if report.analysis is not None else None
    if waits is None:
        return []
    return [Table(title, *table(waits)) for title, table, rows in (
        ("Wait states: RPC", rpc_waits, waits.rpc), ("Wait states: collectives", collective_waits, waits.collectives),
        ("Wait states per rank", rank_waits, waits.by_rank)) if rows]


def _step_view(report: Report, sort_by: str, row_limit: int) -> View:
    steps = report.analysis.steps if report.analysis is not None else None
    if steps is None or not (steps.steps or steps.stragglers):
        return []
    return ([Table("Step times per rank", *step_ranks(steps))] if steps.steps else []) + (
        [Table("Stragglers", *stragglers_table(steps))] if steps.stragglers else [])


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
    "critical_path", "Critical path", _has_analysis, _critical_path_view,
    _analysis_keys("critical_path", "critical_path_totals"),
    (("critical_path", _critical_path_csv),), analysis=True, export=_made_by("critical_path"),
    per_rank=(RANK_TIMELINE,))


def _waits(report: Report, section: str) -> Any:
    waits = _analysis(report, section).waits
    assert waits is not None  # analyse() makes it
    return waits


WAITS = Section(
    "waits", "Wait states", _has_analysis, _wait_view,
    _analysis_keys("wait_states"),
    (("rpc_waits", lambda r, sort_by, limit: (
        ("name", "caller", "callee", "calls", "queueing_ns", "queueing_mean_ns", "callee_idle_ns",
         "callee_idle_mean_ns"), map(asdict, _waits(r, "rpc_waits").rpc))),
     ("collective_waits", lambda r, sort_by, limit: (
         ("group", "op", "rank", "count", "wait_ns", "wait_mean_ns", "last_arrivals"),
         map(asdict, _waits(r, "collective_waits").collectives)))),
    analysis=True)


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
    _step_view,
    _analysis_keys("stragglers"),
    (("step_times", _step_times_csv), ("stragglers", _stragglers_csv)),
    analysis=True)

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


def _postmortem_view(report: Report, sort_by: str, row_limit: int) -> View:
    found, tables = postmortem_view(report)  # times in ms from the report's start
    return ([Findings("post-mortem", found)] if found else []) + [Table(title, *table) for title, table in tables]


POSTMORTEM = Section(
    "postmortem", "Post-mortem", lambda r: bool(r.postmortem),
    _postmortem_view,
    # a failed job's only, so the reports of others stay as they were
    lambda r, sort_by, limit: {"postmortem": postmortem_dict(r.postmortem)} if r.postmortem else {},
    (("postmortem", _postmortem_csv),),
    lead=True)


# Every section, in the order the formats show them (``lead`` ones first), JSON holds their
# keys and diff compares their tables (its rows of equal impact in this order); the first
# CSV table is ``report --format csv``'s default.
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


def registered(given: Optional[Sequence[Section]]) -> Sequence[Section]:
    """``given``, else the registry as it is when called (not when this module was imported:
    a caller, a test among them, may extend :data:`SECTIONS`)."""
    return SECTIONS if given is None else given


def shown(report: Report, sections: Optional[Sequence[Section]] = None) -> List[Section]:
    """The report's sections in the order the formats show them: the ``lead`` ones first."""
    sections = registered(sections)
    present = [s for s in sections if s.present(report)]
    return [s for s in present if s.lead] + [s for s in present if not s.lead]


def views(report: Report, sort_by: str, row_limit: int,
          sections: Optional[Sequence[Section]] = None) -> List[Tuple[Section, View]]:
    """Each section the report has, in the order the formats show them, with what it shows."""
    sections = registered(sections)
    return [(s, s.view(report, sort_by, row_limit)) for s in shown(report, sections)]


def per_rank_products(exported: bool = False, sections: Optional[Sequence[Section]] = None) -> Tuple[Product, ...]:
    """What the sections ask of each rank (their ``per_rank``), in registry order;
    ``exported``: of the sections with ``export`` tables only (what ``export`` reads)."""
    sections = registered(sections)
    return tuple(p for s in sections if s.export or not exported for p in s.per_rank)


def csv_tables(sections: Optional[Sequence[Section]] = None) -> Dict[str, CsvRows]:
    """``report --section``'s tables by name, the default first."""
    sections = registered(sections)
    return {name: rows for s in sections for name, rows in s.csv}


def compared(sections: Optional[Sequence[Section]] = None) -> List[Compared]:
    """The tables ``tracemerge diff`` compares, in registry order."""
    sections = registered(sections)
    return [c for s in sections for c in s.diff]


def report_dict(report: Report, sort_by: str = "cpu_time_total", row_limit: int = 0,
                sections: Optional[Sequence[Section]] = None) -> Dict[str, Any]:
    """The JSON report: every section's keys in registry order, the notes (their words)
    after those of the section with ``notes_after``, else last."""
    sections = registered(sections)
    doc: Dict[str, Any] = {}
    notes = [n.text for n in report.notes]
    for s in sections:
        doc.update(s.data(report, sort_by, row_limit))
        if s.notes_after:
            doc["notes"] = notes
    doc.setdefault("notes", notes)
    return doc
