"""A 2-rank gloo job (loopback, ``torch.multiprocessing.spawn``) with PyTorch's Flight
Recorder on (``TORCH_FR_BUFFER_SIZE``), for the Flight Recorder tests:

    python tests/fr_job.py MODE OUT_DIR

Both ranks capture with ``tracemerge.capture.profile(OUT_DIR)`` and run ``all_reduce``
steps. MODE plants the failure:

- ``hang``: rank 1 never joins the all_reduce of step ``KTH``; rank 0 waits in it. ``HANG_S``
  after rank 0 entered it, each rank's watchdog thread dumps its Flight Recorder as the
  NCCL watchdog would on a timeout: ``OUT_DIR/pickle/nccl_trace_rank_{R}``
  (``_dump_fr_trace()``) and ``OUT_DIR/json/nccl_trace_rank_{R}.json``
  (``_dump_fr_trace_json()``). The test then ends the job with SIGTERM (as ``timeout`` does).
- ``mismatch``: at step ``KTH`` rank 1's all_reduce is of a ``(2, 2)`` tensor where rank 0's
  is of a ``(4,)`` one, and at step ``KTH + 1`` of ``int32`` where rank 0's is ``float32``
  (the same bytes on the wire: gloo completes them, where a different element count
  aborts the process); after the steps each rank dumps (both forms) and ends normally.
- ``raise``: rank 0 raises ``RuntimeError("planted in step 1")`` in its first step, before
  its all_reduce; rank 1 is left in that all_reduce (gloo: "Connection closed by peer", or
  the launcher's SIGTERM first). Rank 0 plants ``raised_ns`` just before it raises.

The planted truth: ``OUT_DIR/planted{R}.json`` ({"seq": the collective's sequence number,
"enter_ns": rank 0 just before it entered it, "dump_ns": just after its dump}).
"""

import datetime
import json
import os
import sys
import threading
import time

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "200")  # before torch.distributed starts a group

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tracemerge.capture import profile  # noqa: E402

KTH = 3
HANG_S = 1.5
STEPS = 6


def plant(out_dir: str, rank: int, **facts) -> None:
    path = os.path.join(out_dir, f"planted{rank}.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    with open(path + ".tmp", "w") as f:
        json.dump({**old, **facts}, f)
    os.replace(path + ".tmp", path)


def dump(out_dir: str, rank: int) -> None:
    """Both forms of this rank's Flight Recorder, as the watchdog names them (prefix + rank)."""
    c10d = torch._C._distributed_c10d
    for form, data, name in (("pickle", c10d._dump_fr_trace(), f"nccl_trace_rank_{rank}"),
                             ("json", c10d._dump_fr_trace_json(), f"nccl_trace_rank_{rank}.json")):
        os.makedirs(os.path.join(out_dir, form), exist_ok=True)
        path = os.path.join(out_dir, form, name)
        with open(path + ".tmp", "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        os.replace(path + ".tmp", path)
    plant(out_dir, rank, dump_ns=time.time_ns())


def watchdog(out_dir: str, rank: int, entered: threading.Event) -> None:
    entered.wait()
    time.sleep(HANG_S)
    dump(out_dir, rank)


def worker(rank: int, mode: str, out_dir: str, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    entered = threading.Event()
    threading.Thread(target=watchdog, args=(out_dir, rank, entered), daemon=True).start()
    with profile(out_dir):
        for n in range(1, STEPS + 1):
            tensor = torch.ones(4)
            if mode == "mismatch" and rank == 1 and n == KTH:
                tensor = torch.ones(2, 2)
            if mode == "mismatch" and rank == 1 and n == KTH + 1:
                tensor = torch.ones(4, dtype=torch.int32)
            if mode == "hang" and n == KTH:
                seq = dist.distributed_c10d._get_default_group()._get_sequence_number_for_group() + 1
                plant(out_dir, rank, seq=seq, enter_ns=time.time_ns())
                entered.set()
                if rank == 1:
                    threading.Event().wait()  # never joins; ended by the test's SIGTERM
            elif mode == "raise" and n == 1:
                plant(out_dir, rank, seq=dist.distributed_c10d._get_default_group()._get_sequence_number_for_group() + 1)
                if rank == 0:
                    plant(out_dir, rank, raised_ns=time.time_ns())
                    raise RuntimeError(f"planted in step {n}")
            elif mode == "mismatch" and n == KTH:
                plant(out_dir, rank, seq=dist.distributed_c10d._get_default_group()._get_sequence_number_for_group() + 1)
            dist.all_reduce(tensor)
            time.sleep(0.02)
    if mode == "mismatch":
        dump(out_dir, rank)
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    from tests.support.jobs import free_port

    job_mode, out = sys.argv[1:3]
    mp.spawn(worker, args=(job_mode, out, free_port()), nprocs=2, join=True)
