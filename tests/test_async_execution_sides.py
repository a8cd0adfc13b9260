"""An ``@rpc.functions.async_execution`` function's callee side with no Python on the path
where its future completes (issue 36): the ``#remote`` span ends in C++ and the record's
``end_ns`` is read off it when the file is written; a callee that does not profile gives
its caller ``end_by_ns``, when its side was seen done, in place of an end. Real torch RPC on
loopback; the function's future completes from a timer thread a planted delay after it
returned, so the served time is known."""

import json
import textwrap

import pytest

pytest.importorskip("torch")

from support import cli  # noqa: E402
from support.jobs import run_script  # noqa: E402
from support.ranks import load_output  # noqa: E402

JOB_TIMEOUT_S = 120
DELAY_S = 0.03
CALLS = 3

# worker1 counts every Python callback added to a torch future while it serves, and who
# added it; "profiles": both workers record everything; "silent": worker1 never profiles
JOB = textwrap.dedent(f"""
    import json, os, sys, threading
    import torch
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    from tracemerge.capture import profile

    @rpc.functions.async_execution
    def later(x):
        fut = torch.futures.Future()
        threading.Timer({DELAY_S}, fut.set_result, args=(x + 1,)).start()
        return fut

    def spy_on_callbacks(seen):
        for name in ("add_done_callback", "then"):
            original = getattr(torch.futures.Future, name)
            def spy(self, *args, _original=original, **kwargs):
                seen.append(sys._getframe(1).f_globals.get("__name__", "?"))
                return _original(self, *args, **kwargs)
            setattr(torch.futures.Future, name, spy)

    def worker(rank, port, out, mode):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        seen = []
        if rank == 1:
            spy_on_callbacks(seen)
        if rank == 0 or mode == "profiles":
            with profile(out):
                rpc.init_rpc(f"worker{{rank}}", rank=rank, world_size=2)
                if rank == 0:
                    got = [rpc.rpc_sync("worker1", later, args=(torch.ones(2) * k,)).tolist() for k in range({CALLS})]
                    assert got == [[k + 1.0] * 2 for k in range({CALLS})], got
                rpc.shutdown()
        else:
            rpc.init_rpc(f"worker{{rank}}", rank=rank, world_size=2)
            rpc.shutdown()
        if rank == 1:
            with open(os.path.join(out, "callbacks1.json"), "w") as f:
                json.dump(seen, f)

    if __name__ == "__main__":
        port, out, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        os.makedirs(out, exist_ok=True)
        mp.spawn(worker, args=(port, out, mode), nprocs=2)
""")


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _run(tmp_path, mode):
    return run_script(JOB, tmp_path, JOB_TIMEOUT_S, mode)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("profiles"), "profiles")


@pytest.fixture(scope="module")
def silent(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("silent"), "silent")


def _callers(doc):
    return {r["rpc_id"]: r for r in doc["tracemerge"]["rpcs"] if r["role"] == "caller"}


@pytest.mark.parametrize("mode", ["profiles", "silent"])
def test_no_python_callback_of_the_capture_on_the_served_future(mode, request):
    out = request.getfixturevalue(mode)
    seen = json.loads((out / "callbacks1.json").read_text())
    assert not [m for m in seen if m.startswith("tracemerge")], seen


def test_a_profiling_callee_has_its_end_from_the_span(profiles):
    caller, callee = load_output(profiles / "rank0.json.gz"), load_output(profiles / "rank1.json.gz")
    calls = _callers(caller)
    assert len(calls) == CALLS
    own = {r["rpc_id"]: r for r in callee["tracemerge"]["rpcs"] if r["role"] == "callee"}
    assert set(own) == set(calls)
    base = callee.get("baseTimeNanoseconds", 0)
    spans = {e["args"]["rpc_id"]: e for e in callee["traceEvents"]
             if e.get("ph") == "X" and (e.get("args") or {}).get("role") == "callee"}
    for rpc_id, rec in own.items():
        assert rec["status"] == "ok" and "end_by_ns" not in rec
        # the planted delay, served: the end is when the future completed, not when later() returned
        assert rec["end_ns"] - rec["start_ns"] >= DELAY_S * 1e9
        span = spans[rpc_id]
        assert abs(base + round((span["ts"] + span["dur"]) * 1000) - rec["end_ns"]) <= 1_000
        # ended on the timer's thread, as the profiler recorded it
        assert span["args"]["async"] is True
        # one machine, one clock: the callee's side lies inside the caller's call
        c = calls[rpc_id]
        assert c["send_ns"] < rec["start_ns"] < rec["end_ns"] <= c["complete_ns"]


def test_a_profiling_callees_end_reaches_the_report(profiles):
    files = [str(profiles / "rank0.json.gz"), str(profiles / "rank1.json.gz")]
    res = cli.run("report", *files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    [key] = json.loads(res.stdout)["rpc"]["keys"]
    assert key["complete"] == CALLS
    assert key["exec_us"]["p50"] >= DELAY_S * 1e6


def test_a_silent_callee_bounds_its_end_when_seen_done(silent):
    caller = load_output(silent / "rank0.json.gz")
    calls = _callers(caller)
    [side] = caller["tracemerge"]["remote_sides"]
    got = {c["rpc_id"]: c for c in side["calls"]}
    assert set(got) == set(calls)
    for rpc_id, c in calls.items():
        s = got[rpc_id]
        assert s["status"] == "ok" and "end_ns" not in s
        # seen done after the planted delay: an upper bound of the end, never below it
        assert s["end_by_ns"] - s["start_ns"] >= DELAY_S * 1e9
        assert c["send_ns"] < s["start_ns"]
    # combine takes such a side: both sides joined, the callee's end unknown (not made up)
    res = cli.run("report", str(silent / "rank0.json.gz"), "--format", "json")
    assert res.exit_code == 0, res.stderr
    rpc = json.loads(res.stdout)["rpc"]
    assert (rpc["caller_only"], rpc["callee_only"]) == (0, 0)
    assert sum(k["complete"] for k in rpc["keys"]) == 0


def test_a_silent_callees_side_is_drawn_bounded(silent, tmp_path):
    caller = load_output(silent / "rank0.json.gz")
    calls = _callers(caller)
    [side] = caller["tracemerge"]["remote_sides"]
    seen = {c["rpc_id"]: c for c in side["calls"]}
    out = tmp_path / "merged.json"
    res = cli.run("combine", str(silent / "rank0.json.gz"), "-o", out)
    assert res.exit_code == 0, res.stderr
    merged = load_output(out)
    base = merged["baseTimeNanoseconds"]
    drawn = {e["args"]["rpc_id"]: e for e in merged["traceEvents"]
             if e.get("ph") == "X" and (e.get("args") or {}).get("role") == "callee"}
    assert set(drawn) == set(calls)
    for rpc_id, span in drawn.items():
        assert span["name"].endswith("#remote") and span["args"]["bounded"] is True
        start, end = base + round(span["ts"] * 1000), base + round((span["ts"] + span["dur"]) * 1000)
        # one machine: the caller's clock is the callee's; the end is the earlier of when the
        # side was seen done and the caller's completion, and the planted delay was served
        assert abs(start - seen[rpc_id]["start_ns"]) <= 1_000
        assert end <= min(seen[rpc_id]["end_by_ns"], calls[rpc_id]["complete_ns"]) + 1_000
        assert end - start >= DELAY_S * 1e9
