"""An analysis is one module plus one registry line: a toy analysis, written as a module of
its own in a temporary directory and added to ``report.sections.SECTIONS``, shows in every
report format — the text table, Markdown, HTML, JSON and CSV (``--section``) — and as a
table of ``tracemerge export`` and ``tables.load``."""

import csv
import gzip
import importlib.util
import io
import json
import sys
import textwrap

import orjson
import pytest
from support.modules import written_module

from tracemerge.errors import TracemergeError
from tracemerge.job import AlignRequest, Job
from tracemerge.report import sections
from tracemerge.report.build import build_report
from tracemerge.report.render import render

BASE = 1_700_000_000_000_000_000

# the toy analysis: each rank's self CPU time, from the report's key averages by (name, rank)
TOY = textwrap.dedent('''
    """Self CPU time per rank (a toy analysis: one module, one registry line)."""
    from tracemerge.report.sections import Section
    from tracemerge.report.view import Table


    def per_rank(report):
        out = {}
        for row in report.key_averages:
            out[row.node_id] = out.get(row.node_id, 0.0) + row.self_cpu_time_total
        return sorted(out.items())


    def view(report, sort_by, row_limit):
        return [Table("Self CPU per rank", ["Rank", "Self CPU ms"],
                      [[r, f"{us / 1000:.3f}"] for r, us in per_rank(report)])]


    SECTION = Section(
        "self_cpu_per_rank", "Self CPU per rank",
        present=lambda report: bool(report.key_averages),
        view=view,
        data=lambda report, sort_by, row_limit: {"self_cpu_per_rank": dict(per_rank(report))},
        csv=(("self_cpu_per_rank", lambda report, sort_by, row_limit: (
            ("rank", "self_cpu_us"), ({"rank": r, "self_cpu_us": us} for r, us in per_rank(report)))),),
        export=(("self_cpu_per_rank", "toy_analysis:self_cpu_table"),))


    def self_cpu_table(made):
        """export's table: the same sums, from the rows each rank's worker made"""
        import pyarrow as pa
        out = {}
        for rows in made.per_rank("key_averages").values():
            for row in rows:
                out[row.node_id] = out.get(row.node_id, 0.0) + row.self_cpu_time_total
        ranks = sorted(out)
        return pa.table({"rank": ranks, "self_cpu_us": [out[r] for r in ranks]})
''')

# planted: rank 0 runs 7 ms of ops, rank 1 3 ms (no op nested in another: self time = duration)
PLANTED_MS = {0: 7.0, 1: 3.0}


def _rank_file(path, rank, durations_ms):
    block = {"version": 1, "job_id": "job", "rank": rank, "world_size": 2, "worker_name": f"worker{rank}",
             "hostname": "h", "pid": 100 + rank, "cycle": None, "profile_start_ns": BASE,
             "profile_stop_ns": BASE + 10**9, "rpcs": [], "collectives": []}
    t, events = 0.0, []
    for i, ms in enumerate(durations_ms):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": t,
                       "dur": ms * 1000})
        t += ms * 1000 + 100
    path.write_bytes(gzip.compress(orjson.dumps({"tracemerge": block, "baseTimeNanoseconds": BASE,
                                                 "traceEvents": events})))
    return str(path)


@pytest.fixture(scope="module")
def toy_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toy")
    module = written_module(tmp, "toy_analysis", TOY)
    paths = [_rank_file(tmp / "rank0.json.gz", 0, [4.0, 3.0]), _rank_file(tmp / "rank1.json.gz", 1, [1.0, 2.0])]
    report = build_report(paths, Job.open, group_by="name,rank")
    return report, module, paths


@pytest.fixture
def registered(toy_report, monkeypatch):
    """The toy's registry line, for this test only (its module importable by its name, as an
    installed analysis's would be: export finds its table by name)."""
    report, module, _ = toy_report
    monkeypatch.setattr(sections, "SECTIONS", sections.SECTIONS + (module.SECTION,))
    monkeypatch.setitem(sys.modules, "toy_analysis", module)
    return report


def test_toy_analysis_in_the_text_table(registered):
    lines = render(registered, "table").splitlines()
    at = lines.index("Self CPU per rank")
    rows = [line.split() for line in lines[at + 4:at + 6]]
    assert rows == [["0", "7.000"], ["1", "3.000"]]


def test_toy_analysis_in_markdown(registered):
    text = render(registered, "markdown")
    assert "## Self CPU per rank\n\n| Rank | Self CPU ms |\n|---|---|\n| 0 | 7.000 |\n| 1 | 3.000 |" in text


