"""Who this worker is in its job: rank, name, world size and a job id shared by all ranks."""

import contextlib
import functools
import os
import uuid
from typing import Any, Callable, Iterator, Optional, Tuple

import torch.distributed as dist
from torch.distributed import rpc

from tracemerge.capture.patching import swapped


def in_job() -> bool:
    """Whether RPC or torch.distributed is initialised in this process (who it is can be told)."""
    return (rpc.is_available() and rpc.api._is_current_rpc_agent_set()) or dist.is_initialized()


def identify(rank: Optional[int] = None, worker_name: Optional[str] = None) -> Tuple[int, str, int]:
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


def job_id(ask: bool = True) -> str:
    """``$TRACEMERGE_JOB_ID``, else the rendezvous address every rank was given plus a token
    agreed with rank 0 (two runs on one MASTER_ADDR:MASTER_PORT get different ids; ``ask``
    False: the address alone, at once), else "".
    """
    explicit = os.environ.get("TRACEMERGE_JOB_ID")
    if explicit:
        return explicit
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    where = f"{addr}:{port}" + (f"/{run}" if run else "") if addr and port else ""
    token = _agreed_token() if ask else ""
    return f"{where}@{token}" if token else where


# This process's token: rank 0's is the job's. A constant, made once per process, so every
# rank that asks rank 0's process during one run gets the same one, and a new run another.
_TOKEN = uuid.uuid4().hex[:16]
_ASK_TIMEOUT_S = 10.0


def _process_token() -> str:
    """Runs on rank 0 (by RPC): its process's token."""
    return _TOKEN


def _agreed_token() -> str:
    """Rank 0's token, by RPC when it is up, else by torch.distributed's store; "" when
    neither is initialised or rank 0 does not answer in time (never blocks longer)."""
    try:
        if rpc.is_available() and rpc.api._is_current_rpc_agent_set():
            if rpc.get_worker_info().id == 0:
                return _TOKEN
            first = [w for w in rpc.api._get_current_rpc_agent().get_worker_infos() if w.id == 0]
            if not first:
                return ""
            # the function inside rpc_sync's wrapper: untraced even while a capture swaps it
            # (__wrapped__ is set by torch's own decorator, unknown to its stubs)
            return getattr(rpc.rpc_sync, "__wrapped__")(first[0], _process_token, timeout=_ASK_TIMEOUT_S)
        if dist.is_initialized():
            store = dist.distributed_c10d._get_default_store()
            # the first rank to ask sets it; every other rank reads what it set (no wait)
            return store.compare_set("tracemerge/job_token", "", _TOKEN).decode()
    except Exception:  # a job id is a hint for combine; never fail the training job over it
        return ""
    return ""


def boot_id() -> str:
    """This machine's boot id (Linux): processes with the same one read one wall clock; "" elsewhere."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def on_init(callback: Callable[[], Any]) -> Iterator[None]:
    """Within the block, ``callback()`` runs as soon as ``rpc.init_rpc`` or
    ``torch.distributed.init_process_group`` returns: who this worker is can be told from
    then on. ``init_process_group`` is swapped inside its wrapper (every holder of it sees
    the swap); ``init_rpc`` has none, so the module's name for it is rebound."""

    def after(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            try:
                callback()
            except Exception:  # never fail the training job over who it is
                pass
            return out

        return call

    has_rpc = rpc.is_available() and hasattr(rpc, "init_rpc")
    original = rpc.init_rpc if has_rpc else None
    if original is not None:
        rpc.init_rpc = after(original)
    try:
        with swapped({dist.init_process_group: after}):
            yield
    finally:
        if original is not None:
            rpc.init_rpc = original
