"""Profiling windows that never meet (issue 15, item 3): files of different runs with no
job id to tell them apart are named in a warning, refused with --strict; ranks that an
RPC joins, or whose windows overlap, are not."""

import json

from support import cli
from support.ranks import BASE, kineto, rank_file, write, x

HOUR_NS = 3600 * 10**9


def _plain(tmp_path, name, rank, base):
    return write(tmp_path / name, kineto([x("aten::mm", 10, 500), x("aten::add", 700, 100)], base=base, rank=rank,
                                         profiler_start=0))


def test_windows_that_never_meet_warn_and_strict_refuses(tmp_path):
    files = [_plain(tmp_path, "a.json", 0, BASE), _plain(tmp_path, "b.json", 1, BASE + HOUR_NS)]
    res = cli.run("combine", *files, "-o", tmp_path / "out.json")
    assert res.exit_code == 0, res.stderr
    line = "the profiling windows of rank 0 / rank 1 do not overlap"
    assert line in res.stderr
    summary = json.loads((tmp_path / "out.json").read_text())["tracemerge"]
    assert any(w.startswith(line) for w in summary["warnings"])

    res = cli.run("combine", *files, "--strict", "-o", tmp_path / "strict.json")
    assert res.exit_code == 4 and "refused by --strict" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "strict.json").exists()
    res = cli.run("info", *files, "--strict")
    assert res.exit_code == 4


def test_overlapping_windows_or_a_joining_rpc_say_nothing(tmp_path):
    files = [_plain(tmp_path, "a.json", 0, BASE), _plain(tmp_path, "b.json", 1, BASE + 200_000)]
    res = cli.run("combine", *files, "-o", tmp_path / "out.json")
    assert res.exit_code == 0, res.stderr
    assert "do not overlap" not in res.stderr
    # nothing links them, though: each is said to be placed by its clock alone (issue 33)
    assert res.stderr.count("is linked to no other rank") == 2
    res = cli.run("combine", *files, "--strict", "-o", tmp_path / "strict.json")
    assert res.exit_code == 4 and "rank 0 (" in res.stderr and "refused by --strict" in res.stderr

    # an hour apart on their clocks, but one RPC with both sides joins them (clocks that disagree)
    call = {"rpc_id": "0:0", "kind": "rpc_sync", "func": "f", "caller": 0, "callee": 1}
    a = rank_file([x("rpc_sync#f(worker0 -> worker1)", 100, 400, rpc_id="0:0", role="caller")], 0,
                  rpcs=[{**call, "role": "caller", "send_ns": BASE + 100_000, "complete_ns": BASE + 500_000}])
    b = rank_file([x("rpc_sync#f(worker0 -> worker1)#remote", 200, 100, rpc_id="0:0", role="callee")], 1,
                  base=BASE + HOUR_NS, hostname="hostB",
                  rpcs=[{**call, "role": "callee", "start_ns": BASE + HOUR_NS + 200_000,
                         "end_ns": BASE + HOUR_NS + 300_000}])
    files = [write(tmp_path / "rank0.json", a), write(tmp_path / "rank1.json", b)]
    res = cli.run("combine", *files, "--strict", "-o", tmp_path / "joined.json")
    assert res.exit_code == 0, res.stderr
    assert "do not overlap" not in res.stderr
