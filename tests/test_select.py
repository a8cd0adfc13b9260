"""Size controls keep and drop what they say, and count what they drop."""

from collections import Counter

import pytest
from support import cli, gen_kineto
from support.ranks import kineto, load_output, write, x

from tracemerge.errors import TracemergeError
from tracemerge.job import Session
from tracemerge.merge.combine import combine
from tracemerge.place.selection import Selection, parse_ranks, parse_window


def ranks(tmp_path, n=3):
    paths = []
    for r in range(n):
        events = [x("long", 1000.0, 500.0), x("short", 1100.0, 2.0), x("py", 1200.0, 50.0, cat="python_function"),
                  x("late", 9000.0, 100.0), {"ph": "i", "name": "mark", "pid": 100, "tid": 1, "ts": 9500.0},
                  {"ph": "M", "name": "thread_name", "pid": 100, "tid": 1, "args": {"name": "main"}}]
        paths.append(write(tmp_path / f"rank{r}.json", kineto(events, rank=r, world_size=n)))
    return paths


def run(tmp_path, out="t.json", **sel):
    session = Session.open(ranks(tmp_path))
    summary = combine(session, session.align("wall"), str(tmp_path / out), force=True, selection=Selection(**sel))
    return [e for e in load_output(tmp_path / out)["traceEvents"] if e.get("cat") != "rpc"], summary


def names(events, pid=None):
    return sorted(e["name"] for e in events if e["ph"] != "M" and (pid is None or e["pid"] == pid))


def test_parse():
    assert parse_ranks("0-3,7") == {0, 1, 2, 3, 7}
    assert parse_window("100:250") == (100.0, 250.0) and parse_window(":5") == (None, 5.0)
    for bad in ("3-1", "a", "-1"):
        with pytest.raises(TracemergeError):
            parse_ranks(bad)
    for bad in ("5", "5:1", ":", "a:b"):
        with pytest.raises(TracemergeError):
            parse_window(bad)


def test_ranks(tmp_path):
    events, summary = run(tmp_path, ranks=frozenset({0, 2}))
    assert {e["pid"] for e in events} == {summary["pids"]["0"]["100"], summary["pids"]["2"]["100"]}
    ev = summary["events"]
    assert ev["filtered"] == ev["filtered_by"]["ranks"] == 6
    assert ev["in"] == 18 and ev["out"] - ev["added"] == 12


def test_window_min_duration_and_category(tmp_path):
    # the aligned start is 1000 µs: the window 0..1 ms keeps what overlaps 1000..2000 µs
    events, summary = run(tmp_path, window_ms=(0.0, 1.0), min_duration_us=10.0,
                          drop_categories=frozenset({"python_function"}))
    assert names(events) == ["long"] * 3
    assert sum(e["name"] == "thread_name" for e in events) == 3        # metadata always kept
    ev = summary["events"]
    assert ev["filtered_by"] == {"category": 3, "min_duration": 3, "window": 6}
    assert ev["in"] == ev["out"] - ev["added"] + ev["filtered"] + ev["dropped"]
    events, summary = run(tmp_path, window_ms=(8.0, None))
    assert names(events) == ["late"] * 3 + ["mark"] * 3
    assert summary["selection"]["window_ms"] == [8.0, None]


def test_selection_applies_to_protobuf(tmp_path):
    session = Session.open(ranks(tmp_path))
    summary = combine(session, session.align("wall"), str(tmp_path / "t.pftrace"),
                      selection=Selection(min_duration_us=10.0))
    ev = summary["events"]
    assert ev["filtered_by"] == {"min_duration": 3} and ev["out"] == 15


def test_cli_options_and_errors(tmp_path):
    paths = ranks(tmp_path)
    out = str(tmp_path / "c.json")
    r = cli.run("combine", *paths, "-o", out, "--ranks", "1", "--drop-category", "python_function",
                "--min-duration", "10")
    assert r.exit_code == 0, r.stderr
    assert "14 filtered (ranks: 12, category: 1, min_duration: 1)" in r.stderr
    r = cli.run("combine", *paths, "-o", out, "--window", "5:1")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("tracemerge: error: ")
    assert "--window '5:1'" in r.stderr and "combine --help" in r.stderr
    r = cli.run("combine", *paths, "-o", out, "--force", "--ranks", "9")
    # one error line, last (warnings about the inputs, e.g. ranks nothing links, may come first)
    errors = [line for line in r.stderr.splitlines() if line.startswith("tracemerge: error: ")]
    assert r.exit_code == 2 and len(errors) == 1 and r.stderr.splitlines()[-1] == errors[0]
    assert "no input has any of the ranks [9]" in errors[0]


def test_overview_keeps_the_structure_and_long_ops_and_counts_the_rest(tmp_path):
    """--overview: steps, RPC spans and collectives whatever their length, other complete
    events from US up; everything left out is counted, and no RPC arrow loses an end."""
    import json

    gen_kineto.generate(str(tmp_path / "ranks"), 4, 0.3, seed=3, rank_files=True)
    files = sorted(str(p) for p in (tmp_path / "ranks").iterdir())
    full, over = tmp_path / "full.json", tmp_path / "over.json"
    assert cli.run("combine", *files, "-o", full, "-j", "1").exit_code == 0
    r = cli.run("combine", *files, "-o", over, "-j", "1", "--overview", "200")
    assert r.exit_code == 0, r.stderr
    a, b = json.loads(full.read_text()), json.loads(over.read_text())
    kept = {(e["pid"], e["tid"], e["ts"], e["name"]) for e in b["traceEvents"] if e["ph"] == "X"}
    structural = 0
    for e in a["traceEvents"]:
        if e["ph"] != "X":
            continue
        is_structure = e["name"].startswith("ProfilerStep#") or "rpc_id" in (e.get("args") or {}) \
            or "nccl" in e["name"].lower()
        structural += is_structure
        key = (e["pid"], e["tid"], e["ts"], e["name"])
        assert (key in kept) == (is_structure or e["dur"] >= 200), e
    assert structural and len(kept) < sum(e["ph"] == "X" for e in a["traceEvents"])
    ev = b["tracemerge"]["events"]
    # and the input's own flow arrows (ac2g, fwdbwd), whose slices are mostly gone
    assert not [e for e in b["traceEvents"] if e["ph"] in ("s", "t", "f") and e.get("cat") != "rpc"]
    input_flows = sum(e["ph"] in ("s", "t", "f") and e.get("cat") != "rpc" for e in a["traceEvents"])
    left = sum(e["ph"] == "X" for e in a["traceEvents"]) - len(kept) + input_flows
    assert ev["filtered_by"] == {"overview": left} and ev["in"] + ev["added"] == ev["out"] + ev["filtered"]
    assert b["tracemerge"]["selection"]["overview_us"] == 200
    flows = Counter(e["id"] for e in b["traceEvents"] if e.get("cat") == "rpc" and e["ph"] in ("s", "f"))
    assert flows and set(flows.values()) == {2}
