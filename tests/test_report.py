"""tracemerge report: grouping, sorting, every format, remote-op naming, RPC breakdown, hints, HTML."""

import csv
import glob
import gzip
import io
import json
import re
from html.parser import HTMLParser

import orjson
import pytest
from support import synth
from support.cli import invoke
from support.ranks import rpc_records

SAMPLES = "samples"
MS = 1_000_000


def rank_file(path, rank, events, rpcs=(), collectives=(), base=1_700_000_000_000_000_000):
    block = {"version": 1, "job_id": "job", "rank": rank, "world_size": 2, "worker_name": f"worker{rank}",
             "hostname": "h", "pid": 100 + rank, "cycle": None, "profile_start_ns": base, "profile_stop_ns": base + 10**9,
             "rpcs": list(rpcs), "collectives": list(collectives)}
    doc = {"tracemerge": block, "baseTimeNanoseconds": base, "traceEvents": events}
    path.write_bytes(gzip.compress(orjson.dumps(doc)))
    return path


def op(name, tid, ts_us, dur_us, cat="cpu_op", pid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts_us, "dur": dur_us}


@pytest.fixture
def two_ranks(tmp_path):
    """Rank 0 calls rank 1 sequentially: 20 ms sleeps, 0.3 ms each way; rank 1's clock reads 5 ms ahead."""
    base0, base1 = 1_700_000_000_000_000_000, 1_700_000_000_005_000_000
    rpcs0, rpcs1, ev0, ev1 = [], [], [], []
    t = 0
    for i in range(10):
        t1, t2, t3 = t, t + 300_000, t + 300_000 + 20 * MS
        t4 = t3 + 300_000
        sent, served = rpc_records(f"0:{i}", 0, 1, base0 + t1, base1 + t2, base1 + t3, base0 + t4, kind="rpc_sync",
                                   func="sleepy", worker="worker", names=True)
        name = sent["name"]
        rpcs0.append(sent)
        rpcs1.append(served)
        ev0.append(op(name, 1, t1 / 1000, (t4 - t1) / 1000, "user_annotation"))
        ev1.append(op(name + "#remote", 9, t2 / 1000, (t3 - t2) / 1000, "user_annotation"))
        ev1.append(op("aten::mul", 9, t2 / 1000 + 5, 100))
        ev1.append(op("aten::add", 9, t2 / 1000 + 200, 50))
        ev0.append(op("aten::add", 1, t4 / 1000 + 10, 30))
        t = t4 + MS
    coll = [{"op": "all_reduce", "group": "0", "group_ranks": [0, 1], "seq": s, "bytes": 4096} for s in range(3)]
    c0 = [{**c, "start_ns": base0 + 300 * MS + c["seq"] * MS, "end_ns": base0 + 310 * MS + c["seq"] * MS} for c in coll]
    # rank 1 arrives 2 ms later (its clock reads 5 ms ahead, so +7 ms as written)
    c1 = [{**c, "start_ns": base1 + 302 * MS + c["seq"] * MS, "end_ns": base1 + 310 * MS + c["seq"] * MS} for c in coll]
    return [rank_file(tmp_path / "rank0.json.gz", 0, ev0, rpcs0, c0, base0),
            rank_file(tmp_path / "rank1.json.gz", 1, ev1, rpcs1, c1, base1)]


