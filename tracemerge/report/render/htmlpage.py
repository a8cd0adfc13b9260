"""``--html``: the report as one self-contained page, tables plus inline SVG plots.

No scripts, fonts or images are fetched: the page opens offline. Plots: each rank's clock
offset (with its error bound) and drift, each RPC key's latency distribution (p50, p95,
p99, max and the mean split into queueing, execution and the rest of the overhead), and each rank's busy
threads over the run. The run's time plots have an axis in ms from the trace's start (its first
event, on the reference clock); name columns are left-aligned, numbers right-aligned; the
diff page colours each change by its sign, which the text also carries.
"""

import math
import re
from html import escape
from typing import Any, Callable, Dict, List, Optional, Sequence

from tracemerge.analysis.critical_path import KINDS, UNTRACED, Window
from tracemerge.analysis.tables import diff_table
from tracemerge.report.build import Report, postmortem_view, sorted_rows
from tracemerge.report.cells import callee_rows, key_footer, key_rows, rpc_rows
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.rpcstats import RpcKeyStats
from tracemerge.report.sections import CRITICAL_PATH, Section, shown

STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.num,th.num{text-align:right}td.name,th.name{text-align:left}
th{background:#f3f3f3}.hint{background:#fff3cd;padding:8px;border:1px solid #e0c060}svg{display:block;margin:6px 0 20px}
.note{color:#444;max-width:60em}text{font:11px system-ui,sans-serif}
td.up{background:#fbe3de;color:#9b2c14}td.down{background:#dcf1e4;color:#17663a}
.up-key{background:#fbe3de;color:#9b2c14;padding:0 4px}.down-key{background:#dcf1e4;color:#17663a;padding:0 4px}"""
LABEL_CHAR_PX = 6.5   # the width of a character of an 11 px label, generously
COLORS = {"queue": "#e4572e", "exec": "#4c8bf5", "other overhead": "#a0a0a0"}


# a cell that reads as a number: a count, a time or share with its unit (1.234ms, 12.50%,
# +0.5 ms, 3/4 calls complete, rank:ms pairs), or "-" for none
_NUMBER = re.compile(r"^(?:-|[+\-\u2212]?\d[\d.,]*(?:e[+-]?\d+)?\s?(?:%|s|ms|us|µs|ns|ppm)?"
                     r"|\d+/\d+|(?:\d+:[\d.]+\s*)+|NaN)$")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) or _NUMBER.match(str(v).strip()) is not None


def _column_classes(head: Sequence[str], body: Sequence[Sequence[Any]]) -> List[str]:
    """Per column, "num" (right-aligned) when every cell reads as a number, else "name"
    (left-aligned: op names, RPC keys, groups, kinds)."""
    out = []
    for j in range(len(head)):
        cells = [r[j] for r in body if j < len(r)]
        out.append("num" if cells and all(_is_number(v) for v in cells) else "name")
    return out


def _table(head: Sequence[str], body: Sequence[Sequence[Any]],
           cell_class: Optional[Callable[[int, int], str]] = None) -> str:
    """A table, name columns left-aligned and number columns right-aligned; ``cell_class(i,
    j)`` adds a class to the cell of row i, column j (the diff's up/down)."""
    cols = _column_classes(head, body)

    def td(i: int, j: int, v: Any) -> str:
        extra = cell_class(i, j) if cell_class is not None else ""
        return f'<td class="{cols[j]}{" " + extra if extra else ""}">{escape(str(v))}</td>'

    rows = "".join("<tr>" + "".join(td(i, j, v) for j, v in enumerate(r)) + "</tr>" for i, r in enumerate(body))
    return ("<table><tr>" + "".join(f'<th class="{c}">{escape(h)}</th>' for h, c in zip(head, cols)) + "</tr>"
            + rows + "</table>")


def _ticks(lo: float, hi: float, most: int = 8) -> List[float]:
    """Round values from lo to hi, at most about ``most``: a step of 1, 2 or 5 times a power of ten."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    n = int(math.floor((hi - first) / step + 1e-9)) + 1
    return [first + k * step for k in range(n)]


def _tick_label(v: float, ticks: Sequence[float]) -> str:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else abs(v) or 1
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{decimals}f}"


AXIS_HEIGHT = 34


def _axis(x0: float, x1: float, lo_ms: float, hi_ms: float, y: float, title: str) -> str:
    """A time axis under a plot: the line from x0 to x1 px standing for lo_ms to hi_ms,
    ticks at round values, and its title. ``data-*`` give its scale to readers (tests)."""
    scale = (x1 - x0) / (hi_ms - lo_ms) if hi_ms > lo_ms else 0.0
    ticks = _ticks(lo_ms, hi_ms)
    parts = [f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="#444"/>']
    for t in ticks:
        x = x0 + (t - lo_ms) * scale
        parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + 4:.1f}" stroke="#444"/>'
                     f'<text class="tick" x="{x:.1f}" y="{y + 15:.1f}" text-anchor="middle" '
                     f'data-ms="{t:.6g}">{_tick_label(t, ticks)}</text>')
    parts.append(f'<text class="axis-title" x="{x0:.1f}" y="{y + 29:.1f}">{escape(title)}</text>')
    return (f'<g class="axis" data-x0="{x0:.1f}" data-x1="{x1:.1f}" data-lo-ms="{lo_ms:.6f}" '
            f'data-hi-ms="{hi_ms:.6f}">{"".join(parts)}</g>')


def _bars(labels: Sequence[str], values: Sequence[float], unit: str, width: int = 720,
          errors: Optional[Sequence[float]] = None) -> str:
    """Horizontal bars around a zero line (values may be negative)."""
    if not labels:
        return ""
    row, left = 22, 200
    span = max([abs(v) + (e or 0) for v, e in zip(values, errors or [0] * len(values))] + [1e-9])
    mid = left + (width - left) / 2
    scale = (width - left) / 2 / span
    parts = [f'<line x1="{mid}" y1="0" x2="{mid}" y2="{row * len(labels)}" stroke="#888"/>']
    for i, (label, v) in enumerate(zip(labels, values)):
        y = i * row
        x0, x1 = sorted((mid, mid + v * scale))
        parts.append(f'<text x="4" y="{y + 15}">{escape(label)}</text>')
        parts.append(f'<rect x="{x0:.1f}" y="{y + 4}" width="{max(x1 - x0, 1):.1f}" height="14" fill="#4c8bf5"/>')
        if errors and errors[i]:
            e = errors[i] * scale
            parts.append(f'<line x1="{mid + v * scale - e:.1f}" y1="{y + 11}" x2="{mid + v * scale + e:.1f}" '
                         f'y2="{y + 11}" stroke="#222" stroke-width="2"/>')
            x1 = max(x1, mid + v * scale + e)  # the value goes right of the error bar, not across it
        parts.append(f'<text x="{x1 + 4:.1f}" y="{y + 15}">{v:.3f} {unit}</text>')
    return f'<svg width="{width + 120}" height="{row * len(labels) + 4}">{"".join(parts)}</svg>'


def _latency(keys: Sequence[RpcKeyStats], width: int = 720) -> str:
    """Per RPC key: a p50-p99 box, max whisker, and the mean end-to-end latency split below it
    into queueing, execution and the rest of the overhead (queueing is part of the overhead δ)."""
    keys = [k for k in keys if k.e2e_us]  # calls seen from one side only have no times
    if not keys:
        return ""
    # the labels are whole (RPC keys that differ only at their end, like one function
    # called by several trainers, must read differently): the plot starts right of the longest
    row = 44
    left = max(260, int(12 + LABEL_CHAR_PX * max(len(k.name) for k in keys)))
    width += left - 260
    top = max([k.e2e_us.get("max", 0) for k in keys] + [1e-9])
    x = lambda us: left + us / top * (width - left)  # noqa: E731
    parts = []
    for i, k in enumerate(keys):
        y, e = i * row, k.e2e_us
        parts.append(f'<text x="4" y="{y + 14}">{escape(k.name)}</text>')
        parts.append(f'<line x1="{x(e["p50"]):.1f}" y1="{y + 9}" x2="{x(e["max"]):.1f}" y2="{y + 9}" stroke="#222"/>')
        parts.append(f'<rect x="{x(e["p50"]):.1f}" y="{y + 3}" width="{max(x(e["p99"]) - x(e["p50"]), 1):.1f}" '
                     f'height="12" fill="#cfe0fc" stroke="#4c8bf5"/>')
        parts.append(f'<line x1="{x(e["p95"]):.1f}" y1="{y + 3}" x2="{x(e["p95"]):.1f}" y2="{y + 15}" stroke="#4c8bf5"/>')
        parts.append(f'<text x="{x(e["max"]) + 4:.1f}" y="{y + 13}">p50 {e["p50"] / 1000:.2f} · p99 '
                     f'{e["p99"] / 1000:.2f} · max {e["max"] / 1000:.2f} ms</text>')
        at: float = left
        queue = max(k.queue_us.get("mean", 0), 0)
        split = (("queue", queue), ("exec", k.exec_us["mean"]), ("other overhead", k.overhead_us["mean"] - queue))
        for part, mean in split:
            w = max(mean, 0) / top * (width - left)
            parts.append(f'<rect x="{at:.1f}" y="{y + 20}" width="{w:.1f}" height="10" fill="{COLORS[part]}"/>')
            at += w
        parts.append(f'<text x="{at + 4:.1f}" y="{y + 30}">mean {e["mean"] / 1000:.2f} ms: queue / exec / other</text>')
    legend = "".join(f'<tspan fill="{c}">■ {n} </tspan>' for n, c in COLORS.items())
    parts.append(f'<text x="{left}" y="{row * len(keys) + 12}">{legend} (box: p50–p99, tick: p95, line: max)</text>')
    # a duration, not a time of the run: this axis starts at 0 ms of latency
    parts.append(_axis(left, width, 0.0, top / 1000, row * len(keys) + 22, "latency, ms"))
    return f'<svg width="{width + 420}" height="{row * len(keys) + 24 + AXIS_HEIGHT}">{"".join(parts)}</svg>'


def _timeline(timeline: Dict[str, Any], ranks: List[Dict[str, Any]], width: int = 840) -> str:
    busy = timeline.get("busy") or {}
    if not busy:
        return ""
    row, left = 24, 120
    peak = max([max(v) for v in busy.values() if v] + [1e-9])
    n = max(len(v) for v in busy.values())
    cell = (width - left) / n
    names = {r["rank"]: r["worker_name"] for r in ranks}
    parts = []
    for i, (rank, values) in enumerate(sorted(busy.items())):
        y = i * row
        parts.append(f'<text x="4" y="{y + 15}">rank {rank} {escape(str(names.get(rank, "")))}</text>')
        for j, v in enumerate(values):
            if v > 0:
                a = min(v / peak, 1.0)
                parts.append(f'<rect x="{left + j * cell:.1f}" y="{y + 3}" width="{cell + 0.3:.1f}" height="16" '
                             f'fill="#4c8bf5" fill-opacity="{0.1 + 0.9 * a:.2f}"/>')
    span_ms = timeline["bin_ns"] * n / 1e6
    parts.append(_axis(left, width, 0.0, span_ms, row * len(busy) + 2, TRACE_AXIS))
    return (f'<p>Darker = more threads busy in top-level host ops (peak {peak:.2f} on average per bin). '
            f'One scale for the whole run: {span_ms:.3f} ms across.</p>'
            f'<svg width="{width + 20}" height="{row * len(busy) + 4 + AXIS_HEIGHT}">{"".join(parts)}</svg>')


TRACE_AXIS = "ms from the trace's start (its first event, every rank on the reference clock)"
UNTRACED_NOTE = (f"{UNTRACED}: time on the critical path on one of the job's own threads (a caller's, a "
                 "step's, a main thread) that no traced span covers: the thread was busy with work the "
                 "profiler did not record (Python between ops, or a wait on a lock or queue).")


PATH_COLORS = dict(zip(KINDS, ("#4c8bf5", "#a0a0a0", "#e4572e", "#2ca58d", "#f4b942")))
IDLE_COLOR = "#dddddd"   # a window that starts with nothing running (critical_path.IDLE)
PATH_WINDOWS = 6   # the longest windows drawn


def _path(windows: List[Window], t0_ns: int, width: int = 840) -> str:
    """The longest windows' critical paths: one row per rank, segments coloured by kind;
    each window on its own scale, its axis in ms from the trace's start (``t0_ns``)."""
    drawn = sorted(sorted(windows, key=lambda w: w.start_ns - w.end_ns)[:PATH_WINDOWS], key=lambda w: w.start_ns)
    if not drawn:
        return ""
    row, left, out = 18, 120, []
    for w in drawn:
        ranks = sorted({s.rank for s in w.segments})
        span = max(w.end_ns - w.start_ns, 1)
        parts = []
        for i, rank in enumerate(ranks):
            parts.append(f'<text x="4" y="{i * row + 13}">rank {rank}</text>')
        for s in w.segments:
            x = left + (s.start_ns - w.start_ns) / span * (width - left)
            dx = max((s.end_ns - s.start_ns) / span * (width - left), 0.5)
            parts.append(f'<rect x="{x:.1f}" y="{ranks.index(s.rank) * row + 2}" width="{dx:.1f}" height="14" '
                         f'fill="{PATH_COLORS.get(s.kind, IDLE_COLOR)}"><title>{escape(s.kind)}: {escape(str(s.name))} (rank '
                         f'{s.rank}, thread {escape(str(s.tid))}) {(s.end_ns - s.start_ns) / 1e6:.3f} ms</title></rect>')
        parts.append(_axis(left, width, (w.start_ns - t0_ns) / 1e6, (w.end_ns - t0_ns) / 1e6, row * len(ranks) + 2,
                           TRACE_AXIS))
        out.append(f"<h3>{escape(w.window)} · {span / 1e6:.3f} ms</h3>"
                   f'<svg width="{width + 20}" height="{row * len(ranks) + 4 + AXIS_HEIGHT}">{"".join(parts)}</svg>')
    legend = " ".join(f'<span style="color:{c}">■</span> {escape(k)}' for k, c in PATH_COLORS.items())
    more = f" (the {len(drawn)} longest of {len(windows)} windows)" if len(drawn) < len(windows) else ""
    scale = ('<p class="note">Scales: each window below is drawn on its own scale, from its start to its end, '
             "so a short window fills the width as a long one does; its axis reads ms from the trace's start, "
             "as the busy timeline's does (which spans the whole run on one scale).</p>")
    return f"<p>{legend}{more}; hover a segment for its name.</p>" + scale + "".join(out)


def _critical_path(report: Report, sort_by: str, row_limit: int) -> str:
    assert report.analysis is not None  # the section is present with the analyses only
    windows = report.analysis.critical_path
    t0_ns = report.timeline.get("start_ns")
    start = t0_ns if t0_ns is not None else min((w.start_ns for w in windows), default=0)
    parts = ["<h2>Critical path</h2>"]
    if any(seg.name == UNTRACED for w in windows for seg in w.segments):
        parts.append(f'<p class="note untraced">{escape(UNTRACED_NOTE)}</p>')
    parts.append(_path(windows, start))
    for title, table in CRITICAL_PATH.tables(report, row_limit):
        parts.append(f"<h3>{escape(title)}</h3>" + _table(*table))
    return "".join(parts)


DIFF_SIGNED = ("Delta", "Relative")   # the diff's columns coloured by the sign of the change
DIFF_LEGEND = ('<p><span class="up-key">+ up</span> after − before &gt; 0: slower, or more calls · '
               '<span class="down-key">− down</span> &lt; 0: faster, or fewer. The sign is in the text too.</p>')


def render_diff_html(diff: Diff, row_limit: int = 100) -> str:
    head, body = diff_table(diff, row_limit)
    rows = diff.rows[:len(body)]   # diff_table keeps the rows' order
    signed = {head.index(c) for c in DIFF_SIGNED}

    def sign(i: int, j: int) -> str:
        d = rows[i].delta
        return "" if j not in signed or d == 0 else ("up" if d > 0 else "down")

    page = [f"<h1>tracemerge diff</h1><p>before: {escape(' '.join(diff.before))}<br>after: "
            f"{escape(' '.join(diff.after))}</p>"]
    page += [f'<p class="hint">{escape(n)}</p>' for n in diff.notes]
    page.append(DIFF_LEGEND + _table(head, body, sign))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>tracemerge diff</title>'
            f'<style>{STYLE}</style></head><body>{"".join(page)}</body></html>\n')


def render_html(report: Report, sort_by: str = "cpu_time_total", row_limit: int = 100) -> str:
    sections = shown(report)
    lead = [s for s in sections if s.lead]
    # the page ends with the key averages, its longest table, after the plots
    rest = sorted((s for s in sections if not s.lead), key=lambda s: s.name == "key_averages")
    body = ["<h1>tracemerge report</h1>"]
    body += [_section(s, report, sort_by, row_limit) for s in lead]
    body += [f'<p class="hint">{escape(n)}</p>' for n in report.notes]
    body += [_section(s, report, sort_by, row_limit) for s in rest]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>tracemerge report</title>'
            f'<style>{STYLE}</style></head><body>{"".join(body)}</body></html>\n')


def _section(section: Section, report: Report, sort_by: str, row_limit: int) -> str:
    """A section as this page draws it: by its own hand (plots), else its tables under its title."""
    own = OWN.get(section.name)
    if own is not None:
        return own(report, sort_by, row_limit)
    tables = section.tables(report, row_limit)
    if not tables:
        return ""
    return f"<h2>{escape(section.title)}</h2>" + "".join(
        ("" if title == section.title else f"<h3>{escape(title)}</h3>") + _table(*table) for title, table in tables)


def _postmortem(report: Report, sort_by: str, row_limit: int) -> str:
    found, tables = postmortem_view(report)  # a failed job: said first
    if not found:
        return ""
    return ('<h2 id="postmortem">Post-mortem</h2><ul>' + "".join(f"<li>{escape(x)}</li>" for x in found)
            + "</ul>" + "".join(f"<h3>{escape(t)}</h3>" + _table(*table) for t, table in tables))


def _clocks(report: Report, sort_by: str, row_limit: int) -> str:
    clocks = report.clocks
    return (f"<h2>Clocks</h2><p>Aligned by <b>{escape(report.align)}</b> to rank {report.reference}. "
            "Offset = the rank's clock minus the reference's, with its error bound when known.</p>"
            + _bars([f"rank {c['rank']} offset" for c in clocks], [c["offset_ns"] / 1000 for c in clocks], "µs",
                    errors=[(c.get("error_bound_ns") or 0) / 1000 for c in clocks])
            + _bars([f"rank {c['rank']} drift" for c in clocks], [c["drift_ppm"] for c in clocks], "ppm"))


def _rpc(report: Report, sort_by: str, row_limit: int) -> str:
    assert report.rpc is not None  # the section is present with RPC records only
    return ("<h2>RPC latency</h2>" + _latency(report.rpc.keys)
            + _table(*rpc_rows(report.rpc)) + "<h3>Callees</h3>" + _table(*callee_rows(report.rpc)))


def _busy_timeline(report: Report, sort_by: str, row_limit: int) -> str:
    return "<h2>Busy timeline</h2>" + _timeline(report.timeline, report.ranks)


def _key_averages(report: Report, sort_by: str, row_limit: int) -> str:
    head, table, _ = key_rows(sorted_rows(report.key_averages, sort_by, row_limit), report.key_averages)
    footer = "<br>".join(key_footer(report.key_averages))
    return f"<h2>Key averages</h2>{_table(head, table)}<p>{footer}</p>"


# the sections this page draws by its own hand (plots, torch's key averages); the others
# are their titled tables
OWN: Dict[str, Callable[[Report, str, int], str]] = {
    "postmortem": _postmortem, "clocks": _clocks, "rpc": _rpc, "timeline": _busy_timeline,
    "critical_path": _critical_path, "key_averages": _key_averages}


FORMAT = ReportFormat("html", render_html, (), option="--html", render_diff=render_diff_html)
