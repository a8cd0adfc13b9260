"""A callee's capture that stops while a builtin it admitted is still in flight to it,
on a real 2-process RPC job: the call keeps both sides.

worker0 sends worker1 a builtin natively (worker1 admitted it: it records its server
threads), a matrix product that takes worker1 a while, and at once asks worker1 to end
its ``profile`` block. worker1's capture tells worker0 to send builtins wrapped from now
on, and before its profiler stops it waits until the calls worker0 sent it natively have
been served, so its file holds their ops. A builtin sent after that goes wrapped and its
side comes back to worker0. Ground truth: the product's op in worker1's file, and
``combine`` finding both sides of every call.
"""

import json
import os
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.distributed.rpc as rpc  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from support import cli  # noqa: E402
from support.jobs import free_port, run_job  # noqa: E402
from support.ranks import load_output  # noqa: E402

from tracemerge.capture import profile  # noqa: E402

JOB_TIMEOUT_S = 120
ADMISSION_S = 0.5
# a product that takes worker1 well over the round trips of ending its block (~0.1-1 s)
N = 2500

_stop = threading.Event()
_recording = threading.Event()


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _end_block():
    _stop.set()


def _callee_records():
    _recording.set()


def _worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
    with profile(out, record_shapes=True):
        if rank == 1:
            rpc.rpc_sync("worker0", _callee_records)
            if not _stop.wait(JOB_TIMEOUT_S):
                raise TimeoutError("worker0 never asked")
        else:
            if not _recording.wait(JOB_TIMEOUT_S):
                raise TimeoutError("worker1 never started recording")
            rpc.rpc_sync("worker1", torch.add, args=(torch.ones(1), 1))  # asks worker1; goes wrapped
            threading.Event().wait(ADMISSION_S)
            a = torch.ones(N, N)
            slow = rpc.rpc_async("worker1", torch.mm, args=(a, a))  # natively: worker1 admitted it
            rpc.rpc_sync("worker1", _end_block)  # worker1's block ends while the product runs
            result = slow.wait()
            after = rpc.rpc_sync("worker1", torch.add, args=(torch.ones(3), 1))  # worker1 stopped: wrapped
            (Path(out) / "results.json").write_text(json.dumps([result[0, 0].item(), after.sum().item()]))
    rpc.shutdown()


def test_a_native_call_in_flight_when_its_callee_stops_keeps_both_sides(tmp_path):
    run_job([__file__, tmp_path], JOB_TIMEOUT_S)
    assert json.loads((tmp_path / "results.json").read_text()) == [N, 6]
    files = [tmp_path / f"rank{r}.json.gz" for r in range(2)]
    caller, callee = (load_output(f) for f in files)
    calls = {r["func"]: r for r in caller["tracemerge"]["rpcs"] if r["role"] == "caller"}
    assert calls["aten::mm"].get("native") is True  # went as itself
    # the product's op is in worker1's file: it was served before worker1's profiler stopped
    mm = [e for e in callee["traceEvents"] if e.get("name") == "aten::mm" and e.get("ph") == "X"]
    assert [e["args"]["Input Dims"][0] for e in mm] == [[N, N]]
    stopped = callee["tracemerge"]["profile_stop_ns"]
    end_ns = callee["baseTimeNanoseconds"] + round((mm[0]["ts"] + mm[0]["dur"]) * 1000)
    # the whole product: a profiler stopped while an op runs writes the op as ending when
    # it stopped, after the time taken just before (profile_stop_ns), or drops it
    assert end_ns <= stopped
    res = cli.run("combine", *files, "-o", tmp_path / "trace.json", "--report")
    assert res.exit_code == 0, res.stderr
    assert "5 RPCs: 5 with both sides, 0 caller only, 0 callee only" in res.stderr, res.stderr


if __name__ == "__main__":
    mp.spawn(_worker, args=(free_port(), sys.argv[1]), nprocs=2)
