"""``rref.to_here()`` in the merged trace (issue 26): torch opens an unnamed span around a
UserRRef's fetch under Kineto; the capture names it ``to_here#FUNC(caller -> owner)``
with the id of the ``rpc.remote`` call that made the RRef. Real torch RPC on loopback."""

import json
import textwrap

import pytest

pytest.importorskip("torch")

from support import cli  # noqa: E402
from support.jobs import run_script  # noqa: E402

JOB_TIMEOUT_S = 120

# worker0 fetches three RRefs owned by worker1, each inside a record_function of its own
# (the ground truth of where each fetch ran): one from a builtin, one from a Python
# function, both made inside the block, and one made before the block (no record of it).
JOB = textwrap.dedent("""
    import os, sys, time
    import torch
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    from torch.autograd.profiler import record_function
    from tracemerge.capture import profile

    def slow_mul(x, k):
        time.sleep(0.002)
        return x * k

    def worker(rank, port, out):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
        if rank == 0:
            early = rpc.remote("worker1", torch.add, args=(torch.ones(2), 5))
            with profile(out):
                added = rpc.remote("worker1", torch.add, args=(torch.ones(2), torch.ones(2)))
                multiplied = rpc.remote("worker1", slow_mul, args=(torch.ones(2), 3))
                with record_function("fetch_added"):
                    a = added.to_here()
                with record_function("fetch_multiplied"):
                    m = multiplied.to_here()
                with record_function("fetch_early"):
                    e = early.to_here()
                assert (a.tolist(), m.tolist(), e.tolist()) == ([2.0, 2.0], [3.0, 3.0], [6.0, 6.0])
                rpc.shutdown()
        else:
            with profile(out):
                rpc.shutdown()

    if __name__ == "__main__":
        port, out = int(sys.argv[1]), sys.argv[2]
        mp.spawn(worker, args=(port, out), nprocs=2)
""")


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("to_here")
    run_script(JOB, tmp, JOB_TIMEOUT_S)
    out = tmp / "merged.json"
    res = cli.run("combine", tmp / "traces" / "rank0.json.gz", tmp / "traces" / "rank1.json.gz", "-o", out, "-q")
    assert res.exit_code == 0, res.stderr
    return json.loads(out.read_text())


def _inside(inner, outer):
    return (inner["pid"], inner["tid"]) == (outer["pid"], outer["tid"]) and \
        outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3


def test_each_fetch_is_one_named_span_with_the_id_of_the_remote_call_that_made_its_rref(merged):
    events = [e for e in merged["traceEvents"] if e.get("ph") == "X"]
    assert not [e for e in events if e.get("cat") == "user_annotation" and not e.get("name")]
    fetches = [e for e in events if e["name"].startswith("to_here#")]
    assert len(fetches) == 3, [e["name"] for e in fetches]
    # the caller's records say which remote call made which RRef (by its function)
    [rank0] = [r for r in merged["tracemerge"]["records"] if r["rank"] == 0]
    remote_id = {r["func"]: r["rpc_id"] for r in rank0["rpcs"] if r["kind"] == "remote" and r["role"] == "caller"}
    assert set(remote_id) == {"aten::add", "slow_mul"}
    marker = {e["name"]: e for e in events if e["name"].startswith("fetch_")}
    expected = {"fetch_added": ("to_here#aten::add(worker0 -> worker1)", remote_id["aten::add"]),
                "fetch_multiplied": ("to_here#slow_mul(worker0 -> worker1)", remote_id["slow_mul"]),
                # made before the capture: no function or id known, the two workers still named
                "fetch_early": ("to_here#(worker0 -> worker1)", None)}
    for where, (name, rpc_id) in expected.items():
        [fetch] = [e for e in fetches if _inside(e, marker[where])]
        assert fetch["name"] == name
        assert fetch["args"].get("rref_rpc_id") == rpc_id and fetch["args"]["owner"] == "worker1"
