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


def launch(worker, world_size, *args, intra_op_threads=None):
    """Run ``worker(rank, world_size, *args)`` in ``world_size`` fresh processes, each with
    ``intra_op_threads`` OpenMP threads where given (torch's default: one per core)."""
    if intra_op_threads is not None:
        # inherited by the spawned processes, which read it when torch starts
        os.environ.setdefault("OMP_NUM_THREADS", str(intra_op_threads))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    mp.spawn(worker, args=(world_size, *args), nprocs=world_size, join=True)
