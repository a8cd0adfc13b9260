"""The HTML report and diff pages (issue 26): time axes with ticks in ms from the trace's
start, checked against the merged trace's own span and the JSON report's windows; the
scales said; "(untraced)" explained where it appears; name columns left-aligned, numbers
right-aligned; diff changes coloured by sign, against deltas worked out from the two
runs' JSON reports."""

import glob
import json
import math
import re
from html.parser import HTMLParser

import pytest
from support.cli import invoke

SAMPLE = sorted(glob.glob("samples/rpc_profiling/rank*.json.gz"))


class Page(HTMLParser):
    """The page's axes (their data-* and tick texts), headings in order, table cells
    (class, text) per table, and the text of its <p> elements."""

    def __init__(self, text):
        super().__init__()
        self.axes, self.tables, self.paragraphs, self.items = [], [], [], []
        self._tick = self._cell = self._p = None
        self._heading = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "g" and a.get("class") == "axis":
            self.axes.append({"attrs": a, "ticks": [], "title": ""})
            self.items.append(("axis", self.axes[-1]))
        elif tag == "text" and a.get("class") in ("tick", "axis-title") and self.axes:
            self._tick = (a, [])
        elif tag == "table":
            self.tables.append([])
            self.items.append(("table", self.tables[-1]))
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = (tag, a.get("class", ""), [])
        elif tag == "p":
            self._p = []
        elif tag in ("h2", "h3"):
            self._heading = []

    def handle_data(self, data):
        for part in (self._tick and self._tick[1], self._cell and self._cell[2], self._p, self._heading):
            if part is not None:
                part.append(data)

    def handle_endtag(self, tag):
        if tag == "text" and self._tick is not None:
            a, text = self._tick
            if a.get("class") == "tick":
                self.axes[-1]["ticks"].append((float(a["x"]), float(a["data-ms"]), "".join(text)))
            else:
                self.axes[-1]["title"] = "".join(text)
            self._tick = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(self._cell)
            self._cell = None
        elif tag == "p" and self._p is not None:
            self.paragraphs.append("".join(self._p))
            self._p = None
        elif tag in ("h2", "h3") and self._heading is not None:
            self.items.append(("heading", "".join(self._heading)))
            self._heading = None


def _trace_span_ms(tmp_path, files):
    """(first event ns, duration ms) of the job on the reference clock, read from the
    merged trace itself."""
    merged = tmp_path / "m.json"
    invoke("combine", *files, "-o", merged, "-q").ok()
    doc = json.loads(merged.read_text())
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "b", "e")
             and "ts" in e]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    return doc["baseTimeNanoseconds"] + first * 1000, (last - first) / 1000


