"""A 3-worker torch job captured with ``tracemerge.capture.profile``, for the interop tests.

Run as ``python tests/interop_job.py OUT_DIR``: three processes (TensorPipe RPC and a gloo
group on loopback, free ports, timeouts) capture from a barrier to ``rpc.shutdown``. Rank 0
calls ranks 1 and 2 (a UDF that sleeps ``SLEEP_MS`` inside ``record_function``), every rank
joins all_reduces; OUT_DIR gets ``rank{0,1,2}.json.gz``.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch.autograd.profiler import record_function

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.jobs import free_port, init_job  # noqa: E402
from tracemerge.capture import profile  # noqa: E402

WORLD = 3
TIMEOUT_S = 60
CALLS = 6
SLEEP_MS = 5


def served(x: torch.Tensor) -> torch.Tensor:
    with record_function("interop:served"):
        time.sleep(SLEEP_MS / 1000)
        return torch.add(x, 1)


def worker(rank: int, rpc_port: int, pg_port: int, out: str) -> None:
    init_job(rank, WORLD, rpc_port, pg_port, TIMEOUT_S)
    with profile(out):
        dist.barrier()
        if rank == 0:
            for n in range(CALLS):
                rpc.rpc_sync(f"worker{1 + n % 2}", served, args=(torch.ones(4),))
        for _ in range(2):
            dist.all_reduce(torch.ones(8))
        rpc.shutdown()


if __name__ == "__main__":
    mp.spawn(worker, args=(free_port(), free_port(), sys.argv[1]), nprocs=WORLD)
