"""Small real torch jobs of the shapes ``tracemerge whatif`` must be right on, each with one
planted delay, for checking a prediction against a real rerun with that delay halved.

Run as ``python tests/whatif_job.py SHAPE OUT_DIR MS [MS ...]``: the processes of SHAPE
(tensorpipe RPC and a gloo group on loopback, free ports) capture with
``tracemerge.capture.profile``; the driver runs one step per MS given, in that order, with
the planted delay (a ``time.sleep`` inside ``record_function("planted:delay")``) that
long. Steps are marked by ``record_function("ProfilerStep#k")``, or, for the ``schedule``
shape, by ``torch.profiler.schedule`` and ``p.step()``. ``OUT_DIR/whatif.json`` lists the
steps' delays and the rank the delay runs on.

Shapes (SHAPES): ``cold`` (3 workers; the driver's first calls follow ``init_rpc`` at once:
a plain UDF with ``rpc_sync`` then an ``async_execution`` chain), ``udf`` (a plain UDF
with ``rpc_sync`` after a warm-up), ``async`` (a nested ``async_execution`` function
returning ``fut.then(...)``), ``concurrent`` (five ``rpc_async`` in flight, the planted one
the longest), ``rref`` (a method of an object the callee owns, through an RRef),
``allreduce`` (a UDF on the slow rank, then a gloo ``all_reduce`` every step that the
slow rank's main thread also waits in), ``ps`` (a parameter server that batches both
trainers' updates and applies them at once), ``schedule`` (``udf`` with steps from a
schedule), ``threads1`` / ``threads8`` (``concurrent`` with one and eight server threads).
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch.autograd.profiler import record_function

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.jobs import free_port  # noqa: E402
from tracemerge.capture import profile  # noqa: E402

TIMEOUT_S = 60
PLANTED = "planted:delay"
# shape: (workers, rank the planted delay runs on, server threads)
SHAPES = {
    "cold": (3, 1, 8),
    "udf": (2, 1, 8),
    "async": (3, 1, 8),
    "concurrent": (2, 1, 8),
    "rref": (2, 1, 8),
    "allreduce": (2, 1, 8),
    "ps": (3, 0, 8),
    "schedule": (2, 1, 8),
    "threads1": (2, 1, 1),
    "threads8": (2, 1, 8),
}
GAP_S = 0.01   # between steps, as a real loop has


def planted(ms: float, name: str = PLANTED) -> None:
    with record_function(name):
        time.sleep(ms / 1000)


def udf(ms: float, name: str = PLANTED) -> int:
    planted(ms, name)
    return 1


def then_work(fut: torch.futures.Future) -> int:
    with record_function("then:work"):
        x = torch.ones(32, 32)
        for _ in range(5):
            x = torch.tanh(x @ x / 32)
    return fut.value() + 1


@rpc.functions.async_execution
def async_chain(ms: float) -> torch.futures.Future:
    return rpc.rpc_async("worker1", udf, args=(ms,)).then(then_work)


class Box:
    def work(self, ms: float) -> int:
        planted(ms)
        return 2


def slow_then_reduce(ms: float) -> int:
    planted(ms)
    return 1


# -- the parameter server: updates of both trainers are applied together ---------------------
class Server:
    def __init__(self, trainers: int) -> None:
        self.lock = threading.Lock()
        self.trainers = trainers
        self.pending: list = []
        self.weights = torch.zeros(64)


SERVER: dict = {}   # {"ps": Server} on the server's process


@rpc.functions.async_execution
def update(grad: torch.Tensor, ms: float) -> torch.futures.Future:
    """Answered once every trainer's update of the round is in: the last one applies the batch."""
    ps = SERVER["ps"]
    fut: torch.futures.Future = torch.futures.Future()
    with ps.lock:
        ps.pending.append((grad, fut))
        if len(ps.pending) < ps.trainers:
            return fut
        batch, ps.pending = ps.pending, []
    planted(ms)   # applying the batch: the server's own work
    with record_function("ps:apply"):
        ps.weights += sum(g for g, _ in batch)
    for _, f in batch:
        f.set_result(ps.weights.clone())
    return fut


def trainer(delays: list) -> None:
    for k, ms in enumerate(delays):
        with record_function(f"ProfilerStep#{k}"):
            with record_function("trainer:compute"):
                x = torch.ones(32, 32)
                for _ in range(3):
                    x = torch.tanh(x @ x / 32)
            rpc.rpc_sync("worker0", update, args=(torch.ones(64), ms))
        time.sleep(GAP_S)


