"""The callee's side comes back to the caller (issue 15): the README's capture snippet pasted
into each worker of the RPC recipe, where worker1 only serves and its ``profile`` block ends
at once, and a callee that never enters ``profile`` at all. Real torch RPC on loopback."""

import gzip
import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from support import cli  # noqa: E402
from support.jobs import free_port, run_script  # noqa: E402

from tracemerge import Job  # noqa: E402

JOB_TIMEOUT_S = 120

# The recipe: worker0 issues the calls inside the README's snippet; worker1 enters the same
# snippet with nothing in it, then serves until rpc.shutdown() (mode "after"). "silent":
# worker1 never enters profile. "inside": every worker calls rpc.shutdown() inside its block
# (the callee records while it serves). "everything": rpc.init_rpc() and rpc.shutdown()
# both inside the block in every worker (the README's pattern that records everything).
JOB = textwrap.dedent("""
    import os, sys, threading, time
    import torch
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    from tracemerge.capture import profile

    def slow_add(x, y):
        time.sleep(0.002)
        return torch.add(x, y)

    def fails():
        raise ValueError("on purpose")

    _ready = threading.Event()

    def ready():
        _ready.set()

    def calls():
        t1, t2 = torch.ones(2), torch.ones(2)
        results = [rpc.rpc_async("worker1", torch.add, args=(t1, t2)).wait() for _ in range(5)]
        results.append(rpc.rpc_sync("worker1", slow_add, args=(t1, 3)))
        results.append(rpc.remote("worker1", slow_add, args=(t1, 4)).to_here())
        try:
            rpc.rpc_sync("worker1", fails)
        except ValueError as e:
            assert "on purpose" in str(e)
        assert [r.tolist() for r in results] == [[2.0, 2.0]] * 5 + [[4.0, 4.0], [5.0, 5.0]]

    def worker(rank, port, out, mode):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if mode == "everything":  # the README's block that records everything
            with profile(out) as p:
                rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
                if rank == 0:
                    calls()
                rpc.shutdown()
            return
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
        if rank == 0:
            if mode == "after":  # worker1's block ends before any call: it records none
                assert _ready.wait(60)
            with profile(out) as p:
                calls()
                if mode == "inside":
                    rpc.shutdown()
        elif mode != "silent":
            with profile(out) as p:
                if mode == "inside":
                    rpc.shutdown()
            if mode == "after":
                rpc.rpc_sync("worker0", ready)
        if mode != "inside":
            rpc.shutdown()

    if __name__ == "__main__":
        port, out, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        mp.spawn(worker, args=(port, out, mode), nprocs=2)
""")


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _run(tmp_path, mode, port=None):
    return run_script(JOB, tmp_path, JOB_TIMEOUT_S, mode, port=port)


@pytest.fixture(scope="module")
def snippet_port():
    return free_port()


@pytest.fixture(scope="module")
def snippet_job(tmp_path_factory, snippet_port):
    return _run(tmp_path_factory.mktemp("snippet"), "after", port=snippet_port)


@pytest.fixture(scope="module")
def second_run(tmp_path_factory, snippet_job, snippet_port):
    """The same script again on the same MASTER_ADDR:MASTER_PORT."""
    return _run(tmp_path_factory.mktemp("again"), "after", port=snippet_port)


@pytest.fixture(scope="module")
def silent_callee_job(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("silent"), "silent")


def _block(path):
    with gzip.open(path) as f:
        return json.load(f)["tracemerge"]


def _boot_id():
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def test_callee_not_recording_still_gives_every_side(snippet_job):
    caller, callee = _block(snippet_job / "rank0.json.gz"), _block(snippet_job / "rank1.json.gz")
    # worker1's block ended before any call: it recorded none of them
    assert [r for r in callee["rpcs"] if r["role"] == "callee"] == []
    calls = [r for r in caller["rpcs"] if r["role"] == "caller"]
    assert len(calls) == 8
    [side] = caller["remote_sides"]
    assert (side["clock_rank"], side["rank"], side["worker_name"]) == (1, 1, "worker1")
    assert side["boot_id"] == _boot_id() == caller["boot_id"] == callee["boot_id"]
    by_id = {c["rpc_id"]: c for c in side["calls"]}
    assert set(by_id) == {r["rpc_id"] for r in calls}
    for r in calls:
        got = by_id[r["rpc_id"]]
        # one machine, one clock: the callee's side lies inside the caller's call
        assert r["send_ns"] < got["start_ns"] <= got["end_ns"] < r["complete_ns"]
        assert got["status"] == r["status"]
        assert isinstance(got["tid"], int)
    assert sorted(c["status"] for c in side["calls"]).count("error") == 1


