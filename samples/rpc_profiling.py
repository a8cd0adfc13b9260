"""The PyTorch "Profiling RPC-Based Workloads" recipe, captured with tracemerge.

Part 1 (-> OUT/rpc_profiling): worker0 sends ``rpc_async`` of ``torch.add`` and
``torch.mul`` to worker1, a UDF that sleeps and runs ops, and an ``rpc.remote`` whose
RRef it then uses through a proxy. Part 2 (-> OUT/threads_1, OUT/threads_8): the
``num_worker_threads`` exercise, four concurrent CPU-heavy UDFs served by 1 vs 8 threads.

    python samples/rpc_profiling.py OUT

Every worker runs the README's block that records everything, ``rpc.init_rpc`` and
``rpc.shutdown`` inside ``profile``; nothing else coordinates the workers. ``init_rpc``
waits for every worker, so each is recording before the first call; a graceful shutdown
waits for all of them too, so each records until the job is done.
"""

import sys
import time
from pathlib import Path

import torch
import torch.distributed.rpc as rpc
from common import launch

from tracemerge.capture import profile


def udf_with_ops():
    time.sleep(0.05)
    t1, t2 = torch.randn(4, 4), torch.randn(4, 4)
    torch.add(t1, t2)
    torch.mul(t1, t2)


class Accumulator:
    def __init__(self):
        self.total = torch.zeros(4)

    def add(self, t):
        self.total += t
        return self.total.clone()


def heavy_udf():
    x = torch.randn(200, 200)
    for _ in range(10):
        x = torch.tanh(x @ x.t() / 200)
    return x.sum().item()


def recipe(rank, world_size, out):
    with profile(out):
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
        if rank == 0:
            t1, t2 = torch.randn(4, 4), torch.randn(4, 4)
            fut1 = rpc.rpc_async("worker1", torch.add, args=(t1, t2))
            fut2 = rpc.rpc_async("worker1", torch.mul, args=(t1, t2))
            fut1.wait()
            fut2.wait()
            rpc.rpc_sync("worker1", udf_with_ops)
            acc = rpc.remote("worker1", Accumulator)
            acc.rpc_sync().add(torch.ones(4))
        rpc.shutdown()


def thread_tuning(rank, world_size, out, num_worker_threads):
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=num_worker_threads)
    with profile(out):
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
        if rank == 0:
            torch.futures.wait_all([rpc.rpc_async("worker1", heavy_udf) for _ in range(4)])
        rpc.shutdown()


if __name__ == "__main__":
    out = Path(sys.argv[1])
    launch(recipe, 2, str(out / "rpc_profiling"))
    for threads in (1, 8):
        launch(thread_tuning, 2, str(out / f"threads_{threads}"), threads)
