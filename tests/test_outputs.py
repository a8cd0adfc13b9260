"""Outputs right in every case (issue 16): stdout equals a file whatever the placement does,
merged traces and .pftrace files as inputs of info and report, the HTML report's labels
and busy timeline, --remote-ops names in the table."""

import glob
import gzip
import json
import os
import re

import pytest
from support import cli
from support.paths import SAMPLES
from support.ranks import BASE, calling_ranks, rank_file, write, x


def shifted_ranks(tmp_path):
    """Two rank files whose profilers start 0.5 s into a second while rank 1's first event
    lies 1.4 s before that: the heads place ts 0 a second too late, so the ranks are placed
    again once the workers have read the events."""
    return calling_ranks(tmp_path, [x("a", 600_000.0, 5.0)], [x("early", -900_000.0, 5.0), x("b", 600_100.0, 5.0)])


@pytest.mark.parametrize("name, extra", [("t.json", ()), ("t.pftrace", ()), ("t.json.gz", ()),
                                         ("t.pftrace", ("-j", "1")), ("t.json", ("-j", "1"))])
def test_stdout_is_the_file_byte_for_byte_when_the_placement_moves(tmp_path, name, extra):
    paths = shifted_ranks(tmp_path)
    out = tmp_path / name
    r = cli.run("combine", *paths, "-o", out, *extra)
    assert r.exit_code == 0, r.stderr
    fmt = ("--format", "perfetto") if ".pftrace" in name else ()
    piped = cli.run("combine", *paths, "-o", "-", *fmt, *extra)
    assert piped.exit_code == 0, piped.stderr
    data = out.read_bytes()
    assert piped.stdout_bytes == (gzip.decompress(data) if name.endswith(".gz") else data)
    if name == "t.json":
        doc = json.loads(piped.stdout)
        assert doc["baseTimeNanoseconds"] == BASE - 10**9  # the placement did move


def test_stdout_is_the_file_for_the_samples(tmp_path):
    paths = sorted(glob.glob(os.path.join(SAMPLES, "rpc_profiling", "rank*.json.gz")))
    for name, fmt in (("t.json", ()), ("t.pftrace", ("--format", "perfetto"))):
        out = tmp_path / name
        assert cli.run("combine", *paths, "-o", out).exit_code == 0
        piped = cli.run("combine", *paths, "-o", "-", *fmt)
        assert piped.exit_code == 0 and piped.stdout_bytes == out.read_bytes()


# ---- merged traces and .pftrace as inputs --------------------------------------------------

@pytest.fixture(scope="module")
def merged_ps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("merged_ps")
    paths = sorted(glob.glob(os.path.join(SAMPLES, "parameter_server", "rank*.json.gz")))
    out, proto = tmp / "merged.json", tmp / "merged.pftrace"
    assert cli.run("combine", *paths, "-o", out).exit_code == 0
    assert cli.run("combine", *paths, "-o", proto).exit_code == 0
    return paths, out, proto


def test_info_describes_a_merged_trace(merged_ps):
    _, merged, _ = merged_ps
    r = cli.run("info", merged)
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    assert "merged trace" in text and "3 ranks" in text
    for rank, worker in ((0, "ps"), (1, "trainer1"), (2, "trainer2")):
        assert f"rank {rank}" in text and worker in text


def _report(tmp_path, name, *files):
    out = tmp_path / name
    r = cli.run("report", *files, "--format", "json", "--row-limit", "0", "-o", out)
    assert r.exit_code == 0, r.stderr
    return json.loads(out.read_text())


def test_report_on_a_merged_trace_equals_the_report_on_its_rank_files(merged_ps, tmp_path):
    paths, merged, _ = merged_ps
    ranks, one = _report(tmp_path, "ranks.json", *paths), _report(tmp_path, "merged.json", merged)
    assert one["rpc"] is not None and one["rpc"]["keys"]
    assert one["rpc"] == ranks["rpc"]
    assert one["collectives"] == ranks["collectives"]
    assert one["alignment"] == ranks["alignment"]
    assert [(r["key"], r["count"]) for r in one["key_averages"]] == [(r["key"], r["count"]) for r in
                                                                       ranks["key_averages"]]
    for a, b in zip(one["key_averages"], ranks["key_averages"]):
        assert a["cpu_time_total"] == pytest.approx(b["cpu_time_total"], abs=1e-3 * a["count"])
        assert a["self_cpu_time_total"] == pytest.approx(b["self_cpu_time_total"], abs=1e-3 * a["count"])
    assert not any("carries no RPC" in n for n in one["notes"])


