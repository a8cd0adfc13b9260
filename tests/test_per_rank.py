"""What a rank's events tell is one module plus one registry line, through the one per-rank pass.

A toy analysis that needs per-rank data no report has (complete events per thread), written
as a module of its own in a temporary directory: its ``per_rank`` product runs in the pass
every command shares (place/rank_pass.py), and its section's one line in
``report.sections.SECTIONS`` puts it in every report format, ``export`` (honouring the
plan's selection, as the merge does) and ``diff``. A toy output format the same way: one
module (its ``Format.rank`` runs per rank) and one line in ``formats.FORMATS``. Every
command runs as a user runs it (the CLI, real rank files); the counts are planted.
"""

import csv
import importlib.util
import io
import json
import sys
import textwrap

import pytest
from support import cli
from support.modules import written_module
from support.ranks import rank_file, write, x

from tracemerge import formats
from tracemerge.report import sections

TOY_ANALYSIS = textwrap.dedent('''
    """Complete events per thread of each rank (a toy analysis: one module, one registry line)."""
    import numpy as np

    from tracemerge.report.diff import Compared
    from tracemerge.report.sections import Section
    from tracemerge.report.view import Table


    def events_per_thread(view):
        """The per-rank product: {tid: complete events} of the rank's events as the plan keeps them."""
        trace = view.trace
        codes, counts = np.unique(trace.tid[trace.ph == ord("X")], return_counts=True)
        return {str(trace.tids[c]): int(n) for c, n in zip(codes, counts)}


    def _rows(by_rank):
        return [(rank, tid, n) for rank, by_tid in sorted(by_rank.items()) for tid, n in sorted(by_tid.items())]


    def rows(report):
        return _rows(report.per_rank.get("events_per_thread", {}))


    def table(made):
        """export's table, from what each rank's worker made"""
        import pyarrow as pa
        found = _rows(made.per_rank("events_per_thread"))
        return pa.table({"rank": [r for r, _, _ in found], "tid": [t for _, t, _ in found],
                         "events": [n for _, _, n in found]})


    def _dicts(report):
        return [{"rank": r, "tid": t, "events": n} for r, t, n in rows(report)]


    SECTION = Section(
        "events_per_thread", "Events per thread",
        present=lambda report: bool(rows(report)),
        view=lambda report, sort_by, row_limit: [Table("Events per thread", ["Rank", "Thread", "Events"],
                                                       [list(r) for r in rows(report)])],
        data=lambda report, sort_by, row_limit: {"events_per_thread": _dicts(report)},
        csv=(("events_per_thread", lambda report, sort_by, row_limit: (("rank", "tid", "events"), _dicts(report))),),
        export=(("events_per_thread", "toy_threads:table"),),
        per_rank=(("events_per_thread", "toy_threads:events_per_thread"),),
        diff=(Compared("events_per_thread",
                       lambda report: {f"rank {r} thread {t}": {"events": float(n)} for r, t, n in rows(report)},
                       frozenset()),))
''')

TOY_FORMAT = textwrap.dedent('''
    """Events per thread, one JSON line per thread of each rank and the summary last (a toy output format)."""
    import numpy as np
    import orjson

    from tracemerge.formats.base import Format


    def rank(trace, place, rpc, found, counts, consume):
        codes, n = np.unique(trace.tid[trace.ph == ord("X")], return_counts=True)
        lines = [{"rank": place.rank, "tid": str(trace.tids[c]), "events": int(k)} for c, k in zip(codes, n)]
        return [lines], {**counts, "out": len(trace)}


    def encode(lines):
        return b"".join(orjson.dumps(line) + b"\\n" for line in lines)


    FORMAT = Format("threads", (".threads",), rank, encode, close=lambda footer: orjson.dumps({"tracemerge": footer}),
                    columns_only=True)
''')

# planted: {rank: {tid: [durations µs]}}; events of 5 µs are the ones --min-duration 50 leaves out
PLANTED = {0: {1: [100, 100, 100], 2: [100, 5, 100, 5, 100]}, 1: {7: [100, 100]}}
COUNTS = {(r, str(t)): len(d) for r, by in PLANTED.items() for t, d in by.items()}
LONG = {(r, str(t)): sum(us >= 50 for us in d) for r, by in PLANTED.items() for t, d in by.items()}


def _run(tmp, name, planted):
    """One run's rank files: each thread's events one after another (nothing nested)."""
    run = tmp / name
    run.mkdir()
    for rank, by_tid in planted.items():
        events = [x(f"aten::op{tid}", ts=1000 + 200 * i, dur=us, tid=tid)
                  for tid, durations in by_tid.items() for i, us in enumerate(durations)]
        write(run / f"rank{rank}.json.gz", rank_file(events, rank))
    return run


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("per_rank")
    after = {**PLANTED, 0: {**PLANTED[0], 2: PLANTED[0][2] + [100]}}  # one more event on rank 0's thread 2
    return {"before": _run(tmp, "before", PLANTED), "after": _run(tmp, "after", after),
            "analysis": written_module(tmp, "toy_threads", TOY_ANALYSIS),
            "format": written_module(tmp, "toy_format", TOY_FORMAT)}


