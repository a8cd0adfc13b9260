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


    def per_rank(report):
        out = {}
        for row in report.key_averages:
            out[row.node_id] = out.get(row.node_id, 0.0) + row.self_cpu_time_total
        return sorted(out.items())


    def tables(report, row_limit):
        return [("Self CPU per rank", (["Rank", "Self CPU ms"], [[r, f"{us / 1000:.3f}"] for r, us in per_rank(report)]))]


    SECTION = Section(
        "self_cpu_per_rank", "Self CPU per rank",
        present=lambda report: bool(report.key_averages),
        tables=tables,
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
    (tmp / "toy_analysis.py").write_text(TOY)
    spec = importlib.util.spec_from_file_location("toy_analysis", tmp / "toy_analysis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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
