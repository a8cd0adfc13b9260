"""tracemerge diff: reports compared row by row, by key, largest change first."""

import glob
import json
import os

import pytest

from tracemerge.job import Session
from tracemerge.report.build import Report, build_report
from tracemerge.report.diff import diff_reports
from tracemerge.report.keyavg import KeyAverage
from tracemerge.report.rpcstats import RpcKeyStats, RpcReport


def report(rows, rpc_keys=(), callees=()):
    rpc = RpcReport(keys=list(rpc_keys), callees=list(callees)) if rpc_keys or callees else None
    return Report(key_averages=rows, group_by="name", ranks=[], clocks=[], reference=0, align="auto", rpc=rpc)


def key(name, us, count=4, queue=0.0, exe=100.0, overhead=200.0):
    return RpcKeyStats(name=name, kind="rpc_async", func="f", caller=0, callee=1, count=count, complete=count,
                       errors=0, e2e_us={"mean": us}, exec_us={"mean": exe}, overhead_us={"mean": overhead},
                       queue_us={"mean": queue})


def test_rows_matched_by_key_with_deltas_and_sorted_by_impact():
    before = report([KeyAverage("aten::mm", 2, 0, 100.0, 80.0), KeyAverage("aten::add", 1, 0, 10.0, 10.0),
                     KeyAverage("rpc_async#f(worker0 -> worker1)", 4, 0, 9000.0, 9000.0)],
                    [key("rpc_async#f(worker0 -> worker1)", 1300.0, queue=1000.0, exe=100.0, overhead=1200.0)])
    after = report([KeyAverage("aten::mm", 3, 0, 150.0, 120.0), KeyAverage("aten::relu", 5, 0, 20.0, 20.0)],
                   [key("rpc_async#f(worker0 -> worker1)", 400.0, queue=100.0, exe=100.0, overhead=300.0)])
    d = diff_reports(before, after)
    rows = {(r.section, r.key, r.metric): r for r in d.rows}
    # end-to-end 4 x 1300 -> 4 x 400 µs and queueing 4 x 1000 -> 4 x 100 µs tie; section, key, metric order
    top = d.rows[0]
    assert (top.section, top.metric, top.before, top.after, top.delta) == ("rpc", "end-to-end", 5200.0, 1600.0, -3600.0)
    q = rows[("rpc", "rpc_async#f(worker0 -> worker1)", "queueing")]
    assert (q.before, q.after, q.delta, q.impact) == (4000.0, 400.0, -3600.0, 3600.0)
    assert q.relative == pytest.approx(-0.9)
    # transfer = overhead - queueing: 4 x 200 µs on both sides, unchanged, so no row
    assert ("rpc", "rpc_async#f(worker0 -> worker1)", "transfer") not in rows
    mm = rows[("key_averages", "aten::mm", "cpu_time_total")]
    assert (mm.before, mm.after, mm.delta, mm.relative) == (100.0, 150.0, 50.0, 0.5)
    count = rows[("key_averages", "aten::mm", "count")]
    assert (count.delta, count.impact) == (1.0, 0.0)
    gone, new = rows[("key_averages", "aten::add", "cpu_time_total")], rows[("key_averages", "aten::relu", "self_cpu_time_total")]
    assert (gone.after, gone.delta, gone.relative) == (None, -10.0, -1.0)
    assert (new.before, new.delta, new.relative) == (None, 20.0, None)
    assert not any(r.key.startswith("rpc_async#") for r in d.rows if r.section == "key_averages")
    impacts = [r.impact for r in d.rows]
    assert impacts == sorted(impacts, reverse=True)


def test_unchanged_rows_are_left_out():
    same = report([KeyAverage("aten::mm", 2, 0, 100.0, 80.0)])
    assert diff_reports(same, same).rows == []


def test_threads_1_to_8_queueing_drop_on_top():
    reports = [build_report(sorted(glob.glob(f"samples/{s}/rank*.json.gz")), Session.open)
               for s in ("threads_1", "threads_8")]
    rows = diff_reports(*reports).rows
    # the end-to-end time drops by the queueing it no longer has, and more: both come first
    assert {r.metric for r in rows[:2]} == {"end-to-end", "queueing"} and all(r.delta < 0 for r in rows[:2])
    top = next(r for r in rows[:2] if r.metric == "queueing")
    callee = reports[0].rpc.callees[0]
    assert top.before == pytest.approx(callee.queue_mean_us * callee.calls)


def _run_dir(tmp_path, name, sample):
    """A directory as a user leaves it after a run: the rank files, the merged trace combine
    wrote beside them, and a JSON that is no trace."""
    import shutil

    from support import cli
    where = tmp_path / name
    where.mkdir()
    for f in sorted(glob.glob(f"samples/{sample}/rank*.json.gz")):
        shutil.copy(f, where)
    ranks = sorted(str(p) for p in where.iterdir())
    assert cli.run("combine", *ranks, "-o", where / "trace.json").exit_code == 0
    (where / "config.json").write_text('{"lr": 0.1, "num_worker_threads": 1}')
    return where, ranks


def test_diff_of_run_directories_takes_their_rank_files_and_says_what_it_left_out(tmp_path):
    from support import cli
    before, _ = _run_dir(tmp_path, "before", "threads_1")
    after, _ = _run_dir(tmp_path, "after", "threads_8")
    r = cli.run("diff", before, after, "--format", "json")
    assert r.exit_code == 0, r.stderr
    err = r.stderr
    for d in (before, after):
        assert f"left out {d / 'trace.json'}: a merged trace" in err
        assert f"left out {d / 'config.json'}: not a trace" in err
    # the same rows as the rank files alone give
    alone = cli.run("diff", "samples/threads_1", "samples/threads_8", "--format", "json")
    assert alone.exit_code == 0
    assert json.loads(alone.stdout)["rows"] == json.loads(r.stdout)["rows"]


def test_a_directory_holding_only_a_merged_trace_is_that_run(tmp_path):
    from support import cli
    before, ranks = _run_dir(tmp_path, "before", "threads_1")
    for f in ranks:
        os.unlink(f)
    r = cli.run("diff", before, "samples/threads_8", "--format", "json")
    assert r.exit_code == 0, r.stderr
    (before / "second.json").write_bytes((before / "trace.json").read_bytes())
    r = cli.run("diff", before, "samples/threads_8")
    assert r.exit_code == 2 and "2 merged traces and no rank files" in r.stderr


def test_report_of_a_merged_trace_says_analysis_needs_the_rank_files(tmp_path):
    from support import cli
    before, _ = _run_dir(tmp_path, "run", "threads_1")
    r = cli.run("report", before / "trace.json", "--analysis", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert "--analysis: not done on a merged trace" in r.stderr
    assert any(n.startswith("--analysis: not done") for n in json.loads(r.stdout)["notes"])