def test_toy_analysis_in_html(registered):
    page = render(registered, "html")
    at = page.index("<h2>Self CPU per rank</h2>")
    assert '<td class="num">0</td><td class="num">7.000</td>' in page[at:]
    assert '<td class="num">1</td><td class="num">3.000</td>' in page[at:]


def test_toy_analysis_in_json(registered):
    doc = json.loads(render(registered, "json"))
    assert {int(k): v / 1000 for k, v in doc["self_cpu_per_rank"].items()} == pytest.approx(PLANTED_MS)


def test_toy_analysis_as_a_csv_section(registered):
    rows = list(csv.DictReader(io.StringIO(render(registered, "csv", section="self_cpu_per_rank"))))
    assert {int(r["rank"]): float(r["self_cpu_us"]) / 1000 for r in rows} == pytest.approx(PLANTED_MS)


def test_toy_analysis_as_an_exported_table(registered, toy_report, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from tracemerge.tables import load
    from tracemerge.tables.export import export
    _, _, paths = toy_report
    export(Job.open(paths, align=AlignRequest()), tmp_path / "tables")
    table = pq.read_table(tmp_path / "tables" / "self_cpu_per_rank.parquet").to_pydict()
    assert {r: us / 1000 for r, us in zip(table["rank"], table["self_cpu_us"])} == pytest.approx(PLANTED_MS)
    frame = load(paths).self_cpu_per_rank
    assert {int(r): us / 1000 for r, us in zip(frame["rank"], frame["self_cpu_us"])} == pytest.approx(PLANTED_MS)


def test_without_its_registry_line_no_format_has_it(toy_report, tmp_path):
    report, _, paths = toy_report
    for fmt in ("table", "markdown", "html", "json"):
        assert "self_cpu_per_rank" not in render(report, fmt) and "Self CPU per rank" not in render(report, fmt)
    with pytest.raises(TracemergeError, match="--section 'self_cpu_per_rank'"):
        render(report, "csv", section="self_cpu_per_rank")
    if importlib.util.find_spec("pyarrow") is not None:
        from tracemerge.tables.export import export
        export(Job.open(paths, align=AlignRequest()), tmp_path / "tables")
        assert not (tmp_path / "tables" / "self_cpu_per_rank.parquet").exists()
        assert (tmp_path / "tables" / "key_averages.parquet").exists()


# a toy section made of the view's primitives only (findings, a table, a figure) and
# compared by diff: no renderer knows it, none is changed for it
PRIMITIVES_TOY = textwrap.dedent('''
    """Op time per rank, and the busiest rank (a toy section: one module, one registry line)."""
    from tracemerge.report.diff import Compared
    from tracemerge.report.sections import Section
    from tracemerge.report.view import FIXED, Bars, Figure, Findings, Table


    def op_us(report):
        """{rank: µs of its ops} (none nests in another)"""
        ranks = sorted({row.node_id for row in report.key_averages})
        return {r: sum(row.self_cpu_time_total for row in report.key_averages if row.node_id == r) for r in ranks}


    def view(report, sort_by, row_limit):
        us = op_us(report)
        busiest = max(us, key=us.get)
        return [Findings("busiest", [f"rank {busiest} ran {us[busiest] / 1000:.3f} ms of ops"]),
                Table("Op time per rank", ["Rank", "Op ms"], [[r, f"{t / 1000:.3f}"] for r, t in us.items()],
                      layout=FIXED),
                Figure((Bars([f"rank {r}" for r in us], [t / 1000 for t in us.values()], "ms"),), ("Op time, ms",))]


    SECTION = Section(
        "op_time", "Op time", view=view,
        data=lambda report, sort_by, row_limit: {"op_time_us": op_us(report)},
        diff=(Compared("op_time", lambda report: {f"rank {r}": {"op_ms": t} for r, t in op_us(report).items()},
                       frozenset({"op_ms"})),))
''')


@pytest.fixture(scope="module")
def primitives_toy(tmp_path_factory, toy_report):
    """The toy's module, a registry of the test's own (the package's and its line), and a
    second run whose rank 1 runs 6 ms more."""
    tmp = tmp_path_factory.mktemp("primitives_toy")
    module = written_module(tmp, "op_time", PRIMITIVES_TOY)
    registry = sections.SECTIONS + (module.SECTION,)
    paths = [_rank_file(tmp / "rank0.json.gz", 0, [4.0, 3.0]), _rank_file(tmp / "rank1.json.gz", 1, [1.0, 8.0])]
    return toy_report[0], build_report(paths, Job.open, group_by="name,rank"), registry


def test_primitives_toy_in_the_text_table(primitives_toy):
    report, _, registry = primitives_toy
    lines = render(report, "table", sections=registry).splitlines()
    at = lines.index("busiest: rank 0 ran 7.000 ms of ops")
    assert lines[at + 1] == "Op time per rank"   # findings lead straight into their tables
    assert [line.split() for line in lines[at + 5:at + 7]] == [["0", "7.000"], ["1", "3.000"]]
    assert "Op time, ms" not in lines   # a figure is for the formats that draw


def test_primitives_toy_in_markdown(primitives_toy):
    report, _, registry = primitives_toy
    text = render(report, "markdown", sections=registry)
    assert ("## Op time\n\n- rank 0 ran 7.000 ms of ops\n\n### Op time per rank\n\n| Rank | Op ms |\n|---|---|\n"
            "| 0 | 7.000 |\n| 1 | 3.000 |") in text


def test_primitives_toy_in_html(primitives_toy):
    report, _, registry = primitives_toy
    page = render(report, "html", sections=registry)
    at = page.index("<h2>Op time</h2>")
    section = page[at:page.index("<h2>", at + 1)] if "<h2>" in page[at + 1:] else page[at:]
    assert section.startswith("<h2>Op time</h2><ul><li>rank 0 ran 7.000 ms of ops</li></ul><h3>Op time per rank</h3>")
    assert '<td class="num">0</td><td class="num">7.000</td>' in section
    # the figure: its caption and a bar per rank, each with its value
    assert "<p>Op time, ms</p><svg" in section
    assert ">rank 0</text>" in section and ">7.000 ms</text>" in section and ">3.000 ms</text>" in section


def test_primitives_toy_in_json(primitives_toy):
    report, _, registry = primitives_toy
    doc = json.loads(render(report, "json", sections=registry))
    assert {int(k): v / 1000 for k, v in doc["op_time_us"].items()} == pytest.approx(PLANTED_MS)


def test_primitives_toy_only_in_the_registry_given(primitives_toy):
    report, _, registry = primitives_toy
    assert all(s.name != "op_time" for s in sections.SECTIONS)   # the package's registry is untouched
    for fmt in ("table", "markdown", "html", "json"):
        shown = render(report, fmt)
        assert "Op time" not in shown and "op_time" not in shown and "busiest" not in shown


def test_primitives_toy_compared_by_diff(primitives_toy):
    from tracemerge.report.diff import diff_reports
    from tracemerge.report.render import render_diff
    before, after, registry = primitives_toy
    rows = {(r.section, r.key): r for r in diff_reports(before, after, sections=registry).rows}
    # planted: rank 1's second op 2 -> 8 ms, rank 0 unchanged
    grew = rows[("op_time", "rank 1")]
    assert (grew.metric, grew.before / 1000, grew.after / 1000) == ("op_ms", pytest.approx(3.0), pytest.approx(9.0))
    assert grew.impact == pytest.approx(6000.0) and ("op_time", "rank 0") not in rows
    assert not any(r.section == "op_time" for r in diff_reports(before, after).rows)
    text = render_diff(diff_reports(before, after, sections=registry), "table")
    row = next(cells for cells in map(str.split, text.splitlines()) if cells[-4:] == ["op_time", "op_ms", "rank", "1"])
    assert row[:5] == ["+6.000", "ms", "+200.0%", "3.000", "ms"]   # delta, relative, before


def test_a_note_is_said_by_its_kind_not_its_words(toy_report):
    from dataclasses import replace

    from tracemerge.report.notes import HINT, WARNING, Note
    # the words of a thread-limited hint under another kind, and a hint of other words
    notes = [Note("worker1 (rank 1) is thread-limited"), Note("raise num_worker_threads", HINT),
             Note("--analysis: not done", WARNING)]
    report = replace(toy_report[0], notes=notes)
    assert render(report, "table").splitlines()[-3:] == [
        "note: worker1 (rank 1) is thread-limited", "hint: raise num_worker_threads", "note: --analysis: not done"]
    assert [n.said for n in notes] == [None, "hint", "warning"]   # what report says on stderr
    assert json.loads(render(report, "json"))["notes"] == [n.text for n in notes]
    with pytest.raises(ValueError, match="note kind 'tip'"):
        Note("x", "tip")