def as_json(*args):
    r = invoke("report", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_rpc_breakdown_with_known_sleeps(two_ranks):
    doc = as_json(*two_ranks, "--align", "wall")
    (key,) = doc["rpc"]["keys"]
    assert key["count"] == key["complete"] == 10
    assert key["e2e_us"]["mean"] == pytest.approx(20_600)
    assert key["exec_us"]["p99"] == pytest.approx(20_000)
    assert key["overhead_us"]["max"] == pytest.approx(600)
    # the 5 ms offset between the clocks does not show up as queueing
    assert key["queue_us"]["max"] == pytest.approx(0)
    (callee,) = doc["rpc"]["callees"]
    assert callee["threads"] == 1 and callee["max_concurrent"] == 1 and callee["hint"] == ""
    (coll,) = doc["collectives"]
    assert coll["count"] == coll["complete"] == 3 and coll["bytes"] == 3 * 2 * 4096
    assert coll["skew_us"]["mean"] == pytest.approx(7000)   # wall clocks: rank 1 looks 7 ms late
    assert coll["slowest_rank"] == 1 and coll["wait_us"]["0"] == pytest.approx(7000)


def test_grouping_and_node_ids(two_ranks):
    by_name = {r["key"]: r for r in as_json(*two_ranks, "--row-limit", "0")["key_averages"]}
    assert by_name["aten::add"]["count"] == 20 and by_name["aten::add"]["node_id"] == -1
    assert by_name["aten::mul"]["node_id"] == 1
    by_rank = as_json(*two_ranks, "--group-by", "name,rank", "--row-limit", "0")["key_averages"]
    adds = sorted((r["node_id"], r["count"], r["cpu_time_total"]) for r in by_rank if r["key"] == "aten::add")
    assert adds == [(0, 10, 300.0), (1, 10, 500.0)]
    for r in by_rank:
        assert set(r) == {"key", "count", "node_id", "cpu_time_total", "self_cpu_time_total", "cpu_time"}
        assert r["cpu_time"] == pytest.approx(r["cpu_time_total"] / r["count"])


@pytest.mark.parametrize("key", ["cpu_time_total", "self_cpu_time_total", "cpu_time", "count", "key", "node_id"])
def test_sorting_and_row_limit(two_ranks, key):
    rows = as_json(*two_ranks, "--group-by", "name,rank", "--sort-by", key, "--row-limit", "3")["key_averages"]
    assert len(rows) == 3
    values = [r[key] for r in rows]
    assert values == (sorted(values) if key == "key" else sorted(values, reverse=True))


def test_remote_ops_naming(two_ranks):
    keys = {r["key"]: r for r in as_json(*two_ranks, "--remote-ops", "--row-limit", "0")["key_averages"]}
    remote = keys["rpc_sync#sleepy(worker0 -> worker1)#remote_op: mul"]
    assert remote["count"] == 10 and remote["node_id"] == 1
    assert "aten::mul" not in keys
    assert keys["aten::add"]["count"] == 10 and keys["aten::add"]["node_id"] == 0   # caller's add keeps its name
    assert keys["rpc_sync#sleepy(worker0 -> worker1)#remote"]["self_cpu_time_total"] == pytest.approx(10 * (20_000 - 150))


def test_remote_ops_on_captured_sample():
    files = sorted(glob.glob(f"{SAMPLES}/rpc_profiling/rank*.json.gz"))
    if not files:
        pytest.skip("samples/rpc_profiling not captured")
    keys = [r["key"] for r in as_json(*files, "--remote-ops", "--row-limit", "0")["key_averages"]]
    assert any(re.fullmatch(r"rpc_(async|sync)#.+\(worker0 -> worker1\)#remote_op: \w+", k) for k in keys), keys


def test_thread_limited_hint_1_vs_8_threads():
    one = sorted(glob.glob(f"{SAMPLES}/threads_1/rank*.json.gz"))
    eight = sorted(glob.glob(f"{SAMPLES}/threads_8/rank*.json.gz"))
    if not (one and eight):
        pytest.skip("samples/threads_1, threads_8 not captured")
    r1, r8 = invoke("report", *one), invoke("report", *eight)
    assert r1.exit_code == r8.exit_code == 0
    assert "thread-limited" in r1.stderr and "thread-limited" in r1.stdout
    assert "thread-limited" not in r8.stderr + r8.stdout
    c1 = as_json(*one)["rpc"]["callees"][0]
    c8 = as_json(*eight)["rpc"]["callees"][0]
    assert c1["max_concurrent"] == 1 and c8["max_concurrent"] > 1
    assert c1["queue_mean_us"] > c8["queue_mean_us"]


def test_synthetic_thread_limit(tmp_path):
    """8 concurrent 10 ms calls: one server thread serialises and queues them, eight run them at once."""
    def job(threads, sub):
        sub.mkdir()
        base = 1_700_000_000_000_000_000
        rpcs0, rpcs1, ev1 = [], [], []
        for i in range(8):
            name = "rpc_async#work(worker0 -> worker1)"
            head = {"rpc_id": f"0:{i}", "kind": "rpc_async", "func": "work", "name": name, "caller": 0, "callee": 1}
            t2 = 300_000 + (10 * MS * i if threads == 1 else 0)
            t3 = t2 + 10 * MS
            rpcs0.append({**head, "role": "caller", "send_ns": base, "complete_ns": base + t3 + 300_000})
            rpcs1.append({**head, "role": "callee", "start_ns": base + t2, "end_ns": base + t3})
            ev1.append(op(name + "#remote", 10 + (i % threads), t2 / 1000, 10_000, "user_annotation"))
        return [rank_file(sub / "rank0.json.gz", 0, [op("x", 1, 0, 1)], rpcs0, base=base),
                rank_file(sub / "rank1.json.gz", 1, ev1, rpcs1, base=base)]
    serial = as_json(*job(1, tmp_path / "a"), "--align", "wall")["rpc"]
    parallel = as_json(*job(8, tmp_path / "b"), "--align", "wall")["rpc"]
    s, p = serial["callees"][0], parallel["callees"][0]
    assert (s["threads"], s["max_concurrent"], p["threads"], p["max_concurrent"]) == (1, 1, 8, 8)
    assert s["queue_mean_us"] == pytest.approx(35_000) and p["queue_mean_us"] == 0
    assert s["all_busy_share"] == pytest.approx(1.0)
    assert "thread-limited" in s["hint"] and p["hint"] == ""


def test_formats_agree(two_ranks, tmp_path):
    rows = as_json(*two_ranks, "--group-by", "name,rank")["key_averages"]
    r = invoke("report", *two_ranks, "--group-by", "name,rank", "--format", "csv")
    parsed = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(p["key"], int(p["count"]), int(p["node_id"])) for p in parsed] == \
        [(x["key"], x["count"], x["node_id"]) for x in rows]
    table = invoke("report", *two_ranks, "--group-by", "name,rank").stdout
    for header in ("Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls", "Node ID"):
        assert header in table
    assert re.search(r"aten::mul\s+\S+%\s+1\.000ms\s+\S+%\s+1\.000ms\s+100\.000us\s+10\s+1\s*$", table, re.M)
    assert "Self CPU time total:" in table and "RPC latency" in table and "Collectives" in table
    md = invoke("report", *two_ranks, "--format", "markdown").stdout
    assert "| Name | Self CPU % |" in md and "## RPC latency" in md and "| `aten::mul` |" in md
    out = tmp_path / "r.json"
    assert invoke("report", *two_ranks, "--format", "json", "-o", out).exit_code == 0
    assert json.loads(out.read_text())["key_averages"][0]["key"] == rows[0]["key"]