@pytest.mark.parametrize("command", ["info", "report"])
def test_pftrace_input_is_named_for_what_it_is(merged_ps, command):
    _, _, proto = merged_ps
    r = cli.run(command, proto)
    err = r.stderr.strip().splitlines()
    assert r.exit_code == 3 and len(err) == 1, err
    assert err[0].startswith(f"tracemerge: error: {proto}: a Perfetto protobuf trace"), err
    assert "surrogates" not in err[0] and "JSON" in err[0]


# ---- the HTML report and the text table ----------------------------------------------------

def test_html_rpc_labels_tell_the_trainers_apart(tmp_path):
    paths = sorted(glob.glob(os.path.join(SAMPLES, "parameter_server", "rank*.json.gz")))
    page = tmp_path / "r.html"
    assert cli.run("report", *paths, "--html", page, "-o", tmp_path / "r.txt").exit_code == 0
    html = page.read_text()
    svg_labels = re.findall(r"<text x=\"4\" y=\"\d+\">([^<]*)</text>", html)
    update = [t for t in svg_labels if "update_and_fetch_model" in t]
    assert len(update) == 2 and len(set(update)) == 2, update
    for trainer in ("trainer1", "trainer2"):
        assert any(f"({trainer} -&gt; ps)" in t for t in update), update


def test_busy_timeline_leaves_out_calls_in_flight(tmp_path):
    # one thread issues 16 rpc_async calls that are in flight together, and does nothing else
    rpcs, events = [], []
    for k in range(16):
        name = "rpc_async#f(worker0 -> worker1)"
        rpcs.append({"rpc_id": f"0:{k}", "role": "caller", "kind": "rpc_async", "func": "f", "name": name,
                     "caller": 0, "callee": 1, "status": "ok", "send_ns": BASE + 10_000 * k,
                     "complete_ns": BASE + 50_000_000 + 10_000 * k})
        events.append(x(name, 10.0 * k, 50_000.0, cat="user_annotation", rpc_id=f"0:{k}", role="caller"))
    events.append(x("aten::add", 60_000.0, 1_000.0))
    path = write(tmp_path / "rank0.json.gz", rank_file(events, 0, rpcs=rpcs, start_ns=BASE))
    out = tmp_path / "r.json"
    assert cli.run("report", path, "--html", tmp_path / "r.html", "--format", "json", "-o", out).exit_code == 0
    html = (tmp_path / "r.html").read_text()
    peak = float(re.search(r"peak ([0-9.]+) on average", html).group(1))
    assert peak <= 1.0, peak


def test_remote_op_names_keep_the_op_in_the_table(tmp_path):
    paths = sorted(glob.glob(os.path.join(SAMPLES, "parameter_server", "rank*.json.gz")))
    r = cli.run("report", *paths, "--remote-ops", "--row-limit", "0")
    assert r.exit_code == 0, r.stderr
    full = _report(tmp_path, "r.json", *paths, "--remote-ops")
    keys = [row["key"] for row in full["key_averages"]]
    table = r.stdout.splitlines()
    names = [re.split(r"\s{2,}", ln.strip())[0] for ln in table[3:3 + len(keys)]]
    # (a key may have two rows: user annotation or not)
    assert len(names) == len(keys) and len(set(names)) == len(set(keys))
    remote = [(n, k) for n, k in zip(names, keys) if "#remote_op: " in k]
    assert remote and any("..." in n for n, _ in remote)
    for name, key in remote:
        # cut in the middle when too long: the caller -> callee and the op are always shown
        parts = name.split("...")
        assert key.startswith(parts[0]) and key.endswith(parts[-1]) and len(name) <= 120, (name, key)
        caller_callee = key[key.rindex("(", 0, key.index(" -> ")):key.index(")", key.index(" -> ")) + 1]
        assert caller_callee in name, (name, key)
        assert name.endswith(key.rsplit("#remote_op: ", 1)[1][-10:]), (name, key)
    trainers = [n for n, k in zip(names, keys) if "update_and_fetch_model" in k]
    assert len(trainers) >= 2 and len(set(trainers)) == len(trainers), trainers


def test_stdout_is_the_file_when_a_thousand_pids_widen_the_blocks(tmp_path):
    # the other way the workers' facts move the placement: rank 1 has more than 999 pids
    many = [x("p", 600_000.0 + k, 0.5, pid=10_000 + k) for k in range(1001)]
    paths = calling_ranks(tmp_path, [x("a", 600_000.0, 5.0)], many)
    for name, fmt in (("t.json", ()), ("t.pftrace", ("--format", "perfetto"))):
        out = tmp_path / name
        assert cli.run("combine", *paths, "-o", out).exit_code == 0
        piped = cli.run("combine", *paths, "-o", "-", *fmt)
        assert piped.exit_code == 0 and piped.stdout_bytes == out.read_bytes()
