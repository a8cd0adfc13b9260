"""``--rank-from order`` renumbers the files and everything that names their ranks (issue
48, class 4): given rank 1's file first, the records still named the job's own ranks, so
worker1's "RPC callees" row was computed from worker0's events (1 server thread, 93 %
busy, against 5 threads, 0 %) and combine drew no arrows, blaming a cut file."""

import glob
import json
import os

from support import cli
from support.paths import ROOT
from support.ranks import load_output

SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "rpc_profiling", "rank*.json.gz")))


def _report(*args):
    r = cli.run("report", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_order_renumbers_the_records_with_their_files():
    own = _report(*SAMPLES)
    swapped = _report(*SAMPLES[::-1], "--rank-from", "order")
    [callee] = own["rpc"]["callees"]
    [renumbered] = swapped["rpc"]["callees"]
    assert (callee["name"], callee["callee"], renumbered["name"], renumbered["callee"]) == ("worker1", 1, "worker1", 0)
    for key in ("calls", "threads", "max_concurrent", "all_busy_share", "queue_mean_us", "exec_mean_us"):
        assert renumbered[key] == callee[key], key
    # every call is worker0 (now rank 1) -> worker1 (now rank 0), with its own figures
    by_name = {k["name"]: k for k in own["rpc"]["keys"]}
    for k in swapped["rpc"]["keys"]:
        assert (k["caller"], k["callee"]) == (1, 0)
        assert k["e2e_us"] == by_name[k["name"]]["e2e_us"] and k["exec_us"] == by_name[k["name"]]["exec_us"]


def test_order_draws_every_arrow(tmp_path):
    own, swapped = tmp_path / "own.json", tmp_path / "swapped.json"
    assert cli.run("combine", *SAMPLES, "-o", own).exit_code == 0
    r = cli.run("combine", *SAMPLES[::-1], "--rank-from", "order", "-o", swapped)
    assert r.exit_code == 0, r.stderr
    assert "cut file" not in r.stderr
    sides = load_output(own)["tracemerge"]["rpc_sides"]
    assert sides["drawn"] == sides["calls"] > 0
    assert load_output(swapped)["tracemerge"]["rpc_sides"] == sides