def test_merged_trace_recovers_node_ids(two_ranks, tmp_path):
    merged = tmp_path / "merged.json"
    r = invoke("combine", *two_ranks, "-o", merged, "--report")
    assert r.exit_code == 0, r.stderr
    assert "RPC latency" in (tmp_path / "merged.report.txt").read_text()
    direct = as_json(*two_ranks, "--group-by", "name,rank", "--row-limit", "0")["key_averages"]
    from_merged = as_json(merged, "--group-by", "name,rank", "--row-limit", "0")["key_averages"]
    key = lambda r: (r["key"], r["node_id"])  # noqa: E731
    assert sorted(map(key, from_merged)) == sorted(map(key, direct))
    d = {key(r): r for r in direct}
    for r in from_merged:
        assert r["count"] == d[key(r)]["count"]
        assert r["self_cpu_time_total"] == pytest.approx(d[key(r)]["self_cpu_time_total"])


def test_combine_report_never_replaces_the_trace_or_an_existing_file(two_ranks, tmp_path):
    merged = tmp_path / "merged.json"
    r = invoke("combine", *two_ranks, "-o", merged, f"--report={merged}")
    assert r.exit_code == 5 and "the report would replace the merged trace" in r.stderr
    assert not merged.exists()
    report = tmp_path / "r.txt"
    report.write_text("keep")
    r = invoke("combine", *two_ranks, "-o", merged, f"--report={report}")
    assert r.exit_code == 5 and f"{report}: exists; pass --force" in r.stderr
    assert report.read_text() == "keep" and not merged.exists()
    assert invoke("combine", *two_ranks, "-o", merged, f"--report={report}", "--force").exit_code == 0
    assert "RPC latency" in report.read_text() and orjson.loads(merged.read_bytes())["traceEvents"]


class _Checker(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "rect", "line"}

    def __init__(self):
        super().__init__()
        self.stack, self.urls = [], []

    def handle_starttag(self, tag, attrs):
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def test_html_is_self_contained_and_well_formed(two_ranks, tmp_path):
    page = tmp_path / "r.html"
    assert invoke("report", *two_ranks, "--html", page, "-o", tmp_path / "r.txt").exit_code == 0
    text = page.read_text()
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert checker.stack == [] and checker.urls == []
    assert "http://" not in text and "https://" not in text
    assert text.count("<svg") >= 4 and "rpc_sync#sleepy(worker0 -&gt; worker1)" in text


def test_html_latency_bar_adds_up_to_the_mean_and_labels_clear_the_error_bars(tmp_path):
    """Queueing is part of the overhead δ: the stacked mean must not count it twice."""
    files = sorted(glob.glob(f"{SAMPLES}/threads_1/rank*.json.gz"))
    page = tmp_path / "r.html"
    assert invoke("report", *files, "--html", page, "-o", tmp_path / "r.txt").exit_code == 0
    key = next(k for k in as_json(*files)["rpc"]["keys"] if k["func"] == "heavy_udf")
    assert key["queue_us"]["mean"] > 0.2 * key["overhead_us"]["mean"]  # enough queueing to matter
    svg = page.read_text()
    num = r'"([-\d.]+)"'
    box_w = float(re.search(rf'<rect x={num} y={num} width={num} height="12" fill="#cfe0fc"', svg).group(3))
    us_per_px = (key["e2e_us"]["p99"] - key["e2e_us"]["p50"]) / box_w
    split = [float(m[1]) for m in re.findall(rf'<rect x={num} y="20" width={num} height="10"', svg)]
    assert len(split) == 3
    assert sum(split) * us_per_px == pytest.approx(key["e2e_us"]["mean"], rel=0.02)


