"""A 2-worker RPC job whose callee dies in its first second, for the early-death post-mortem:

    python tests/early_death_job.py spawn PATTERN OUT_DIR PLANT_DIR          (torch.multiprocessing.spawn)
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/early_death_job.py torchrun PATTERN OUT_DIR PLANT_DIR

PATTERN is one of the README's two block patterns: ``long`` (``profile`` entered before
``rpc.init_rpc``, which returns inside the block) or ``short`` (``profile`` after
``init_rpc``). Rank 0 calls ``serve`` on rank 1 (``rpc_sync``) as soon as RPC is up; rank
1 dies by ``os._exit(1)`` in its ``KTH``-th served call, writing ``PLANT_DIR/planted.json``
(``time.time_ns()`` just before, and when rank 0's RPC came up) first: the ground truth.
OUT_DIR holds only what the job's capture left (``traces/*``).
"""

import json
import os
import sys
import time

import torch.distributed.rpc as rpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tracemerge.capture import profile  # noqa: E402

KTH = 2
TIMEOUT_S = 20


def serve(n: int, plant_dir: str, up_ns: int) -> int:
    if n == KTH:
        with open(os.path.join(plant_dir, "planted.json.tmp"), "w") as f:
            json.dump({"rank": 1, "call": n, "up_ns": up_ns, "planted_ns": time.time_ns()}, f)
        os.replace(os.path.join(plant_dir, "planted.json.tmp"), os.path.join(plant_dir, "planted.json"))
        os._exit(1)
    return n


def calls(rank: int, plant_dir: str) -> None:
    up_ns = time.time_ns()
    if rank == 0:
        for n in range(1, KTH + 1):
            rpc.rpc_sync("worker1", serve, args=(n, plant_dir, up_ns))
    rpc.shutdown()


def worker(rank: int, pattern: str, out_dir: str, plant_dir: str) -> None:
    opts = rpc.TensorPipeRpcBackendOptions(rpc_timeout=TIMEOUT_S, init_method="env://")
    if pattern == "long":
        with profile(out_dir):
            rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
            calls(rank, plant_dir)
    else:
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
        with profile(out_dir):
            calls(rank, plant_dir)


if __name__ == "__main__":
    launcher, job_pattern, out, plant = sys.argv[1:5]
    if launcher == "spawn":
        import torch.multiprocessing as mp

        from tests.support.jobs import free_port

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        mp.spawn(worker, args=(job_pattern, out, plant), nprocs=2, join=True)
    else:  # torchrun set RANK, MASTER_ADDR and MASTER_PORT
        worker(int(os.environ["RANK"]), job_pattern, out, plant)
