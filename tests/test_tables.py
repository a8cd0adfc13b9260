"""The aligned job as tables (issue 28): ``tracemerge export`` and ``tracemerge.load``.

Ground truth is the merged JSON that ``tracemerge combine`` writes with the same options:
the Parquet ``events`` must hold exactly its events (count, names, phases, threads, lanes,
aligned times to the ns, RPC ids), less the RPC flow arrows it draws (``rpcs`` holds those
calls); ``report``'s key averages and the summary's RPC sides must come out of the tables.
"""

import collections
import glob
import os

import orjson
import pytest
from support import cli
from support.cli import invoke

from tracemerge.place.arrows import FLOW_ID_BASE
from tracemerge.tables import TABLES, load

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = {name: sorted(glob.glob(os.path.join(ROOT, "samples", name, "*.json.gz")))
           for name in ("rpc_profiling", "parameter_server", "rl_agent", "kineto_rpc", "threads_8")}


def run(*args):
    result = invoke(*args)
    return result.exit_code, result.output


def combined(files, tmp_path, *options):
    out = tmp_path / "merged.json"
    code, text = run("combine", *files, "-o", out, "--force", "-j", 1, *options)
    assert code == 0, text
    return orjson.loads(out.read_bytes())


def exported(files, tmp_path, *options):
    out = tmp_path / "tables"
    code, text = run("export", *files, "-o", out, "--force", "-j", 1, *options)
    assert code == 0, text
    return out


def json_keys(doc):
    """The merged trace's events as comparable rows: (pid, thread, lane, name, cat, ph,
    start ns on the reference clock, dur ns, rpc_id), RPC flow arrows left out."""
    base = doc["baseTimeNanoseconds"]
    lanes = {}  # (pid, lane tid) -> (thread tid, lane)
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if e["ph"] == "M" and e.get("name") == "thread_name" and "lane_of" in args:
            lanes[(e["pid"], e["tid"])] = (str(args["lane_of"]), int(e["tid"].rpartition("(overlap ")[2][:-1]))
    keys, arrows = [], 0
    for e in doc["traceEvents"]:
        if e["ph"] in "sf" and e.get("cat") == "rpc" and isinstance(e.get("id"), int) and e["id"] >= FLOW_ID_BASE:
            arrows += 1
            continue
        tid, lane = lanes.get((e["pid"], e["tid"]), (str(e["tid"]), 0))
        args = e.get("args")
        rpc_id = args.get("rpc_id") if isinstance(args, dict) and isinstance(args.get("rpc_id"), str) else None
        keys.append((e["pid"], tid, lane, e.get("name"), e.get("cat"), e["ph"],
                     None if "ts" not in e else round(e["ts"] * 1000) + base,
                     None if "dur" not in e else round(e["dur"] * 1000), rpc_id))
    return keys, arrows


def table_keys(events):
    cols = [events.column(c).to_pylist() for c in
            ("pid", "tid", "lane", "name", "category", "phase", "start_ns", "dur_ns", "rpc_id")]
    return list(zip(*cols))


def events_of(directory):
    return pq.read_table(os.path.join(directory, "events"))


def assert_same_events(doc, events):
    want, arrows = json_keys(doc)
    got = table_keys(events)
    assert len(got) == len(want)
    assert collections.Counter(got) == collections.Counter(want)
    return arrows


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_events_are_the_merged_json_of_the_samples(sample, tmp_path):
    files = SAMPLES[sample]
    doc = combined(files, tmp_path)
    events = events_of(exported(files, tmp_path))
    arrows = assert_same_events(doc, events)
    s = doc["tracemerge"]
    assert len(events) + arrows == s["events"]["out"]
    # every RPC span of the merged trace is a row with its id and role
    assert sum(e.get("args", {}).get("rpc_id") is not None for e in doc["traceEvents"] if e["ph"] == "X") == \
        sum(1 for r, p in zip(events.column("rpc_id").to_pylist(), events.column("phase").to_pylist())
            if r is not None and p == "X")


@pytest.mark.parametrize("options", [
    ("--window", "2:40"), ("--min-duration", "5", "--drop-category", "python_function"),
    ("--ranks", "1-2", "--align", "start"), ("--overview", "50"), ("--offset", "2=-250000", "--reference", "1", "--enforce-causality")])