def _check_ticks(axis):
    """Ticks at round values, each written where the axis' scale puts it, inside it."""
    a = axis["attrs"]
    x0, x1, lo, hi = (float(a[k]) for k in ("data-x0", "data-x1", "data-lo-ms", "data-hi-ms"))
    ticks = axis["ticks"]
    assert len(ticks) >= 3, ticks
    values = [ms for _, ms, _ in ticks]
    step = values[1] - values[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-6, step
    for (x, ms, label), following in zip(ticks, values[1:] + [None]):
        assert float(label) == pytest.approx(ms, abs=step / 100)   # the label says the tick's value
        assert lo - 1e-9 <= ms <= hi + 1e-9
        assert x == pytest.approx(x0 + (ms - lo) / (hi - lo) * (x1 - x0), abs=0.11)
        if following is not None:
            assert following - ms == pytest.approx(step)
    assert values[0] - lo < step + 1e-9 and hi - values[-1] < step + 1e-9   # the ticks cover the axis
    return lo, hi


def test_busy_timeline_and_critical_path_have_time_axes_in_ms_from_the_trace_start(tmp_path):
    page_path = tmp_path / "r.html"
    out = tmp_path / "r.json"
    invoke("report", *SAMPLE, "--analysis", "--format", "json", "-o", out, "--html", page_path).ok()
    page = Page(page_path.read_text())
    report = json.loads(out.read_text())
    t0_ns, duration_ms = _trace_span_ms(tmp_path, SAMPLE)
    items = page.items
    at = items.index(("heading", "Busy timeline"))
    busy = next(x for kind, x in items[at:] if kind == "axis")
    lo, hi = _check_ticks(busy)
    # the whole run, from the trace's first event (hi rounds up to whole bins: < 1 µs)
    assert lo == 0 and hi == pytest.approx(duration_ms, abs=0.001)
    assert "ms from the trace's start" in busy["title"]
    # each drawn window: its own axis, from its start to its end, read from the trace's start
    windows = {w["window"]: w for w in report["critical_path"]}
    drawn = [(x, items[i + 1:]) for i, (kind, x) in enumerate(items)
             if kind == "heading" and x.split(" · ")[0] in windows and i > items.index(("heading", "Critical path"))]
    assert drawn
    for heading, rest in drawn:
        w = windows[heading.split(" · ")[0]]
        axis = next(x for kind, x in rest if kind == "axis")
        lo, hi = _check_ticks(axis)
        assert lo == pytest.approx((w["start_ns"] - t0_ns) / 1e6, abs=0.001)
        assert hi == pytest.approx((w["end_ns"] - t0_ns) / 1e6, abs=0.001)
        assert "ms from the trace's start" in axis["title"]
    # the two scales differ, and the page says which each uses
    assert any("own scale" in p and "busy timeline" in p for p in page.paragraphs)
    # the latency plot's axis is a duration: from 0 to the slowest call
    latency = next(x for kind, x in items[items.index(("heading", "RPC latency")):] if kind == "axis")
    lo, hi = _check_ticks(latency)
    assert lo == 0 and hi == pytest.approx(max(k["e2e_us"]["max"] for k in report["rpc"]["keys"]) / 1000)


def test_untraced_is_explained_where_it_appears(tmp_path):
    with_path, without = tmp_path / "a.html", tmp_path / "b.html"
    invoke("report", *SAMPLE, "--analysis", "-o", tmp_path / "a.txt", "--html", with_path).ok()
    invoke("report", *SAMPLE, "-o", tmp_path / "b.txt", "--html", without).ok()
    text = with_path.read_text()
    assert "(untraced)" in text   # the sample's path has untraced time on a caller's thread
    page = Page(text)
    explained = [p for p in page.paragraphs if p.startswith("(untraced):")]
    assert len(explained) == 1 and "no traced span covers" in explained[0]
    # before the first use: the note comes right after the section's heading
    assert text.index('class="note untraced"') < text.index("(untraced)</td>")
    assert "(untraced)" not in without.read_text()


def _style(text):
    """{selector: text-align} of the page's style sheet."""
    sheet = re.search(r"<style>(.*?)</style>", text, re.S).group(1)
    return {sel.strip(): m.group(1) for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", sheet)
            if (m := re.search(r"text-align:(left|right)", body))}


def test_name_columns_are_left_aligned_and_numbers_right_aligned(tmp_path):
    path = tmp_path / "r.html"
    invoke("report", *SAMPLE, "--analysis", "-o", tmp_path / "r.txt", "--html", path).ok()
    text = path.read_text()
    style = _style(text)
    assert style["td,th"] == "left" and style["td.num,th.num"] == "right" and style["td.name,th.name"] == "left"
    page = Page(text)
    keys = next(t for t in page.tables if [c[2][0] for c in t[0]][:2] == ["Name", "Self CPU %"])
    head = [c[2][0] for c in keys[0]]
    for row in keys[1:]:
        cells = dict(zip(head, row))
        assert cells["Name"][1] == "name"
        for number in ("Self CPU %", "Self CPU", "CPU total", "# of Calls", "Node ID"):
            assert cells[number][1] == "num", (number, cells[number])
    rpc = next(t for t in page.tables if t[0][0][2] == ["RPC"] and len(t[0]) > 8)
    assert all(row[0][1] == "name" and "->" in "".join(row[0][2]) for row in rpc[1:])
    assert all(c[1] == "num" for row in rpc[1:] for c in row[1:])


def _metrics(report):
    """{(section, key, metric): value} worked out from a JSON report: what `diff` compares,
    for the RPC keys and the key averages whose name is one row."""
    out = {}
    for k in report["rpc"]["keys"]:
        out[("rpc", k["name"], "calls")] = k["count"]
        out[("rpc", k["name"], "end-to-end")] = k["e2e_us"]["mean"] * k["complete"]
        out[("rpc", k["name"], "execution")] = k["exec_us"]["mean"] * k["complete"]
    names = [r["key"] for r in report["key_averages"]]
    for r in report["key_averages"]:
        if names.count(r["key"]) == 1 and not r["key"].startswith(("rpc_async#", "rpc_sync#", "remote#")):
            out[("key_averages", r["key"], "cpu_time_total")] = r["cpu_time_total"]
            out[("key_averages", r["key"], "count")] = r["count"]
    return out


def test_diff_cells_are_coloured_by_the_sign_of_the_change(tmp_path):
    before, after = sorted(glob.glob("samples/threads_1/*.json.gz")), sorted(glob.glob("samples/threads_8/*.json.gz"))
    reports = []
    for n, files in enumerate((before, after)):
        out = tmp_path / f"{n}.json"
        invoke("report", *files, "--format", "json", "--row-limit", "0", "-o", out).ok()
        reports.append(_metrics(json.loads(out.read_text())))
    path = tmp_path / "d.html"
    invoke("diff", "samples/threads_1", "samples/threads_8", "--row-limit", "0", "--html", path, "-o", tmp_path / "d.txt").ok()
    text = path.read_text()
    assert "up-key" in text and "down-key" in text   # the legend
    [table] = Page(text).tables
    head = [c[2][0] for c in table[0]]
    seen = {"up": 0, "down": 0}
    for row in table[1:]:
        cells = dict(zip(head, row))
        where = (cells["Section"][2][0], "".join(cells["Key"][2]), cells["Metric"][2][0])
        if where not in reports[0] or where not in reports[1]:
            continue
        delta = reports[1][where] - reports[0][where]
        if abs(delta) < 1e-6 * max(abs(reports[0][where]), 1):
            continue
        sign = "up" if delta > 0 else "down"
        for column in ("Delta", "Relative"):
            assert sign in cells[column][1].split(), (where, delta, cells[column])
        # without colour: the text carries the sign
        assert "".join(cells["Delta"][2]).startswith("+" if delta > 0 else "-"), (where, cells["Delta"])
        for column in ("Before", "After", "Key"):
            assert not {"up", "down"} & set(cells[column][1].split())
        seen[sign] += 1
    assert seen["up"] >= 3 and seen["down"] >= 3, seen
