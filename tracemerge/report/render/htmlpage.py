"""``--html``: the report as one self-contained page, tables plus inline SVG plots.

No scripts, fonts or images are fetched: the page opens offline. Plots: each rank's clock
offset (with its error bound) and drift, each RPC key's latency distribution (p50, p95,
p99, max and the mean split into queueing, execution and the rest of the overhead), and each rank's busy
threads over the run.
"""

from html import escape

from tracemerge.analysis.critical_path import KINDS
from tracemerge.analysis.tables import analysis_sections, diff_table
from tracemerge.report.build import sorted_rows
from tracemerge.report.cells import callee_rows, collective_rows, key_footer, key_rows, rpc_rows
from tracemerge.report.gpu import gpu_rows
from tracemerge.report.render.base import ReportFormat

STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
th{background:#f3f3f3}.hint{background:#fff3cd;padding:8px;border:1px solid #e0c060}svg{display:block;margin:6px 0 20px}
text{font:11px system-ui,sans-serif}"""
LABEL_CHAR_PX = 6.5   # the width of a character of an 11 px label, generously
COLORS = {"queue": "#e4572e", "exec": "#4c8bf5", "other overhead": "#a0a0a0"}


def _table(head, body):
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in r) + "</tr>" for r in body)
    return "<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>" + rows + "</table>"


def _bars(labels, values, unit, width=720, errors=None):
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


def _latency(keys, width=720):
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
        at = left
        queue = max(k.queue_us.get("mean", 0), 0)
        split = (("queue", queue), ("exec", k.exec_us["mean"]), ("other overhead", k.overhead_us["mean"] - queue))
        for part, mean in split:
            w = max(mean, 0) / top * (width - left)
            parts.append(f'<rect x="{at:.1f}" y="{y + 20}" width="{w:.1f}" height="10" fill="{COLORS[part]}"/>')
            at += w
        parts.append(f'<text x="{at + 4:.1f}" y="{y + 30}">mean {e["mean"] / 1000:.2f} ms: queue / exec / other</text>')
    legend = "".join(f'<tspan fill="{c}">■ {n} </tspan>' for n, c in COLORS.items())
    parts.append(f'<text x="{left}" y="{row * len(keys) + 12}">{legend} (box: p50–p99, tick: p95, line: max)</text>')
    return f'<svg width="{width + 420}" height="{row * len(keys) + 20}">{"".join(parts)}</svg>'


def _timeline(timeline, ranks, width=840):
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
    parts.append(f'<text x="{left}" y="{row * len(busy) + 14}">0 ms</text>'
                 f'<text x="{width - 60}" y="{row * len(busy) + 14}">{span_ms:.1f} ms</text>')
    return (f'<p>Darker = more threads busy in top-level host ops (peak {peak:.2f} on average per bin).</p>'
            f'<svg width="{width + 20}" height="{row * len(busy) + 20}">{"".join(parts)}</svg>')


PATH_COLORS = dict(zip(KINDS, ("#4c8bf5", "#a0a0a0", "#e4572e", "#2ca58d", "#f4b942")))
PATH_WINDOWS = 6   # the longest windows drawn


def _path(windows, width=840):
    """The longest windows' critical paths: one row per rank, segments coloured by kind."""
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
                         f'fill="{PATH_COLORS[s.kind]}"><title>{escape(s.kind)}: {escape(str(s.name))} (rank '
                         f'{s.rank}, thread {escape(str(s.tid))}) {(s.end_ns - s.start_ns) / 1e6:.3f} ms</title></rect>')
        out.append(f"<h3>{escape(w.window)} · {span / 1e6:.3f} ms</h3>"
                   f'<svg width="{width + 20}" height="{row * len(ranks) + 4}">{"".join(parts)}</svg>')
    legend = " ".join(f'<span style="color:{c}">■</span> {escape(k)}' for k, c in PATH_COLORS.items())
    more = f" (the {len(drawn)} longest of {len(windows)} windows)" if len(drawn) < len(windows) else ""
    return f"<p>{legend}{more}; hover a segment for its name.</p>" + "".join(out)


def _analysis(analysis, row_limit):
    parts = ["<h2>Critical path</h2>" + _path(analysis.critical_path)]
    for title, table in analysis_sections(analysis, row_limit):
        parts.append(f"<h3>{escape(title)}</h3>" + _table(*table))
    return "".join(parts)


def render_diff_html(diff, row_limit=100):
    head, body = diff_table(diff, row_limit)
    page = [f"<h1>tracemerge diff</h1><p>before: {escape(' '.join(diff.before))}<br>after: "
            f"{escape(' '.join(diff.after))}</p>"]
    page += [f'<p class="hint">{escape(n)}</p>' for n in diff.notes]
    page.append(_table(head, body))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>tracemerge diff</title>'
            f'<style>{STYLE}</style></head><body>{"".join(page)}</body></html>\n')


def render_html(report, sort_by="cpu_time_total", row_limit=100):
    rows = sorted_rows(report.key_averages, sort_by, row_limit)
    body = ["<h1>tracemerge report</h1>"]
    body += [f'<p class="hint">{escape(n)}</p>' for n in report.notes]
    clocks = report.clocks
    body.append(f"<h2>Clocks</h2><p>Aligned by <b>{escape(report.align)}</b> to rank {report.reference}. "
                "Offset = the rank's clock minus the reference's, with its error bound when known.</p>")
    body.append(_bars([f"rank {c['rank']} offset" for c in clocks], [c["offset_ns"] / 1000 for c in clocks], "µs",
                      errors=[(c.get("error_bound_ns") or 0) / 1000 for c in clocks]))
    body.append(_bars([f"rank {c['rank']} drift" for c in clocks], [c["drift_ppm"] for c in clocks], "ppm"))
    if report.rpc is not None:
        body.append("<h2>RPC latency</h2>" + _latency(report.rpc.keys))
        body.append(_table(*rpc_rows(report.rpc)) + "<h3>Callees</h3>" + _table(*callee_rows(report.rpc)))
    if report.collectives:
        body.append("<h2>Collectives</h2>" + _table(*collective_rows(report.collectives)))
    if report.gpu:
        body.append("<h2>GPU (per rank)</h2>" + _table(*gpu_rows(report.gpu)))
    body.append("<h2>Busy timeline</h2>" + _timeline(report.timeline, report.ranks))
    if report.analysis is not None:
        body.append(_analysis(report.analysis, row_limit))
    head, table, _ = key_rows(rows, report.key_averages)
    footer = "<br>".join(key_footer(report.key_averages))
    body.append(f"<h2>Key averages</h2>{_table(head, table)}<p>{footer}</p>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>tracemerge report</title>'
            f'<style>{STYLE}</style></head><body>{"".join(body)}</body></html>\n')


FORMAT = ReportFormat("html", render_html, (), option="--html", render_diff=render_diff_html)
