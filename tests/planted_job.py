"""A 3-worker torch RPC job with delays planted at known places, for the critical-path tests.

Run as ``python tests/planted_job.py OUT_DIR``: three processes (tensorpipe RPC and a
gloo group on loopback, free ports) capture with ``tracemerge.capture.profile`` from a
barrier to ``rpc.shutdown``. Rank 0 drives; ranks 1 and 2 only serve. After a warm-up
(outside any step: first connections are slow), rank 0 runs one ``ProfilerStep#k`` per
variant, REPEATS times over: variant 0 with every delay as planted, then variant k (k ≥ 1)
with the k-th place of ``PLACES`` halved, each variant k right after a variant 0 — the "same job re-run with one planted delay
halved" that ``whatif`` is checked against, without paying a job start per variant.

Each planted delay is a ``time.sleep`` inside ``record_function("planted:<place>")`` on
the rank named in ``PLACES``, so the traces themselves say where and how long each one
was; ``OUT_DIR/planted.json`` lists the steps' delays.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch.autograd.profiler import record_function

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.jobs import free_port  # noqa: E402
from tracemerge.capture import profile  # noqa: E402

WORLD = 3
TIMEOUT_S = 60
# place: (rank the delay runs on, ms as planted)
PLACES = {
    "local": (0, 40),      # rank 0's own work inside its step
    "udf": (1, 80),        # a plain UDF called with rpc_sync
    "nested": (1, 60),     # a UDF on rank 1 called by an async_execution function on rank 2
    "conc": (2, 50),       # the longest of five concurrent rpc_async to rank 2 (10..50 ms)
    "rref": (2, 30),       # a method of an object rank 2 owns, called through an RRef
    "rrefchain": (1, 20),  # a method of an object rank 1 owns, called through an RRef by an async_execution
                           # function on rank 2 that returns the call's future chained with .then()
    "coll": (1, 30),       # rank 1's work before it joins an all_reduce rank 0 waits in
}
CONCURRENT_MS = (10, 20, 30, 40)   # the other concurrent calls, all shorter than "conc"
# each variant runs this many times, interleaved: on a shared machine one step can be tens
# of ms late (a delivery or a sleep's wake-up), so the tests compare medians
REPEATS = 4


def planted(place: str, ms: float) -> None:
    with record_function(f"planted:{place}"):
        time.sleep(ms / 1000)


def udf(place: str, ms: float) -> int:
    planted(place, ms)
    return 1


@rpc.functions.async_execution
def async_chain(ms: float) -> torch.futures.Future:
    """Returns at once; its future completes when the nested call to rank 1 has, via .then()."""
    fut = rpc.rpc_async("worker1", udf, args=("nested", ms))
    return fut.then(then_work)


def then_work(fut: torch.futures.Future) -> int:
    """The continuation: traced work on whichever thread completed the nested call."""
    with record_function("then:chain"):
        x = torch.ones(64, 64)
        for _ in range(20):
            x = torch.tanh(x @ x / 64)
    return fut.value() + 1


class Box:
    def work(self, ms: float, place: str = "rref") -> int:
        planted(place, ms)
        return 2


@rpc.functions.async_execution
def async_rref_chain(box: rpc.RRef, ms: float) -> torch.futures.Future:
    return box.rpc_async().work(ms, "rrefchain").then(then_work)


def go_reduce(ms: float) -> float:
    """Served on ranks 1 and 2: some work, then this step's all_reduce with rank 0."""
    if ms:
        planted("coll", ms)
    t = torch.ones(4)
    dist.all_reduce(t)
    return float(t.sum())


def step(delays: dict, box: rpc.RRef, box1: rpc.RRef) -> None:
    planted("local", delays["local"])
    rpc.rpc_sync("worker1", udf, args=("udf", delays["udf"]))
    rpc.rpc_sync("worker2", async_chain, args=(delays["nested"],))
    futs = [rpc.rpc_async("worker2", udf, args=(f"conc{ms}", ms)) for ms in CONCURRENT_MS]
    futs.append(rpc.rpc_async("worker2", udf, args=("conc", delays["conc"])))
    torch.futures.wait_all(futs)
    box.rpc_sync().work(delays["rref"])
    rpc.rpc_sync("worker2", async_rref_chain, args=(box1, delays["rrefchain"]))
    go = [rpc.rpc_async("worker1", go_reduce, args=(delays["coll"],)), rpc.rpc_async("worker2", go_reduce, args=(0,))]
    t = torch.ones(4)
    dist.all_reduce(t)
    torch.futures.wait_all(go)


def variants() -> list:
    base = {p: float(ms) for p, (_, ms) in PLACES.items()}
    return [base] + [dict(base, **{p: base[p] / 2}) for p in PLACES]


def drive(out: str) -> None:
    box, box1 = rpc.remote("worker2", Box), rpc.remote("worker1", Box)
    warm = {p: 0.0 for p in PLACES}
    step(warm, box, box1)                     # first connections and the RRef's type lookup
    kinds = variants()
    # each variant right after a baseline step: the pair sees the same load on the machine
    order = [v for _ in range(REPEATS) for k in range(1, len(kinds)) for v in (0, k)]
    for k, v in enumerate(order):
        with record_function(f"ProfilerStep#{k}"):
            step(kinds[v], box, box1)
        time.sleep(0.01)                  # a gap between steps, as a real loop has
    Path(out, "planted.json").write_text(json.dumps({"places": PLACES, "variants": kinds, "steps": order}))


def worker(rank: int, rpc_port: int, pg_port: int, out: str) -> None:
    try:
        # The job mostly sleeps, but each step hands work between threads and processes a
        # dozen times; on a machine loaded by other work every hand-off waits for a core, and
        # steps vary by tens of ms. A higher priority (where allowed) keeps the wake-ups
        # prompt; threads started after this (RPC's, gloo's) inherit it.
        os.nice(-10)
    except OSError:
        pass
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(rpc_port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{pg_port}", rank=rank, world_size=WORLD)
    # init_rpc's own all_gather over the default group runs before the capture patches
    # collectives; a barrier inside the block then has every worker recording before rank 0's first call
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=WORLD,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=TIMEOUT_S))
    with profile(out):
        dist.barrier()
        if rank == 0:
            drive(out)
        rpc.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(free_port(), free_port(), sys.argv[1]), nprocs=WORLD)
