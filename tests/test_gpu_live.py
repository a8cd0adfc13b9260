"""On a machine with CUDA GPUs: device time from a trace torch just wrote equals torch's own
``key_averages()`` for the same profile — one process, and a real 2-process NCCL job
(two GPUs). Skipped without them (CPU builds of torch, machines without a GPU), and said so."""

import os
from typing import Dict, Tuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here: the live device-time checks need one (the real traces of "
                "tests/test_gpu_traces.py check the same rules without one)", allow_module_level=True)

from tracemerge.inputs import read_trace  # noqa: E402
from tracemerge.report.keyavg import group_rows, key_averages  # noqa: E402

Rows = Dict[Tuple[str, str, bool], Tuple[int, float, float]]


def torch_rows(prof) -> Rows:
    return {(e.key, "CPU" if str(e.device_type).endswith("CPU") else "CUDA", bool(e.is_user_annotation)):
            (e.count, e.device_time_total, e.self_device_time_total) for e in prof.key_averages()}


def our_rows(path: str) -> Rows:
    trace = read_trace(path)
    rows = group_rows(key_averages(trace, np.zeros(len(trace.pids), dtype=np.int64)), by_rank=False)
    return {(r.key, r.device_type, r.is_user_annotation): (r.count, r.device_time_total, r.self_device_time_total)
            for r in rows}


def assert_same(ours: Rows, theirs: Rows) -> None:
    """Every row of torch's with device time is ours, with the same count and times
    (torch's CPU-only bookkeeping rows, such as Kineto's overhead spans, are not compared)."""
    theirs = {k: v for k, v in theirs.items() if v[1] > 0 or v[2] > 0}
    assert theirs
    for key, (count, total, self_) in theirs.items():
        assert key in ours, key
        assert ours[key][0] == count, key
        assert ours[key][1] == pytest.approx(total, rel=1e-6, abs=1e-3), key
        assert ours[key][2] == pytest.approx(self_, rel=1e-6, abs=1e-3), key


def workload(device: str, steps: int = 3) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randn(64, 10)
    for _ in range(steps):
        with torch.profiler.record_function("## step ##"):
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            opt.zero_grad()
    torch.cuda.synchronize()


def test_one_process_device_time_equals_torch(tmp_path):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        workload("cuda")
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    assert_same(our_rows(path), torch_rows(prof))


def _nccl_worker(rank: int, world: int, init: str, out: str) -> None:
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = torch.ones(1 << 20, device="cuda")
        for _ in range(4):
            dist.all_reduce(t)
        workload(f"cuda:{rank}", steps=1)
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    torch.save(torch_rows(prof), os.path.join(out, f"rank{rank}.torch.pt"))
    dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="a 2-process NCCL job needs two GPUs")
def test_nccl_job_device_time_equals_torch(tmp_path):
    import torch.multiprocessing as mp
    init = f"file://{tmp_path / 'store'}"
    mp.spawn(_nccl_worker, args=(2, init, str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        path = str(tmp_path / f"rank{rank}.json")
        assert_same(our_rows(path), torch.load(str(tmp_path / f"rank{rank}.torch.pt")))
