import os
import socket
import sys
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile


def udf(x, y):
    time.sleep(0.002)
    return torch.mul(torch.add(x, y), 2)

def run(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
    cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with profile(activities=[ProfilerActivity.CPU], experimental_config=cfg) as p:
        if rank == 0:
            for i in range(5):
                rpc.rpc_sync("worker1", torch.add, args=(torch.ones(3), 1))
                rpc.rpc_async("worker1", udf, args=(torch.ones(3), torch.ones(3))).wait()
        rpc.api._wait_all_workers()
    p.export_chrome_trace(f"{out}/worker{rank}.json")
    rpc.shutdown()

if __name__ == "__main__":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(run, args=(port, sys.argv[1]), nprocs=2)
