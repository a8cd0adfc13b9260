"""The analyses through the command line: report's keys, sections and page, and tracemerge diff."""

import csv
import glob
import io
import json

from support.cli import invoke

SAMPLE = sorted(glob.glob("samples/threads_1/rank*.json.gz"))
OLD_KEYS = ["key_averages", "group_by", "ranks", "reference", "align", "alignment", "rpc", "collectives", "notes"]


def test_report_json_has_the_critical_path_windows_with_the_issue_names():
    plain = invoke("report", *SAMPLE, "--format", "json")
    assert list(json.loads(plain.stdout)) == OLD_KEYS   # without --analysis the report is as it was
    r = invoke("report", *SAMPLE, "--format", "json", "--analysis")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert list(doc)[:len(OLD_KEYS)] == OLD_KEYS   # the existing keys come first, unchanged in order
    assert {k: doc[k] for k in OLD_KEYS} == json.loads(plain.stdout)
    assert {"critical_path", "critical_path_totals", "wait_states", "stragglers"} <= set(doc)
    [w] = doc["critical_path"]
    assert set(w) == {"window", "start_ns", "end_ns", "segments"} and w["window"] == "trace"
    segs = w["segments"]
    assert all(set(s) == {"rank", "tid", "name", "kind", "start_ns", "end_ns"} for s in segs)
    assert segs[0]["start_ns"] == w["start_ns"] and segs[-1]["end_ns"] == w["end_ns"]
    assert all(a["end_ns"] == b["start_ns"] for a, b in zip(segs, segs[1:]))
    kinds = {"compute", "RPC transfer", "callee queueing", "callee execution", "waiting in a collective"}
    assert {s["kind"] for s in segs} <= kinds
    totals = doc["critical_path_totals"]["by_kind"]
    assert sum(totals.values()) == w["end_ns"] - w["start_ns"]


def test_report_on_a_merged_trace_keeps_its_keys(tmp_path):
    out = tmp_path / "m.json"
    assert invoke("combine", *SAMPLE, "-o", out).exit_code == 0
    r = invoke("report", out, "--format", "json", "--analysis")
    assert r.exit_code == 0 and list(json.loads(r.stdout)) == OLD_KEYS


def test_report_csv_sections():
    r = invoke("report", *SAMPLE, "--format", "csv", "--section", "critical_path")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0]) == ["window", "rank", "tid", "name", "kind", "start_ns", "end_ns"]
    assert rows[0]["window"] == "trace"
    r = invoke("report", *SAMPLE, "--format", "csv", "--section", "rpc_waits")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows[0]["name"] == "rpc_async#heavy_udf(worker0 -> worker1)" and rows[0]["calls"] == "4"
    default = invoke("report", *SAMPLE, "--format", "csv").stdout
    assert default.splitlines()[0] == "key,count,node_id,cpu_time_total,self_cpu_time_total,cpu_time"
    r = invoke("report", *SAMPLE, "--section", "critical_path")
    assert r.exit_code == 2 and "--section" in r.stderr


def test_report_table_markdown_and_html_show_the_analyses(tmp_path):
    table = invoke("report", *SAMPLE, "--analysis").stdout
    for title in ("Critical path by rank and kind", "Critical path: where the time went", "Wait states: RPC"):
        assert title in table
    assert table.startswith(invoke("report", *SAMPLE).stdout.split("\nhint: ")[0])   # added after the old sections
    md = invoke("report", *SAMPLE, "--format", "markdown", "--analysis").stdout
    assert "## Critical path per window" in md and "## Wait states per rank" in md
    page = tmp_path / "r.html"
    assert invoke("report", *SAMPLE, "--html", page, "--analysis").exit_code == 0
    html = page.read_text()
    assert "<h2>Critical path</h2>" in html and "callee execution" in html and "<svg" in html


def test_diff_of_directories_puts_the_queueing_drop_on_top(tmp_path):
    # 8 threads instead of 1: the calls stop queueing, so their end-to-end time and their
    # queueing drop the most (the largest change comes first)
    r = invoke("diff", "samples/threads_1", "samples/threads_8")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("Delta"))
    top = lines[header + 2:header + 4]
    assert all(line.lstrip().startswith("-") for line in top) and any("queueing" in line for line in top)
    doc = json.loads(invoke("diff", "samples/threads_1", "samples/threads_8", "--format", "json").stdout)
    assert {row["metric"] for row in doc["rows"][:2]} == {"end-to-end", "queueing"}
    assert all(row["delta"] < 0 for row in doc["rows"][:2])
    assert doc["before"] == sorted(glob.glob("samples/threads_1/*.json.gz"))
    rows = list(csv.DictReader(io.StringIO(invoke("diff", "samples/threads_1", "samples/threads_8",
                                               "--format", "csv").stdout)))
    assert len(rows) == len(doc["rows"]) and [r["metric"] for r in rows[:2]] == [r["metric"] for r in doc["rows"][:2]]
    md = invoke("diff", "samples/threads_1", "samples/threads_8", "--format", "markdown").stdout
    assert md.startswith("## Diff")
    page = tmp_path / "d.html"
    assert invoke("diff", "samples/threads_1", "samples/threads_8", "--html", page, "-o", tmp_path / "d.txt").exit_code == 0
    assert "tracemerge diff" in page.read_text() and "queueing" in (tmp_path / "d.txt").read_text()


def test_diff_accepts_globs_and_merged_traces(tmp_path):
    merged = tmp_path / "m.json"
    assert invoke("combine", *sorted(glob.glob("samples/threads_8/rank*.json.gz")), "-o", merged).exit_code == 0
    r = invoke("diff", "samples/threads_1/rank*.json.gz", merged, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    # the merged trace keeps its inputs' records: every section is compared
    assert {row["section"] for row in doc["rows"] if row["after"] is not None} == {"key_averages", "rpc", "callee"}


def test_diff_of_an_empty_directory_is_a_usage_error(tmp_path):
    r = invoke("diff", tmp_path, "samples/threads_8")
    assert r.exit_code == 2 and str(tmp_path) in r.stderr and "no .json" in r.stderr


def test_readme_diff_example_is_the_real_output():
    readme = open("README.md", encoding="utf-8").read()
    command = "$ tracemerge diff samples/threads_1 samples/threads_8 --row-limit 10\n"
    shown = readme.split(command, 1)[1].split("```", 1)[0]
    r = invoke("diff", "samples/threads_1", "samples/threads_8", "--row-limit", "10")
    assert r.exit_code == 0 and r.stdout == shown
