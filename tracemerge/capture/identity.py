"""Who this worker is in its job: rank, name, world size and a job id shared by all ranks."""

import os

import torch.distributed as dist
from torch.distributed import rpc


def identify(rank=None, worker_name=None):
    """(rank, worker_name, world_size), from RPC when initialised, else torch.distributed.

    Explicit ``rank``/``worker_name`` win; a worker outside any job is rank 0 of 1.
    """
    if rpc.is_available() and rpc.api._is_current_rpc_agent_set():
        me = rpc.get_worker_info()
        world_size = len(rpc.api._get_current_rpc_agent().get_worker_infos())
        found_rank, found_name = me.id, me.name
    elif dist.is_initialized():
        found_rank, world_size = dist.get_rank(), dist.get_world_size()
        found_name = None
    else:
        found_rank, world_size, found_name = 0, 1, None
    rank = found_rank if rank is None else rank
    worker_name = worker_name or found_name or f"rank{rank}"
    return rank, worker_name, world_size


def job_id():
    """``$TRACEMERGE_JOB_ID``, else the rendezvous address every rank was given, else ""."""
    explicit = os.environ.get("TRACEMERGE_JOB_ID")
    if explicit:
        return explicit
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not (addr and port):
        return ""
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    return f"{addr}:{port}" + (f"/{run}" if run else "")


def boot_id():
    """This machine's boot id (Linux): processes with the same one read one wall clock; "" elsewhere."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
