"""Key averages: tracemerge on the exported trace vs torch's own key_averages(), side by side.

One real profile of a training-like loop (``--steps`` iterations, ~90 events each) is
taken; then torch's ``prof.key_averages()`` is timed (tree build + averaging: what a user
waits for) against tracemerge reading the exported JSON and computing the same rows (parse
included). Both results are compared row by row, and the ratio of the two times printed.

    python benchmarks/keyavg.py --steps 2000
"""

import argparse
import gc
import os
import tempfile
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from tracemerge.report.keyavg import group_rows, key_averages
from tracemerge.inputs.chrome import read_trace


def workload(steps):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with record_function("forward"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
    return prof


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    prof = workload(args.steps)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        size = os.path.getsize(path)
        gc.collect()
        t0 = time.perf_counter()
        theirs = {e.key: (e.count, e.cpu_time_total, e.self_cpu_time_total) for e in prof.key_averages()}
        t_torch = time.perf_counter() - t0
        gc.collect()
        t0 = time.perf_counter()
        trace = read_trace(path)
        t_read = time.perf_counter() - t0
        rows = group_rows(key_averages(trace, np.zeros(len(trace.pids), dtype=np.int64)), by_rank=False)
        t_ours = time.perf_counter() - t0
    ours = {r.key: (r.count, r.cpu_time_total, r.self_cpu_time_total) for r in rows}
    worst = max(abs(a - b) / max(abs(b), 1e-9) for k in theirs for a, b in zip(ours[k][1:], theirs[k][1:]))
    same_counts = all(ours[k][0] == theirs[k][0] for k in theirs) and set(ours) == set(theirs)
    print(f"events {len(trace):,} ({size / 1e6:.0f} MB JSON), keys {len(theirs)}")
    print(f"torch key_averages():             {t_torch:7.2f} s")
    print(f"tracemerge read + key averages:   {t_ours:7.2f} s  (read {t_read:.2f} s)")
    print(f"ratio torch / tracemerge:         {t_torch / t_ours:7.1f}x")
    print(f"same keys and counts: {same_counts}; worst relative time difference {worst:.1e}")


if __name__ == "__main__":
    main()
