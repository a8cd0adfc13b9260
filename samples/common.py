"""What every sample shares: launching workers on loopback, and capturing all of them
over the same stretch of the workload.

A callee's records are written only while its own ``profile`` block is open, and
profiler start-up takes a variable time (hundreds of ms on a busy machine), so rank 0
starts the workload only once every worker is recording, and the others stay in their
block until rank 0 is done.
"""

import contextlib
import os
import socket
import threading

import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from tracemerge.capture import profile

TIMEOUT_S = 120
_arrivals = threading.Semaphore(0)
_released = threading.Event()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker, world_size, *args):
    """Run ``worker(rank, world_size, *args)`` in ``world_size`` fresh processes."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    mp.spawn(worker, args=(world_size, *args), nprocs=world_size, join=True)


@contextlib.contextmanager
def captured(out_dir, rank, world_size, **profile_kwargs):
    """``tracemerge.capture.profile`` on every RPC worker, aligned as described above."""
    with profile(out_dir, **profile_kwargs) as p:
        if rank == 0:
            for _ in range(world_size - 1):
                if not _arrivals.acquire(timeout=TIMEOUT_S):
                    raise TimeoutError("a worker never started profiling")
            try:
                yield p
            finally:
                for other in range(1, world_size):
                    rpc.rpc_sync(other, _release)
        else:
            rpc.rpc_sync(0, _arrive)
            yield p
            if not _released.wait(TIMEOUT_S):
                raise TimeoutError("rank 0 never finished")


def _arrive():
    _arrivals.release()


def _release():
    _released.set()