@pytest.fixture
def analysis(made, monkeypatch):
    """The toy's registry line, for this test only (its module importable by its name, as an
    installed analysis's would be: the pass and export find its functions by name)."""
    monkeypatch.setattr(sections, "SECTIONS", sections.SECTIONS + (made["analysis"].SECTION,))
    monkeypatch.setitem(sys.modules, "toy_threads", made["analysis"])
    return made


@pytest.fixture
def output_format(made, monkeypatch):
    """The output registry with the toy's line, for this test only."""
    monkeypatch.setattr(formats, "FORMATS", formats.FORMATS.extended({"threads": "toy_format:FORMAT"}))
    monkeypatch.setitem(sys.modules, "toy_format", made["format"])
    return made


def invoke(*args):
    return cli.invoke(*args).ok().output


def _files(run):
    return sorted(str(p) for p in run.glob("rank*.json.gz"))


def test_the_toy_analysis_in_the_text_table(analysis):
    lines = invoke("report", *_files(analysis["before"]), "-q").splitlines()
    at = lines.index("Events per thread")
    body = [line.split() for line in lines[at + 1:] if line.split()[:1] in (["0"], ["1"])][:3]
    assert {(int(r), t): int(n) for r, t, n in body} == COUNTS


def test_the_toy_analysis_in_markdown_and_html(analysis, tmp_path):
    text = invoke("report", *_files(analysis["before"]), "--format", "markdown", "-q")
    assert "## Events per thread\n\n| Rank | Thread | Events |\n|---|---|---|\n| 0 | 1 | 3 |\n| 0 | 2 | 5 |\n" \
           "| 1 | 7 | 2 |" in text
    page = tmp_path / "report.html"
    invoke("report", *_files(analysis["before"]), "--html", page, "-q")
    html = page.read_text()
    at = html.index("<h2>Events per thread</h2>")
    assert '<td class="num">0</td><td class="num">2</td><td class="num">5</td>' in html[at:]


def test_the_toy_analysis_in_json_and_csv(analysis):
    doc = json.loads(invoke("report", *_files(analysis["before"]), "--format", "json", "-q"))
    assert {(d["rank"], d["tid"]): d["events"] for d in doc["events_per_thread"]} == COUNTS
    text = invoke("report", *_files(analysis["before"]), "--format", "csv", "--section", "events_per_thread", "-q")
    assert {(int(r["rank"]), r["tid"]): int(r["events"]) for r in csv.DictReader(io.StringIO(text))} == COUNTS


def test_the_toy_analysis_in_combine_report(analysis, tmp_path):
    report = tmp_path / "merged.report.md"
    invoke("combine", *_files(analysis["before"]), "-o", tmp_path / "merged.json", f"--report={report}", "-q")
    assert "| 0 | 2 | 5 |" in report.read_text()


def test_the_toy_analysis_exported_as_the_plan_selects(analysis, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    for args, expected in (((), COUNTS), (("--min-duration", 50), LONG)):
        out = tmp_path / f"tables{len(args)}"
        invoke("export", *_files(analysis["before"]), "-o", out, *args, "-q")
        table = pq.read_table(out / "events_per_thread.parquet").to_pydict()
        assert {(r, t): n for r, t, n in zip(table["rank"], table["tid"], table["events"])} == expected
    assert LONG != COUNTS  # the selection left some out: the product saw the kept events only


def test_the_toy_analysis_in_diff(analysis):
    doc = json.loads(invoke("diff", analysis["before"], analysis["after"], "--format", "json", "-q"))
    rows = [r for r in doc["rows"] if r["section"] == "events_per_thread"]
    assert [(r["key"], r["metric"], r["before"], r["after"], r["delta"]) for r in rows] == \
        [("rank 0 thread 2", "events", 5.0, 6.0, 1.0)]


def test_without_its_line_no_command_has_it(made, tmp_path):
    files = _files(made["before"])
    assert "Events per thread" not in invoke("report", *files, "--format", "markdown", "-q")
    assert "events_per_thread" not in json.loads(invoke("report", *files, "--format", "json", "-q"))
    if importlib.util.find_spec("pyarrow") is not None:
        invoke("export", *files, "-o", tmp_path / "tables", "-q")
        assert not (tmp_path / "tables" / "events_per_thread.parquet").exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_toy_output_format(output_format, tmp_path, jobs):
    assert "threads" in invoke("combine", "--help")
    out = tmp_path / "merged.threads"
    invoke("combine", *_files(output_format["before"]), "-o", out, "-j", jobs, "-q")
    *lines, footer = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(d["rank"], d["tid"]): d["events"] for d in lines} == COUNTS
    assert footer["tracemerge"]["format"] == "threads"
    assert footer["tracemerge"]["events"]["out"] == sum(COUNTS.values())
