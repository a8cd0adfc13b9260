"""A 2-worker RPC + gloo job that fails in a planted way, for the post-mortem tests.

    python tests/failing_job.py spawn MODE OUT_DIR          (torch.multiprocessing.spawn)
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/failing_job.py torchrun MODE OUT_DIR

Both workers capture with ``tracemerge.capture.profile`` (RPC on TensorPipe and a gloo
group, loopback). Rank 0 drives: each step it calls ``serve`` on rank 1 (``rpc_sync``),
then both ranks join an ``all_reduce``. MODE plants the failure:

- ``exit``: rank 1 dies by ``os._exit(1)`` in its ``KTH``-th served call;
- ``kill``: rank 1 is killed by SIGKILL, sent by rank 0 (from outside rank 1) in step ``KTH``;
- ``hang``: rank 1 blocks forever before the all_reduce of step ``KTH``, while rank 0 has
  an ``rpc_async`` of ``stall`` (never answers) in flight to it; the test ends the job with
  ``timeout -s TERM``.

The dying rank writes ``OUT_DIR/planted.json`` (``time.time_ns()`` just before it dies or
blocks; for ``kill``, rank 0 writes it just before the kill): the ground truth.
"""

import datetime
import json
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tracemerge.capture import profile  # noqa: E402

KTH = 4
STEP_S = 0.3    # each step's own work: the journal (flushed every 0.5 s) has flushed records before the planted death
TIMEOUT_S = 20


def plant(out_dir: str, **facts) -> None:
    path = os.path.join(out_dir, "planted.json")
    with open(path + ".tmp", "w") as f:
        json.dump(dict(facts, planted_ns=time.time_ns()), f)
    os.replace(path + ".tmp", path)


def serve(n: int, mode: str, out_dir: str) -> int:
    if mode == "exit" and n == KTH:
        plant(out_dir, rank=1, step=n)
        os._exit(1)
    time.sleep(0.01)
    return n


def stall() -> None:
    time.sleep(3600)


def worker(rank: int, mode: str, out_dir: str) -> None:
    opts = rpc.TensorPipeRpcBackendOptions(rpc_timeout=TIMEOUT_S, init_method="env://")
    dist.init_process_group("gloo", init_method=os.environ.get("FAILING_JOB_PG", "env://"), rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=60))
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    with open(os.path.join(out_dir, f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))
    with profile(out_dir):
        dist.barrier()
        for n in range(1, 100):
            if rank == 0:
                if mode == "kill" and n == KTH:
                    with open(os.path.join(out_dir, "pid1")) as f:
                        victim = int(f.read())
                    plant(out_dir, rank=1, step=n)
                    os.kill(victim, signal.SIGKILL)
                rpc.rpc_sync("worker1", serve, args=(n, mode, out_dir))
            time.sleep(STEP_S)
            if rank == 0 and mode == "hang" and n == KTH:
                rpc.rpc_async("worker1", stall)   # served, never answered: in flight when the job is ended
            if rank == 1 and mode == "hang" and n == KTH:
                plant(out_dir, rank=1, step=n)
                threading.Event().wait()   # blocks forever: the all_reduce below is never joined
            dist.all_reduce(torch.ones(4))


def _spawned(rank: int, mode: str, out_dir: str) -> None:
    worker(rank, mode, out_dir)


if __name__ == "__main__":
    launcher, mode, out_dir = sys.argv[1:4]
    if launcher == "spawn":
        import torch.multiprocessing as mp

        from tests.support.jobs import free_port

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                          FAILING_JOB_PG=f"tcp://127.0.0.1:{free_port()}")
        mp.spawn(_spawned, args=(mode, out_dir), nprocs=2, join=True)
    else:
        worker(int(os.environ["RANK"]), mode, out_dir)