def test_combine_joins_the_fetched_sides_and_aligns_one_machine_exactly(snippet_job, tmp_path):
    files = [str(snippet_job / "rank0.json.gz"), str(snippet_job / "rank1.json.gz")]
    res = cli.run("offsets", *files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    clocks = {c["rank"]: c for c in json.loads(res.stdout)["ranks"]}
    assert clocks[1]["method"] == "shared-clock"
    assert (clocks[1]["offset_ns"], clocks[1]["drift_ppm"], clocks[1]["error_bound_ns"]) == (0, 0, 0)
    res = cli.run("report", *files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    rpc = json.loads(res.stdout)["rpc"]
    assert (rpc["caller_only"], rpc["callee_only"]) == (0, 0)
    # every call now has both sides, so its callee time is known
    assert sum(row["complete"] for row in rpc["keys"]) == 8


def test_callee_that_never_profiles_gets_its_sides_from_the_caller(silent_callee_job):
    assert sorted(p.name for p in silent_callee_job.iterdir()) == ["rank0.json.gz"]
    caller = _block(silent_callee_job / "rank0.json.gz")
    [side] = caller["remote_sides"]
    assert side["clock_rank"] == 1 and side["worker_name"] == "worker1"
    assert len(side["calls"]) == 8


def test_two_runs_on_one_port_have_different_job_ids(snippet_job, second_run, snippet_port):
    first = {r: _block(snippet_job / f"rank{r}.json.gz")["job_id"] for r in (0, 1)}
    again = {r: _block(second_run / f"rank{r}.json.gz")["job_id"] for r in (0, 1)}
    assert first[0] == first[1] and again[0] == again[1]  # one id per run, agreed by every rank
    assert first[0] != again[0]
    assert first[0].startswith(f"127.0.0.1:{snippet_port}@")
    mixed = [str(snippet_job / "rank0.json.gz"), str(second_run / "rank1.json.gz")]
    out = second_run.parent / "mixed.json"
    res = cli.run("combine", *mixed, "-o", out)
    assert res.exit_code == 0 and "different jobs: job_id differs" in res.stderr
    res = cli.run("combine", *mixed, "-o", out, "--force", "--strict")
    assert res.exit_code == 4 and "refused by --strict" in res.stderr
    res = cli.run("offsets", *mixed)
    assert res.exit_code == 0 and "different jobs: job_id differs" in res.stderr


def _merged(files, out):
    res = cli.run("combine", *files, "-o", out)
    assert res.exit_code == 0, res.stderr
    with open(out) as f:
        return json.load(f), res.stderr


def _spans_by_role(doc):
    """{role: {rpc_id: event}} of the merged trace's RPC spans."""
    out = {"caller": {}, "callee": {}}
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if e.get("ph") in ("X", "b") and "rpc_id" in args:
            out[args["role"]][args["rpc_id"]] = e
    return out


def _group(doc, pid):
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    return names[pid]


def test_each_callee_span_is_drawn_on_rank_1_inside_its_caller_span(snippet_job, tmp_path):
    files = [str(snippet_job / "rank0.json.gz"), str(snippet_job / "rank1.json.gz")]
    doc, err = _merged(files, tmp_path / "merged.json")
    assert "8 RPCs: 8 with both sides, 0 caller only, 0 callee only" in err
    spans = _spans_by_role(doc)
    assert len(spans["caller"]) == 8 and set(spans["callee"]) == set(spans["caller"])
    for rpc_id, caller in spans["caller"].items():
        callee = spans["callee"][rpc_id]
        assert callee["name"] == caller["name"] + "#remote"
        assert _group(doc, callee["pid"]).startswith("rank 1 · worker1")
        assert _group(doc, caller["pid"]).startswith("rank 0 · worker0")
        # one machine: the callee's span lies inside the caller's, at its recorded time
        assert caller["ts"] <= callee["ts"] and callee["ts"] + callee["dur"] <= caller["ts"] + caller["dur"]
    # flow arrows bind caller and callee spans: one request and one response per call
    flows = [e for e in doc["traceEvents"] if e.get("ph") in ("s", "f") and e.get("cat") == "rpc"]
    assert len(flows) == 4 * 8, sorted({e.get("cat") for e in doc["traceEvents"] if e.get("ph") in ("s", "f")})
    assert doc["tracemerge"]["remote_spans"] == {"1": 8}


def test_a_callee_with_no_file_gets_its_own_process_group(silent_callee_job, tmp_path):
    doc, err = _merged([str(silent_callee_job / "rank0.json.gz")], tmp_path / "merged.json")
    spans = _spans_by_role(doc)
    assert len(spans["callee"]) == 8 and set(spans["callee"]) == set(spans["caller"])
    groups = {_group(doc, e["pid"]) for e in spans["callee"].values()}
    assert len(groups) == 1 and groups.pop().startswith("rank 1 · worker1 · ")
    for rpc_id, caller in spans["caller"].items():
        callee = spans["callee"][rpc_id]
        assert caller["ts"] <= callee["ts"] and callee["ts"] + callee["dur"] <= caller["ts"] + caller["dur"]


@pytest.fixture(scope="module")
def inside_job(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("inside"), "inside")


def test_shutdown_inside_the_block_keeps_every_side(inside_job, tmp_path):
    caller, callee = _block(inside_job / "rank0.json.gz"), _block(inside_job / "rank1.json.gz")
    calls = {r["rpc_id"] for r in caller["rpcs"] if r["role"] == "caller"}
    assert len(calls) == 8
    # asked for when rpc.shutdown() ran in the block: RPC is down when the file is written;
    # builtins sent natively to worker1, which records, have their side in its own ops,
    # which the job pairs with them (worker1's file holds no record of theirs)
    native = {r["rpc_id"] for r in caller["rpcs"] if r["role"] == "caller" and r.get("native")}
    assert {c["rpc_id"] for side in caller["remote_sides"] for c in side["calls"]} == calls - native
    assert not [r for r in callee["rpcs"] if r.get("native")]
    files = [str(inside_job / "rank0.json.gz"), str(inside_job / "rank1.json.gz")]
    paired = {r["rpc_id"] for r in Job.open(files).info(0).remote_rpcs if r.get("source") == "paired"}
    assert native <= paired
    # worker1 records the calls it served once its profiler ran (which of them depends on
    # when it started: the block that records everything starts RPC inside it)
    own = {r["rpc_id"] for r in callee["rpcs"] if r["role"] == "callee"}
    assert own <= calls
    doc, err = _merged(files, tmp_path / "merged.json")
    assert "8 RPCs: 8 with both sides, 0 caller only, 0 callee only" in err
    callee_spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"
                    and (e.get("args") or {}).get("role") == "callee"]
    assert sorted(e["args"]["rpc_id"] for e in callee_spans) == sorted(calls)  # each once: own or drawn


@pytest.fixture(scope="module")
def everything_job(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("everything"), "everything")


def test_init_and_shutdown_inside_the_block_record_every_side_and_every_callee_op(everything_job, tmp_path):
    assert sorted(p.name for p in everything_job.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]
    caller, callee = _block(everything_job / "rank0.json.gz"), _block(everything_job / "rank1.json.gz")
    # who each worker is was told once RPC was up: names, ranks and one job id
    assert (caller["rank"], caller["worker_name"], callee["rank"], callee["worker_name"]) == \
        (0, "worker0", 1, "worker1")
    assert caller["world_size"] == callee["world_size"] == 2
    assert caller["job_id"] == callee["job_id"] and "@" in caller["job_id"]
    calls = {r["rpc_id"] for r in caller["rpcs"] if r["role"] == "caller"}
    assert len(calls) == 8
    # init_rpc waits for every worker: worker1 was recording before the first call came;
    # its file holds the sides of the calls it served wrapped, and the ops of the builtins
    # sent as themselves (paired by the job), no span torch did not record
    native = {r["rpc_id"] for r in caller["rpcs"] if r["role"] == "caller" and r.get("native")}
    assert {r["rpc_id"] for r in callee["rpcs"] if r["role"] == "callee"} == calls - native
    with gzip.open(everything_job / "rank1.json.gz") as f:
        events = json.load(f)["traceEvents"]
    remote = [e for e in events if e.get("name", "").endswith("#remote") and e.get("ph") == "X"]
    assert len(remote) == 8 - len(native)
    files = [str(everything_job / "rank0.json.gz"), str(everything_job / "rank1.json.gz")]
    assert native == {r["rpc_id"] for r in Job.open(files).info(0).remote_rpcs if r.get("source") == "paired"}
    adds = [e for e in events if e.get("name") == "aten::add" and e.get("ph") == "X"]
    assert len(adds) == 7  # 5 torch.add calls and 2 slow_add, each on the callee
    doc, err = _merged([str(everything_job / "rank0.json.gz"), str(everything_job / "rank1.json.gz")],
                       tmp_path / "merged.json")
    assert "8 RPCs: 8 with both sides, 0 caller only, 0 callee only" in err
