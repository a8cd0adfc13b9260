"""``--html``: the report as one self-contained page, tables plus inline SVG plots.

No scripts, fonts or images are fetched: the page opens offline. Each section the report
has is drawn from its view (:mod:`tracemerge.report.view`) under its title: its findings
as a list, its tables, its figures as SVG — bars from a zero line with error bars (the
clocks' offsets and drifts), distributions with their mean split (the RPC keys' latency),
rows of shaded bins (the busy threads over the run), windows of coloured segments (the
critical path). The lead sections come first, then the notes, then the others, torch's
table (the key averages) last. The run's time plots have an axis in ms from the trace's
start (its first event, on the reference clock); name columns are left-aligned, numbers
right-aligned; the diff page colours each change by its sign, which the text also carries.
"""

import math
import re
from html import escape
from typing import Any, Callable, List, Optional, Sequence

from tracemerge.analysis.tables import diff_table
from tracemerge.report.build import Report
from tracemerge.report.diff import Diff
from tracemerge.report.render.base import ReportFormat
from tracemerge.report.sections import Section, views
from tracemerge.report.view import (
    TORCH,
    Bars,
    Figure,
    Findings,
    Heat,
    Item,
    Latency,
    Plot,
    Spans,
    Strong,
    Table,
    View,
)

STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.num,th.num{text-align:right}td.name,th.name{text-align:left}
th{background:#f3f3f3}.hint{background:#fff3cd;padding:8px;border:1px solid #e0c060}svg{display:block;margin:6px 0 20px}
.note{color:#444;max-width:60em}text{font:11px system-ui,sans-serif}
td.up{background:#fbe3de;color:#9b2c14}td.down{background:#dcf1e4;color:#17663a}
.up-key{background:#fbe3de;color:#9b2c14;padding:0 4px}.down-key{background:#dcf1e4;color:#17663a;padding:0 4px}"""
LABEL_CHAR_PX = 6.5   # the width of a character of an 11 px label, generously
PART_COLORS = ("#e4572e", "#4c8bf5", "#a0a0a0")   # a distribution's mean split, its parts in order


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


def _bars(plot: Bars, width: int = 720) -> str:
    """Horizontal bars around a zero line (values may be negative)."""
    labels, values, unit, errors = plot.labels, plot.values, plot.unit, plot.errors
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


def _latency(plot: Latency, width: int = 720) -> str:
    """Per row: a p50-p99 box, max whisker, and the mean split below it into its parts."""
    keys = plot.rows
    if not keys:
        return ""
    # the labels are whole (RPC keys that differ only at their end, like one function
    # called by several trainers, must read differently): the plot starts right of the longest
    row = 44
    left = max(260, int(12 + LABEL_CHAR_PX * max(len(k.label) for k in keys)))
    width += left - 260
    top = max([k.max for k in keys] + [1e-9])
    x = lambda us: left + us / top * (width - left)  # noqa: E731
    colors = dict(zip(plot.parts, PART_COLORS))
    parts = []
    for i, k in enumerate(keys):
        y = i * row
        parts.append(f'<text x="4" y="{y + 14}">{escape(k.label)}</text>')
        parts.append(f'<line x1="{x(k.p50):.1f}" y1="{y + 9}" x2="{x(k.max):.1f}" y2="{y + 9}" stroke="#222"/>')
        parts.append(f'<rect x="{x(k.p50):.1f}" y="{y + 3}" width="{max(x(k.p99) - x(k.p50), 1):.1f}" '
                     f'height="12" fill="#cfe0fc" stroke="#4c8bf5"/>')
        parts.append(f'<line x1="{x(k.p95):.1f}" y1="{y + 3}" x2="{x(k.p95):.1f}" y2="{y + 15}" stroke="#4c8bf5"/>')
        parts.append(f'<text x="{x(k.max) + 4:.1f}" y="{y + 13}">p50 {k.p50 / 1000:.2f} · p99 '
                     f'{k.p99 / 1000:.2f} · max {k.max / 1000:.2f} ms</text>')
        at: float = left
        for part, mean in zip(plot.parts, k.parts):
            w = max(mean, 0) / top * (width - left)
            parts.append(f'<rect x="{at:.1f}" y="{y + 20}" width="{w:.1f}" height="10" fill="{colors[part]}"/>')
            at += w
        parts.append(f'<text x="{at + 4:.1f}" y="{y + 30}">mean {k.mean / 1000:.2f} ms: {escape(plot.split)}</text>')
    legend = "".join(f'<tspan fill="{c}">■ {escape(n)} </tspan>' for n, c in colors.items())
    parts.append(f'<text x="{left}" y="{row * len(keys) + 12}">{legend} (box: p50–p99, tick: p95, line: max)</text>')
    # a duration, not a time of the run: this axis starts at 0
    parts.append(_axis(left, width, 0.0, top / 1000, row * len(keys) + 22, plot.axis))
    return f'<svg width="{width + 420}" height="{row * len(keys) + 24 + AXIS_HEIGHT}">{"".join(parts)}</svg>'


def _heat(plot: Heat, width: int = 840) -> str:
    if not plot.rows:
        return ""
    row, left = 24, 120
    n = max(len(values) for _, values in plot.rows)
    cell = (width - left) / n
    parts = []
    for i, (label, values) in enumerate(plot.rows):
        y = i * row
        parts.append(f'<text x="4" y="{y + 15}">{escape(label)}</text>')
        for j, v in enumerate(values):
            if v > 0:
                a = min(v / plot.peak, 1.0)
                parts.append(f'<rect x="{left + j * cell:.1f}" y="{y + 3}" width="{cell + 0.3:.1f}" height="16" '
                             f'fill="#4c8bf5" fill-opacity="{0.1 + 0.9 * a:.2f}"/>')
    parts.append(_axis(left, width, 0.0, plot.span_ms, row * len(plot.rows) + 2, plot.axis))
    return f'<svg width="{width + 20}" height="{row * len(plot.rows) + 4 + AXIS_HEIGHT}">{"".join(parts)}</svg>'


SPAN_COLORS = ("#4c8bf5", "#a0a0a0", "#e4572e", "#2ca58d", "#f4b942")   # the kinds', in order
OTHER_COLOR = "#dddddd"   # a kind not in the legend (a critical path's idle start)
SPAN_WINDOWS = 6   # the longest windows drawn


def _spans(plot: Spans, width: int = 840) -> str:
    """The longest windows: one row per lane, segments coloured by kind; each window on its
    own scale, its axis in ms from ``t0_ns``."""
    windows = plot.windows
    drawn = sorted(sorted(windows, key=lambda w: w.start_ns - w.end_ns)[:SPAN_WINDOWS], key=lambda w: w.start_ns)
    if not drawn:
        return ""
    colors = dict(zip(plot.kinds, SPAN_COLORS))
    row, left, out = 18, 120, []
    for w in drawn:
        span = max(w.end_ns - w.start_ns, 1)
        parts = []
        for i, lane in enumerate(w.lanes):
            parts.append(f'<text x="4" y="{i * row + 13}">{escape(lane)}</text>')
        for s in w.spans:
            x = left + (s.start_ns - w.start_ns) / span * (width - left)
            dx = max((s.end_ns - s.start_ns) / span * (width - left), 0.5)
            parts.append(f'<rect x="{x:.1f}" y="{s.lane * row + 2}" width="{dx:.1f}" height="14" '
                         f'fill="{colors.get(s.kind, OTHER_COLOR)}"><title>{escape(s.tip)}</title></rect>')
        parts.append(_axis(left, width, (w.start_ns - plot.t0_ns) / 1e6, (w.end_ns - plot.t0_ns) / 1e6,
                           row * len(w.lanes) + 2, plot.axis))
        out.append(f"<h3>{escape(w.label)} · {span / 1e6:.3f} ms</h3>"
                   f'<svg width="{width + 20}" height="{row * len(w.lanes) + 4 + AXIS_HEIGHT}">{"".join(parts)}</svg>')
    legend = " ".join(f'<span style="color:{c}">■</span> {escape(k)}' for k, c in colors.items())
    more = f" (the {len(drawn)} longest of {len(windows)} windows)" if len(drawn) < len(windows) else ""
    scale = ('<p class="note">Scales: each window below is drawn on its own scale, from its start to its end, '
             "so a short window fills the width as a long one does; its axis reads ms from the trace's start, "
             "as the busy timeline's does (which spans the whole run on one scale).</p>")
    return f"<p>{legend}{more}; hover a segment for its name.</p>" + scale + "".join(out)


def _plot(plot: Plot) -> str:
    """A plot, drawn by its kind."""
    if isinstance(plot, Bars):
        return _bars(plot)
    if isinstance(plot, Latency):
        return _latency(plot)
    if isinstance(plot, Heat):
        return _heat(plot)
    return _spans(plot)


def _figure(figure: Figure) -> str:
    """The caption, then the plots."""
    drawn = "".join(_plot(p) for p in figure.plots)
    if not figure.caption:
        return drawn
    words = "".join(f"<b>{escape(w.text, quote=False)}</b>" if isinstance(w, Strong) else escape(w, quote=False)
                    for w in figure.caption)
    cls = f' class="{figure.caption_class}"' if figure.caption_class else ""
    return f"<p{cls}>{words}</p>" + drawn


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


def _has_torch_table(items: View) -> bool:
    return any(isinstance(i, Table) and i.layout == TORCH for i in items)


def render_html(report: Report, sort_by: str, row_limit: int, sections: Sequence[Section]) -> str:
    shown = views(report, sort_by, row_limit, sections)
    lead = [(s, items) for s, items in shown if s.lead]
    # the page ends with torch's table (the key averages), its longest, after the plots
    rest = sorted(((s, items) for s, items in shown if not s.lead), key=lambda x: _has_torch_table(x[1]))
    body = ["<h1>tracemerge report</h1>"]
    body += [_section(s, items) for s, items in lead]
    body += [f'<p class="hint">{escape(n.text)}</p>' for n in report.notes]
    body += [_section(s, items) for s, items in rest]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>tracemerge report</title>'
            f'<style>{STYLE}</style></head><body>{"".join(body)}</body></html>\n')


def _item(item: Item, section: Section) -> str:
    if isinstance(item, Findings):
        return "<ul>" + "".join(f"<li>{escape(x)}</li>" for x in item.lines) + "</ul>"
    if isinstance(item, Table):
        heading = item.shown_heading
        footer = f"<p>{'<br>'.join(escape(f, quote=False) for f in item.footer)}</p>" if item.footer else ""
        return ("" if heading == section.title else f"<h3>{escape(heading)}</h3>") + _table(item.head, item.body) \
            + footer
    return _figure(item)


def _section(section: Section, items: View) -> str:
    """A section under its title (a lead one anchored by its name), when it shows anything."""
    if not items:
        return ""
    anchor = f' id="{escape(section.name)}"' if section.lead else ""
    return f"<h2{anchor}>{escape(section.title)}</h2>" + "".join(_item(i, section) for i in items)


FORMAT = ReportFormat("html", render_html, (), option="--html", render_diff=render_diff_html)