def test_selection_and_alignment_options_as_combine(options, tmp_path):
    files = SAMPLES["rl_agent"]
    doc = combined(files, tmp_path, *options)
    out = exported(files, tmp_path, *options)
    assert_same_events(doc, events_of(out))
    summary = orjson.loads((out / "tracemerge.json").read_bytes())
    assert summary["alignment"] == doc["tracemerge"]["alignment"]
    assert summary["events"]["filtered"] == doc["tracemerge"]["events"]["filtered"]


def test_generated_ranks_native_and_python_core(rank_files, tmp_path, monkeypatch):
    doc = combined(rank_files, tmp_path)
    assert len(doc["traceEvents"]) > 5_000
    native = events_of(exported(rank_files, tmp_path))
    assert_same_events(doc, native)
    monkeypatch.setenv("TRACEMERGE_CORE", "python")
    (tmp_path / "py").mkdir()
    python = events_of(exported(rank_files, tmp_path / "py"))
    assert sorted(table_keys(python), key=repr) == sorted(table_keys(native), key=repr)
    # the args text is the input's own JSON either way
    assert sorted(filter(None, python.column("args").to_pylist())) == sorted(
        filter(None, native.column("args").to_pylist()))


def test_generated_ranks_in_worker_processes(rank_files, tmp_path):
    doc = combined(rank_files, tmp_path)
    out = tmp_path / "tables"
    code, text = run("export", *rank_files, "-o", out, "-j", 2)
    assert code == 0, text
    assert sorted(os.listdir(out / "events")) == ["rank=0", "rank=1", "rank=2"]
    assert_same_events(doc, events_of(out))


# runs the CLI in a fresh interpreter and records whether pandas was imported when the job's
# tables are made, i.e. after every rank's events were written
NO_PANDAS_PROBE = r"""
import sys
import tracemerge.tables.parts as parts
from tracemerge.cli import main
job_level, seen = parts.job_level, []
def checked(*args, **kwargs):
    seen.append("pandas" in sys.modules)
    return job_level(*args, **kwargs)
parts.job_level = checked
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
print(seen)
"""


def test_rank_events_are_written_without_pandas(rank_files, tmp_path):
    """pa.array() imports pandas (~50 MB in a process) to check for its types: export's
    parent before the workers fork and the workers making the events never call it (issue
    28's memory target); only the job's tables, made after the workers end, may."""
    r = cli.run("export", *rank_files, "-o", tmp_path / "t", "-j", "1", "-q", code=NO_PANDAS_PROBE)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split()[-1] == "[False]"


def report_rows(files, tmp_path):
    out = tmp_path / "report.json"
    code, text = run("report", *files, "--format", "json", "--row-limit", 0, "-o", out)
    assert code == 0, text
    return {r["key"]: r for r in orjson.loads(out.read_bytes())["key_averages"]}


@pytest.mark.parametrize("sample", ["rl_agent", "parameter_server", "threads_8"])
def test_duckdb_reproduces_report_cpu_totals_of_top_level_ops(sample, tmp_path):
    files = SAMPLES[sample]
    out = exported(files, tmp_path)
    glob_ = os.path.join(out, "events", "*", "*.parquet")
    # top-level spans: no other span of the same thread (lanes included) encloses them
    top = duckdb.sql(f"""
        with x as (select rank, pid, tid, name, start_ns as s, start_ns + dur_ns as e, dur_ns
                   from read_parquet('{glob_}', hive_partitioning = true) where phase = 'X')
        select regexp_replace(a.name, '^ProfilerStep#\\d+$', 'ProfilerStep*') as key,
               count(*) as n, sum(a.dur_ns) / 1000.0 as total_us
        from x a
        where not exists (select 1 from x b where b.rank = a.rank and b.pid = a.pid and b.tid = a.tid
                          and b.s <= a.s and b.e >= a.e and (b.s, -b.e) < (a.s, -a.e))
        group by key""").fetchall()
    rows = report_rows(files, tmp_path)
    matched = 0
    for key, n, total in top:
        row = rows.get(key)
        if row is None or row["count"] != n:
            continue  # not a host op torch counts, or the name also occurs nested
        assert total == pytest.approx(row["cpu_time_total"], rel=1e-9, abs=1e-6), key
        matched += 1
    assert matched >= 3
    # and the exported key_averages table is the report's
    table = pq.read_table(out / "key_averages.parquet").to_pylist()
    assert {r["key"]: (r["count"], pytest.approx(r["cpu_time_total_us"])) for r in table} == \
        {k: (r["count"], r["cpu_time_total"]) for k, r in rows.items()}


