"""A 3-rank DDP job (gloo, CPU) for the collectives tests (issue 46), run under
``python -m torch.distributed.run --standalone --nproc-per-node 3``:

    python -m torch.distributed.run --standalone --nproc-per-node 3 tests/ddp_job.py PROFILER OUT_DIR SLEEP_MS [fsdp] [barrier] [alternate] [FAIL]

Every rank trains one small model wrapped in ``DistributedDataParallel`` (with ``fsdp``:
sharded by FSDP2's ``fully_shard``, which runs on gloo on CPU); nothing calls a
Python ``dist.*`` collective inside the profiled steps (DDP's reducer issues them from C++),
unless ``barrier``: a ``dist.barrier()`` ends every step.
Rank 2 sleeps ``SLEEP_MS`` in every forward, inside ``record_function("planted_sleep")``:
the others wait for it in backward's all_reduce; with ``alternate``, only in odd steps, over
``ALTERNATE_STEPS`` steps: the even steps are the job run without the sleep, on cores as busy
as the odd ones' at that moment (what ``whatif`` of the sleep removed is compared with).
With ``alternate`` every rank's forward also waits ``ALTERNATE_WORK_MS`` in
``record_function("device_work")`` (``DDP_WORK_MS`` in the environment overrides it): the
step's work as a GPU job's CPU sees it, a wait, so that a step is mostly its work and not
gloo's loopback latency (~3 ms a step, longer after a rank sat idle in a sleep), and so that
3 ranks on a machine's 2 cores do not slow each other's work more in the steps where they
work together than in those where rank 2 works alone after its sleep: both made the steps
without the sleep differ from a slept step less its sleep by -49 % to +38 % from run to run.
PROFILER:

- ``capture``: ``tracemerge.capture.profile`` around STEPS steps (``p.step()`` each), with
  ``schedule(wait=0, warmup=1, active=STEPS - 1, repeat=1)`` so the steps are marked
  (``ProfilerStep#N``): one file per rank, ``rank{R}.cycle0.json.gz`` (with FAIL, no
  schedule: ``rank{R}.json.gz``, written however the job ends);
- ``plain``: ``torch.profiler.profile`` with ``schedule(wait=1, warmup=1, active=ACTIVE,
  repeat=2)`` and ``tensorboard_trace_handler(OUT_DIR)``: two files per rank.

FAIL (``raise`` or ``hang``) plants a failure in step ``FAIL_STEP`` of rank 1 (capture only): ``raise`` (a
RuntimeError out of the step: torchrun ends the others) or ``hang`` (blocks forever before
its backward, so the others wait in the all_reduce; the test ends the job with
``timeout -s TERM``). The failing rank writes ``OUT_DIR/planted.json`` just before.

Every rank writes ``OUT_DIR/steps{R}.json``: the wall time of each step it ran (the real
step times a rerun without the sleep is compared by).
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS = 8
ALTERNATE_STEPS = 61
ALTERNATE_WORK_MS = 40
ACTIVE = 3
SLOW_RANK = 2
FAIL_RANK = 1
FAIL_STEP = 2
TIMEOUT_S = 30


class Slowed(torch.nn.Module):
    """The model, with the planted sleep at the start of its forward on the slow rank."""

    def __init__(self, rank: int, sleep_s: float) -> None:
        super().__init__()
        self.rank, self.sleep_s, self.work_s = rank, sleep_s, 0.0
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rank == SLOW_RANK and self.sleep_s:
            with torch.profiler.record_function("planted_sleep"):
                time.sleep(self.sleep_s)
        if self.work_s:
            with torch.profiler.record_function("device_work"):
                time.sleep(self.work_s)
        return self.net(x)


def plant(out_dir: str, **facts) -> None:
    path = os.path.join(out_dir, "planted.json")
    with open(path + ".tmp", "w") as f:
        json.dump(dict(facts, planted_ns=time.time_ns()), f)
    os.replace(path + ".tmp", path)


def main(profiler: str, out_dir: str, sleep_ms: float, *options: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    fail = next((o for o in options if o in ("raise", "hang")), "")
    alternate = "alternate" in options
    steps_run = ALTERNATE_STEPS if alternate else STEPS
    slowed = Slowed(rank, sleep_ms / 1000)
    if "fsdp" in options:
        from torch.distributed.fsdp import fully_shard

        model = fully_shard(slowed)
    else:
        model = DistributedDataParallel(slowed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    slowed.work_s = float(os.environ.get("DDP_WORK_MS", ALTERNATE_WORK_MS if alternate else 0)) / 1000
    took = []

    def step(n: int) -> None:
        started = time.time_ns()
        slowed.sleep_s = sleep_ms / 1000 if not alternate or n % 2 else 0.0
        opt.zero_grad()
        loss = model(x).sum()
        if fail and rank == FAIL_RANK and n == FAIL_STEP:
            plant(out_dir, rank=rank, step=n, fail=fail)
            if fail == "raise":
                raise RuntimeError("planted failure in step %d" % n)
            time.sleep(3600)
        loss.backward()
        opt.step()
        if "barrier" in options:
            dist.barrier()   # a Python dist.* call: the capture records it, the trace shows it too
        took.append(time.time_ns() - started)

    if profiler == "capture":
        from torch.profiler import schedule

        from tracemerge.capture import profile

        # a failing job's files are written when it ends (a signal's, a raise's), so no schedule then:
        # only completed cycles are written
        cycles = {} if fail else {"schedule": schedule(wait=0, warmup=1, active=steps_run - 1, repeat=1)}
        with profile(out_dir, **cycles) as p:
            for n in range(steps_run):
                step(n)
                p.step()
    else:
        from torch.profiler import profile as torch_profile
        from torch.profiler import schedule, tensorboard_trace_handler

        steps = 2 * (2 + ACTIVE)
        with torch_profile(schedule=schedule(wait=1, warmup=1, active=ACTIVE, repeat=2),
                           on_trace_ready=tensorboard_trace_handler(out_dir)) as p:
            for n in range(steps):
                step(n)
                p.step()
    with open(os.path.join(out_dir, f"steps{rank}.json"), "w") as f:
        json.dump(took, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), *sys.argv[4:])
