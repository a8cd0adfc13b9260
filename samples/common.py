"""What every sample shares: launching its workers on loopback.

Every worker runs the README's block that records everything (*Capture*): it enters
``tracemerge.capture.profile`` first and runs ``rpc.init_rpc`` and ``rpc.shutdown``
inside it. ``init_rpc`` waits for every worker and a graceful ``shutdown`` waits for all
of them too, so each worker records from the job's first call to its last with nothing
else coordinating them.
"""

import os
import socket

import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker, world_size, *args):
    """Run ``worker(rank, world_size, *args)`` in ``world_size`` fresh processes."""
    # One intra-op thread per worker (inherited by the spawned processes): several workers
    # on two cores, each with OpenMP threads spinning for the others, made a tiny aten::mm
    # take hundreds of ms (measured: the parameter server's 8x32 MLP, 236 ms per mm).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    mp.spawn(worker, args=(world_size, *args), nprocs=world_size, join=True)
