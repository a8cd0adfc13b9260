"""Builtins keep their C++ path under capture, on a real 3-process RPC job, and combine
pairs each with the callee op that served it.

worker0 and worker2 both send builtins to worker1 while every worker records: after the
first call to a callee (which asks it whether it records its server threads), builtins
go out as themselves; worker1's file keeps the ops of its server threads, and the job
(what ``combine`` opens) pairs each call with one. Ground truth: every call sends a tensor
of a size of its own, and worker1 records input shapes, so the op a call's ``rpc_id`` was
paired with must have that call's size. Modes: ``trace`` (shapes recorded on both sides),
``one`` (one caller), ``onethread`` (one caller, a callee with one RPC server thread, shapes
recorded by the callee only: calls in flight together are told apart by their order),
``exact`` (wrap_builtins) and ``light`` (``trace=False``: no events, the records only).
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.distributed.rpc as rpc  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from support import cli  # noqa: E402
from support.jobs import free_port, run_job  # noqa: E402
from support.ranks import load_output  # noqa: E402

from tracemerge import Job  # noqa: E402
from tracemerge.capture import profile  # noqa: E402

WORLD = 3
JOB_TIMEOUT_S = 120
IN_FLIGHT = 50
TOGETHER = 20
LAZY = 6  # the single caller's asynchronous calls of a Python function
ADMISSION_S = 0.5  # ample time for the callee's answer to the first call's question


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def py_add(x, k):
    return x + k


_turn = threading.Event()
_both = threading.Event()


def _go():
    _turn.set()


def _go_both():
    _both.set()


def _alone(rank):
    """Calls of worker ``rank`` while the other caller waits; returns the sizes sent (one
    per builtin call, in order) and the outcomes."""
    base = 100 * (rank + 1)
    sizes, out = [], {}
    x = torch.ones(base)
    out["sync"] = rpc.rpc_sync("worker1", torch.add, args=(x, 1)).sum().item()
    sizes.append(base)
    futs = []
    for k in range(1, IN_FLIGHT + 1):  # in flight together, each with a size of its own
        futs.append(rpc.rpc_async("worker1", torch.mul, args=(torch.ones(base + k), 2)))
        sizes.append(base + k)
    out["in_flight"] = sum(f.wait().sum().item() for f in futs)
    out["remote"] = rpc.remote("worker1", torch.add, args=(torch.ones(base + 60), 2)).to_here().sum().item()
    sizes.append(base + 60)
    try:
        rpc.rpc_sync("worker1", torch.add, args=(torch.ones(base + 70), torch.ones(3)))
    except RuntimeError as e:
        out["error"] = "must match" in str(e)
    sizes.append(base + 70)
    out["python"] = rpc.rpc_sync("worker1", py_add, args=(torch.ones(4), 1)).sum().item()
    return sizes, out


def _together(rank):
    """In flight at the same time as the other caller's: sizes sent."""
    base = 100 * (rank + 1) + 80
    futs = [rpc.rpc_async("worker1", torch.mul, args=(torch.ones(base + k), 2)) for k in range(TOGETHER)]
    torch.futures.wait_all(futs)
    return [base + k for k in range(TOGETHER)]


def _calls(rank, mode):
    """worker0's calls alone, then worker2's alone, then both together (``one``: worker0's
    alone and then its batch; worker2 calls nobody)."""
    if mode in ("one", "onethread"):
        if rank == 2:
            return None
        rpc.rpc_sync("worker1", torch.add, args=(torch.ones(1), 1))  # asks worker1; goes wrapped
        time.sleep(ADMISSION_S)
        out = _alone(rank) + (_together(rank),)
        # Python functions go wrapped: their rpc_async and remote spans end in C++ and
        # their records are settled later
        for k in range(LAZY - 1):
            rpc.rpc_async("worker1", py_add, args=(torch.ones(2), k)).wait()
        rpc.remote("worker1", py_add, args=(torch.ones(2), 1)).to_here()
        return out
    rpc.rpc_sync("worker1", torch.add, args=(torch.ones(1), 1))  # asks worker1; goes wrapped
    time.sleep(ADMISSION_S)
    if rank == 2 and not _turn.wait(JOB_TIMEOUT_S):
        raise TimeoutError("worker0 never finished")
    alone = _alone(rank)
    if rank == 0:
        rpc.rpc_sync("worker2", _go)
        if not _both.wait(JOB_TIMEOUT_S):
            raise TimeoutError("worker2 never finished")
    else:
        rpc.rpc_sync("worker0", _go_both)
    return alone + (_together(rank),)