@pytest.mark.parametrize("sample", ["rpc_profiling", "parameter_server", "rl_agent"])
def test_rpcs_agree_with_the_merged_summary(sample, tmp_path):
    files = SAMPLES[sample]
    sides = combined(files, tmp_path)["tracemerge"]["rpc_sides"]
    rpcs = pq.read_table(exported(files, tmp_path) / "rpcs.parquet").to_pandas()
    assert len(rpcs) == sides["calls"] > 0
    assert (rpcs.sides == "both").sum() == sides["both_sides"]
    assert (rpcs.sides == "caller_only").sum() == sides["caller_only"]
    assert (rpcs.sides == "callee_only").sum() == sides["callee_only"]
    both = rpcs[rpcs.sides == "both"]
    # on one clock the four times are in causal order (aligned by shared clock or RPC bands)
    assert (both.t1_ns <= both.t4_ns).all() and (both.t2_ns <= both.t3_ns).all()
    assert both.caller_tid.notna().all() and both.callee_tid.notna().all()


def test_every_table_round_trips_through_pandas_arrow_and_parquet(tmp_path):
    files = SAMPLES["rpc_profiling"]
    tables = load(files)
    assert set(tables.arrow) == set(TABLES)
    out = exported(files, tmp_path, "--critical-path", "--gpu")
    for name in TABLES:
        table = tables.arrow[name]
        assert table.num_rows or name in ("collectives", "collective_stats", "gpu"), name
        df = getattr(tables, name)
        assert isinstance(df, pd.DataFrame) and len(df) == table.num_rows
        back = pa.Table.from_pandas(df, schema=table.schema, preserve_index=False)
        assert back.equals(table), name
        if name == "events":
            written = events_of(out)
            cols = [c for c in table.column_names if c != "rank"]
            assert sorted(table_keys(written), key=repr) == sorted(table_keys(table), key=repr)
            assert sorted(map(repr, written.select(cols).to_pylist())) == \
                sorted(map(repr, table.select(cols).to_pylist()))
        else:
            assert pq.read_table(out / f"{name}.parquet").equals(table), name
    # ns stay integers in pandas, nulls included
    assert str(tables.events.start_ns.dtype) == "Int64"


def test_errors_are_one_line_with_exit_codes(tmp_path):
    files = SAMPLES["rpc_profiling"]
    out = tmp_path / "t"
    out.mkdir()
    code, text = run("export", *files, "-o", out)
    assert code == 5 and text.count("\n") == 1 and "exists" in text
    code, text = run("export", str(tmp_path / "missing.json"), "-o", tmp_path / "u")
    assert code == 3 and text.startswith("tracemerge: error:")
    code, text = run("export", *files, "-o", tmp_path / "u", "--ranks", "7")
    assert code == 2
    code, text = run("export", *files, "-o", tmp_path / "nodir" / "x")
    assert code == 5
    assert sorted(os.listdir(tmp_path)) == ["t"]  # nothing half-written left behind
    code, text = run("export", *files, "-o", out, "--force")
    assert code == 0 and os.path.isdir(out / "events")


def test_dask_engine_writes_the_same_events(tmp_path):
    pytest.importorskip("distributed")
    files = SAMPLES["rl_agent"]
    local = events_of(exported(files, tmp_path))
    out = tmp_path / "dask"
    code, text = run("export", *files, "-o", out, "--engine", "dask", "-j", 2)
    assert code == 0, text
    assert sorted(map(repr, events_of(out).to_pylist())) == sorted(map(repr, local.to_pylist()))
    assert pq.read_table(out / "rpcs.parquet").equals(pq.read_table(tmp_path / "tables" / "rpcs.parquet"))


def test_gpu_table_is_the_reports_gpu_section(rank_files, tmp_path):
    out = exported(rank_files, tmp_path, "--gpu")
    report = tmp_path / "report.json"
    code, text = run("report", *rank_files, "--format", "json", "-o", report)
    assert code == 0, text
    want = orjson.loads(report.read_bytes())["gpu"]
    got = pq.read_table(out / "gpu.parquet").to_pylist()
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert g["rank"] == w["rank"]
        for key in ("window_us", "compute_us", "communication_us", "memory_us", "idle_us", "overlap_us"):
            assert g[key] == pytest.approx(w[key]), key
        assert g["launch_delay_p50_us"] == pytest.approx(w["launch_delay_us"]["p50"])
        assert g["top_kernel"] == w["top_kernels"][0]["name"]