def test_html_offset_labels_clear_the_error_bars(tmp_path):
    # parameter_server's ranks given machines of their own: ranks 1 and 2 are estimated, with error bars
    docs = {r: orjson.loads(gzip.decompress(open(f"{SAMPLES}/parameter_server/rank{r}.json.gz", "rb").read()))
            for r in range(3)}
    moved, _ = synth.on_machines(docs, {1: (2_000_000, 0.0), 2: (-3_000_000, 0.0)},
                                 docs[0]["tracemerge"]["profile_start_ns"])
    files = synth.write_docs(moved, tmp_path)
    page = tmp_path / "r.html"
    assert invoke("report", *files, "--html", page, "-o", tmp_path / "r.txt").exit_code == 0
    num = r'"([-\d.]+)"'
    # rank 1's offset value is written right of its error bar, not across it
    line_end, label_x = re.search(rf'<line x1={num} y1="33" x2={num}[^>]*/><text x={num} y="37"',
                                  page.read_text()).group(2, 3)
    assert float(label_x) > float(line_end)


def test_negative_row_limit_is_a_usage_error(two_ranks):
    r = invoke("report", *two_ranks, "--row-limit", "-1")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--row-limit" in r.stderr


def test_bad_input_is_one_line_error(tmp_path):
    bad = tmp_path / "rank0.json"
    bad.write_text("{not json")
    r = invoke("report", bad, "-o", tmp_path / "out.txt")
    assert r.exit_code == 3 and "rank0.json" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("builtin", [False, True])
def test_a_builtins_server_thread_is_counted_as_a_wrapped_calls(tmp_path, builtin):
    """Three rpc_sync calls one after another, served by three threads of rank 1 (7, 8, 9):
    the RPC report's callee has 3 server threads, whether the calls were wrapped (their
    #remote spans) or builtins sent as themselves, whose ops the job pairs (issue 45)
    — not the 1 their peak concurrency would say."""
    from support.ranks import Ranks

    j = Ranks(2)
    call = j.builtin if builtin else j.rpc
    for k, tid in enumerate((7, 8, 9)):
        call(0, 1, "aten::add", 1000 * k, 1000 * k + 100, 1000 * k + 400, 1000 * k + 500, callee_tid=tid,
             kind="rpc_sync")
    j.job(tmp_path)   # writes the rank files
    doc = as_json(tmp_path / "rank0.json", tmp_path / "rank1.json")
    [callee] = doc["rpc"]["callees"]
    assert (callee["callee"], callee["calls"], callee["max_concurrent"]) == (1, 3, 1)
    assert callee["threads"] == 3


def test_a_merged_trace_counts_a_drawn_callee_span_on_its_callee(tmp_path):
    """The recipe's builtins (torch.add, torch.mul, sent as themselves): in the merged trace
    their callee spans are the ones combine drew, on a process of their own in rank 1's pid
    block. Its report gives each the callee's Node ID (1), one call and the time of the op
    that served it (the callee file's served_ops), and counts the op's thread among the
    callee's server threads, as the report of the rank files does (issue 45)."""
    files = sorted(glob.glob("samples/rpc_profiling/rank*.json.gz"))
    with gzip.open(files[1]) as f:
        callee = json.load(f)
    ops = {op["name"]: op for op in callee["tracemerge"]["served_ops"]}
    # the threads that served calls: the builtins' ops' and the wrapped calls' #remote spans'
    threads = {op["tid"] for op in ops.values()} | {e["tid"] for e in callee["traceEvents"]
                                                    if str(e.get("name", "")).endswith("#remote")}
    merged = tmp_path / "merged.json"
    assert invoke("combine", *files, "-o", merged).exit_code == 0
    from_merged, direct = as_json(merged, "--group-by", "name,rank"), as_json(*files, "--group-by", "name,rank")
    for doc in (from_merged, direct):
        rows = {(r["key"], r["node_id"]): r for r in doc["key_averages"]}
        for func in ("aten::add", "aten::mul"):
            row = rows[(f"rpc_async#{func}(worker0 -> worker1)#remote", 1)]
            op = ops[func]
            assert row["count"] == 1
            assert row["cpu_time_total"] == pytest.approx((op["end_ns"] - op["start_ns"]) / 1000)
    assert [c["threads"] for c in from_merged["rpc"]["callees"]] == [c["threads"] for c in direct["rpc"]["callees"]] \
        == [len(threads)]