def _worker(rank, port, out, mode):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # input shapes: the ground truth of which op served which call
    capture = {"trace": lambda: profile(out, record_shapes=True),
               "light": lambda: profile(out, trace=False),
               "exact": lambda: profile(out, record_shapes=True, wrap_builtins=True),
               "one": lambda: profile(out, record_shapes=True),
               # the callee records shapes (the ground truth), the caller does not: order decides
               "onethread": lambda: profile(out, record_shapes=rank == 1)}[mode]()
    options = {}
    if mode == "onethread":
        options["rpc_backend_options"] = rpc.TensorPipeRpcBackendOptions(num_worker_threads=1 if rank == 1 else 4)
    with capture:
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=WORLD, **options)
        report = _calls(rank, mode) if rank != 1 else None
        rpc.shutdown()  # graceful: every worker records until all are done
    (Path(out) / f"report{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    mp.spawn(_worker, args=(free_port(), sys.argv[1], sys.argv[2]), nprocs=WORLD)


def _callers(mode):
    return (0,) if mode in ("one", "onethread") else (0, 2)


# onethread: a callee with one caller and one RPC server thread; the caller also sends
# Python functions asynchronously
@pytest.fixture(scope="module", params=["trace", "light", "exact", "onethread"])
def job(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    run_job([__file__, out, request.param], JOB_TIMEOUT_S)
    ranks = {r: load_output(out / f"rank{r}.json.gz") for r in range(WORLD)}
    reports = {r: json.loads((out / f"report{r}.json").read_text()) for r in range(WORLD)}
    return request.param, out, ranks, reports


def _builtin_calls(block):
    """The caller's builtin records after the first (asking) one, in the order sent."""
    calls = [r for r in block["rpcs"] if r["role"] == "caller" and r["func"].startswith("aten::")]
    return sorted(calls, key=lambda r: r["send_ns"])[1:]


def test_results_are_those_of_torch(job):
    mode, _, _, reports = job
    for rank in _callers(mode):
        _, got, _ = reports[rank]
        base = 100 * (rank + 1)
        assert got["sync"] == 2 * base
        assert got["in_flight"] == sum(2 * (base + k) for k in range(1, IN_FLIGHT + 1))
        assert got["remote"] == 3 * (base + 60)
        assert got["error"] is True and got["python"] == 8


def _callee_sides(out, trace):
    """{rpc_id: the callee record} as the job (what combine opens) has them: worker1's own
    (wrapped calls) and the sides paired with its ops (builtins sent as themselves)."""
    job = Job.open([out / f"rank{r}.json.gz" for r in range(WORLD)])
    sides = {r["rpc_id"]: r for info in job.infos for r in info.remote_rpcs}
    sides.update({r["rpc_id"]: r for r in trace["tracemerge"]["rpcs"] if r["role"] == "callee"})
    return job, sides


def _paired_size(ops, side, call):
    """The first input size of the op of worker1's trace that the job paired ``call`` with:
    the op of its function on the side's thread nearest the side's times (the side keeps
    the op's times, clamped into the call's window by the clocks' ±2 µs)."""
    mine = [e for e in ops if e["tid"] == side["tid"] and e["name"] == call["func"]]
    op = min(mine, key=lambda e: abs(e["start"] - side["start_ns"]) + abs(e["end"] - side["end_ns"]))
    assert abs(op["start"] - side["start_ns"]) <= 5_000 and abs(op["end"] - side["end_ns"]) <= 5_000, (call, side)
    return op["args"]["Input Dims"][0][0]


def test_builtins_went_natively_and_each_got_its_own_op(job):
    """Ground truth: a call alone in flight gets exactly its op; calls in flight together
    (one caller, or two) get the ops of their sizes, each once, inside their windows;
    worker1's file holds only what torch recorded (no callee record, no added span)."""
    mode, out, ranks, reports = job
    if mode == "light":
        pytest.skip("no callee traces with trace=False")
    trace = ranks[1]
    base = trace["baseTimeNanoseconds"]
    ops = [dict(e, start=base + round(e["ts"] * 1000), end=base + round((e["ts"] + e["dur"]) * 1000))
           for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    job_, sides = _callee_sides(out, trace)
    together_sent, together_got = [], []
    for rank in _callers(mode):
        sizes, _, together = reports[rank]
        calls = _builtin_calls(ranks[rank]["tracemerge"])
        assert len(calls) == len(sizes) + len(together) == IN_FLIGHT + 3 + TOGETHER
        for call in calls:
            # sent as itself (wrapped with wrap_builtins=True)
            assert call.get("native") is (None if mode == "exact" else True), call
            side = sides[call["rpc_id"]]
            assert side.get("native") is call.get("native")
            assert side["name"] == call["name"] and side["kind"] == call["kind"]
            # one machine, one clock: served inside the call
            assert call["send_ns"] <= side["start_ns"] <= side["end_ns"] <= call["complete_ns"]
        if mode == "exact":  # wrapped: every call's side is its own; worker1 recorded it
            continue
        got = [_paired_size(ops, sides[c["rpc_id"]], c) for c in calls]
        assert got == sizes + together, (mode, rank)
        for call, size in zip(calls, sizes + together):
            assert sides[call["rpc_id"]]["status"] == ("error" if size % 100 == 70 else "ok")
        together_sent += together
        together_got += got[len(sizes):]
    assert sorted(together_got) == sorted(together_sent)
    if mode != "exact":
        # nothing said about the pairing: shapes (trace, one) or order (onethread) told every call apart
        assert not [w for w in job_.warnings if "sent as themselves" in w], job_.warnings
        assert not [r for r in trace["tracemerge"]["rpcs"] if r.get("native")]
        assert not [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"].endswith("#remote")
                    and e["name"].startswith(("rpc_", "remote#")) and "aten::" in e["name"]]
    # the Python function stays wrapped, with its side noted by the wrapper
    python = [r for r in ranks[0]["tracemerge"]["rpcs"] if r["role"] == "caller" and r["func"] == "py_add"]
    assert python and "native" not in python[0] and sides[python[0]["rpc_id"]]["role"] == "callee"


def test_combine_joins_both_sides_of_every_call(job, tmp_path):
    mode, out, _, _ = job
    files = [str(out / f"rank{r}.json.gz") for r in range(WORLD)]
    res = cli.run("combine", *files, "-o", tmp_path / "trace.json", "--report")
    assert res.exit_code == 0, res.stderr
    # the files hold what torch recorded: no span appended out of time order
    info = cli.run("info", *files)
    assert info.exit_code == 0 and "clock jump" not in res.stderr + info.stderr + info.stdout
    # and the two calls that take turns
    calls = IN_FLIGHT + 5 + TOGETHER + LAZY if mode in ("one", "onethread") else 2 * (IN_FLIGHT + 5 + TOGETHER) + 2
    if mode != "light":
        assert f"{calls} RPCs: {calls} with both sides, 0 caller only, 0 callee only" in res.stderr
    else:
        # trace=False: builtins keep their C++ path to every callee, so with no callee
        # tracing they have the caller's side only; the Python functions (wrapped) both
        natively = 2 * (IN_FLIGHT + 4 + TOGETHER)
        assert f"{calls} RPCs: {calls - natively} with both sides, {natively} caller only" in res.stderr


def test_light_mode_writes_records_and_no_events(job):
    mode, _, ranks, _ = job
    if mode != "light":
        pytest.skip("the lighter mode is the second job")
    for rank in (0, 2):
        block = ranks[rank]["tracemerge"]
        assert ranks[rank]["traceEvents"] == []
        calls = _builtin_calls(block)
        assert len(calls) == IN_FLIGHT + 3 + TOGETHER and all(c.get("native") for c in calls)
        # rpc_sync: its end noted on return; rpc_async and remote: no span and no callback,
        # so only when the capture saw them done, which bounds the end (complete_by_ns)
        for c in calls:
            if c["kind"] == "rpc_sync":
                assert c["send_ns"] <= c["complete_ns"] and "complete_by_ns" not in c
            else:
                assert "complete_ns" not in c and c["send_ns"] <= c["complete_by_ns"], c


def test_spans_ended_in_cpp_give_their_calls_ends(job):
    """The spans of rpc_async and remote calls end in C++ when their futures complete; every
    call's record is settled later and its end is its span's end in the caller's own trace
    (ground truth: the event Kineto wrote), in flight together or not."""
    mode, _, ranks, _ = job
    if mode not in ("one", "trace", "onethread"):
        pytest.skip("a traced job with native builtins")
    trace = ranks[0]
    base = trace["baseTimeNanoseconds"]
    spans = {e["args"]["rpc_id"]: e for e in trace["traceEvents"]
             if e.get("ph") == "X" and e.get("args", {}).get("role") == "caller"}
    calls = [r for r in trace["tracemerge"]["rpcs"] if r["role"] == "caller" and r["kind"] in ("rpc_async", "remote")]
    wrapped = [r for r in calls if not r.get("native")]
    assert len(wrapped) == (LAZY if mode in ("one", "onethread") else 0)
    assert len(calls) - len(wrapped) == IN_FLIGHT + 1 + TOGETHER
    for r in calls:
        e = spans[r["rpc_id"]]
        end = base + round(e["ts"] * 1000) + round(e["dur"] * 1000)
        assert r["status"] == "ok" and isinstance(e["args"]["async"], bool)
        assert r["complete_ns"] == max(r["send_ns"], end)


def test_a_callee_that_said_no_is_asked_again_only_after_the_retry_time():
    """recorder.Peers, the caller's memory of which callees take builtins natively: the
    first call asks; a no is kept (calls in between take the answer without asking) until
    RETRY_S has passed; a yes is kept until the callee's capture revokes it."""
    from tracemerge.capture.recorder import Peers

    peers = Peers()
    peers.RETRY_S = 0.2
    assert peers.route(1) is None          # first call: ask
    assert peers.route(1) is False         # asked, not answered yet: wrapped, no second question
    peers.answer(1, None)                  # no
    for _ in range(100):
        assert peers.route(1) is False
    time.sleep(0.25)
    assert peers.route(1) is None          # the no is old: ask again
    peers.answer(1, "token-a")
    assert peers.route(1) is True
    peers.revoke(1, "token-a")
    assert peers.route(1) is False         # revoked just now: wrapped
    peers.answer(1, "token-a")             # a late answer of the stopped capture revives nothing
    assert peers.route(1) is False
    peers.forget_refusals()                # a new capture here: callees that said no are asked again
    assert peers.route(1) is None
    assert peers.route(2) is None          # another callee is its own question