# -- one step of each shape, on the driver ---------------------------------------------------
def step(shape: str, ms: float, box) -> None:
    if shape in ("udf", "schedule"):
        rpc.rpc_sync("worker1", udf, args=(ms,))
    elif shape == "cold":
        rpc.rpc_sync("worker1", udf, args=(ms,))
        rpc.rpc_sync("worker2", async_chain, args=(ms / 2,))
    elif shape == "async":
        rpc.rpc_sync("worker2", async_chain, args=(ms,))
    elif shape in ("concurrent", "threads1", "threads8"):
        futs = [rpc.rpc_async("worker1", udf, args=(d, "other")) for d in (5, 10, 15, 20)]
        futs.append(rpc.rpc_async("worker1", udf, args=(ms,)))
        torch.futures.wait_all(futs)
    elif shape == "rref":
        box.rpc_sync().work(ms)
    elif shape == "allreduce":
        fut = rpc.rpc_async("worker1", slow_then_reduce, args=(ms,))
        fut.wait()
        t = torch.ones(4)
        dist.all_reduce(t)


def drive(shape: str, delays: list, p) -> None:
    box = rpc.remote("worker1", Box) if shape == "rref" else None
    if shape != "cold":
        step(shape, 0.0, box)                    # first connections, the RRef's type lookup
    if shape == "schedule":
        p.step()                                 # the warm-up was the schedule's warm-up step
    for k, ms in enumerate(delays):
        if shape == "schedule":
            step(shape, ms, box)
            p.step()
        else:
            with record_function(f"ProfilerStep#{k}"):
                step(shape, ms, box)
        time.sleep(GAP_S)


def follow(shape: str, rank: int, delays: list) -> None:
    """The non-driver's own loop: in ``allreduce`` its main thread joins each step's all_reduce."""
    if shape == "allreduce" and rank == 1:
        dist.all_reduce(torch.ones(4))               # the driver's warm-up step
        for k in range(len(delays)):
            with record_function(f"ProfilerStep#{k}"):
                dist.all_reduce(torch.ones(4))


def worker(rank: int, shape: str, rpc_port: int, pg_port: int, out: str, delays: list) -> None:
    world, _, threads = SHAPES[shape]
    # one intra-op thread, and torch's first matmul done before the job: a new thread's first
    # op otherwise starts a thread pool (100-800 ms, varying), noise that is no planted delay
    torch.set_num_threads(1)
    torch.tanh(torch.ones(32, 32) @ torch.ones(32, 32))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(rpc_port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{pg_port}", rank=rank, world_size=world)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(num_worker_threads=threads,
                                                                     rpc_timeout=TIMEOUT_S))
    if shape == "ps" and rank == 0:
        SERVER["ps"] = Server(world - 1)
    kwargs = {}
    if shape == "schedule" and rank == 0:   # the driver steps; the server records throughout
        kwargs["schedule"] = torch.profiler.schedule(wait=0, warmup=1, active=len(delays), repeat=1)
    with profile(out, **kwargs) as p:
        dist.barrier()
        if shape == "ps":
            if rank > 0:
                trainer([0.0] + list(delays))   # a warm-up round, then the steps
        elif rank == 0:
            drive(shape, delays, p)
        else:
            follow(shape, rank, delays)
        dist.barrier()
    rpc.shutdown()
    dist.destroy_process_group()


def main(shape: str, out: str, delays: list) -> None:
    world, rank, _ = SHAPES[shape]
    Path(out).mkdir(parents=True, exist_ok=True)
    mp.spawn(worker, args=(shape, free_port(), free_port(), out, delays), nprocs=world)
    steps = ([0.0] + delays) if shape == "ps" else delays
    Path(out, "whatif.json").write_text(json.dumps({"shape": shape, "rank": rank, "steps": steps,
                                                    "first_step": 1 if shape == "ps" else 0}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3:]])


def compare(runs: list, planted_ms: float) -> dict:
    """Prediction against measurement over the job runs ``runs`` ([OUT_DIR], of one shape):
    each step with the delay as planted (``planted_ms``) is replayed with ``planted:delay``
    on its rank halved, and each step run with the delay halved is the measurement.
    {"predicted": [ns], "measured": [ns], "baseline": [ns]} of those steps."""
    from tracemerge.analysis.job_timeline import job_timeline
    from tracemerge.analysis.whatif import Speedup, whatif
    from tracemerge.job import Session
    from tracemerge.runtime.engine import LocalEngine

    out: dict = {"predicted": [], "measured": [], "baseline": []}
    for run in runs:
        meta = json.loads(Path(run, "whatif.json").read_text())
        paths = sorted(str(p) for p in Path(run).glob("rank*.json.gz"))
        session = Session.open(paths)
        job = job_timeline(session, session.align(), LocalEngine(1))
        delays = meta["steps"][meta["first_step"]:]
        same = whatif(job, [])
        half = whatif(job, [Speedup(PLANTED, meta["rank"], 2.0)])
        same, half = same[-len(delays):], half[-len(delays):]
        for ms, p, q in zip(delays, same, half):
            if ms == planted_ms:
                out["baseline"].append(p.measured_ns)
                out["predicted"].append(q.predicted_ns)
            else:
                out["measured"].append(p.measured_ns)
    return out
