"""A 2-worker RPC job whose rank 1 never hears the job's token and is then ended by SIGTERM
while hung (issue 45), run under ``python -m torch.distributed.run --standalone
--nproc-per-node 2 tests/token_job.py OUT_DIR``:

Rank 0 enters ``profile(OUT_DIR)`` before ``rpc.init_rpc`` (the README's first pattern: its
identity, job token included, is told as ``init_rpc`` returns), then holds Python's lock (a
busy loop under a long switch interval, as a rank stuck in a long step of pure Python
would). Rank 1 enters ``profile`` a second after ``init_rpc`` (the second pattern): told who
it is as the block starts, it asks rank 0 for the job's token by RPC, which rank 0 cannot
answer, so the ask times out (after the capture's 10 s) and rank 1's job id is the
rendezvous address alone. Both ranks then hang until the test ends the job as ``timeout
-s TERM`` would; rank 1 writes ``OUT_DIR/planted.json`` once the block has started.
"""

import json
import os
import sys
import time

import torch.distributed.rpc as rpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tracemerge.capture import profile  # noqa: E402

HOLD_S = 13   # longer than the capture's ask (10 s)


def main(out_dir: str) -> None:
    rank = int(os.environ["RANK"])
    opts = rpc.TensorPipeRpcBackendOptions(rpc_timeout=60, init_method="env://")
    if rank == 0:
        with profile(out_dir):   # the README's first pattern: told who it is as init_rpc returns
            rpc.init_rpc("worker0", rank=0, world_size=2, rpc_backend_options=opts)
            # rank 0 would answer the ask on one of its RPC threads, which need Python's lock:
            # held from here until after the ask timed out
            sys.setswitchinterval(60)
            start = time.monotonic()
            while time.monotonic() - start < HOLD_S:
                pass
            sys.setswitchinterval(0.005)
            time.sleep(3600)   # hung, until the test ends the job
    else:
        rpc.init_rpc("worker1", rank=1, world_size=2, rpc_backend_options=opts)
        time.sleep(1)   # rank 0 is in its loop by now
        with profile(out_dir):   # the second pattern: told who it is (asking rank 0) as the block starts
            with open(os.path.join(out_dir, "planted.json.tmp"), "w") as f:
                json.dump({"rank": 1, "identified_ns": time.time_ns()}, f)
            os.replace(os.path.join(out_dir, "planted.json.tmp"), os.path.join(out_dir, "planted.json"))
            time.sleep(3600)   # hung, until the test ends the job


if __name__ == "__main__":
    main(sys.argv[1])
