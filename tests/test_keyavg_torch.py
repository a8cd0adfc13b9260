"""Key averages from an exported trace equal torch's own key_averages() for the same profile."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tracemerge.report.keyavg import group_rows, key_averages  # noqa: E402
from tracemerge.inputs.chrome import read_trace  # noqa: E402


def training_profile(tmp_path, with_stack=False):
    """A small training loop under a schedule; returns (torch rows, trace path)."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 4)
    out = {}

    def ready(prof):
        out["torch"] = {(e.key, e.is_user_annotation): (e.count, e.cpu_time_total, e.self_cpu_time_total)
                        for e in prof.key_averages()}
        path = tmp_path / "trace.json"
        prof.export_chrome_trace(str(path))
        out["path"] = path

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=ready, with_stack=with_stack, record_shapes=True) as prof:
        for _ in range(5):
            with record_function("forward"):
                with record_function("forward"):      # an only child with its parent's name
                    loss = torch.nn.functional.mse_loss(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step()
    return out["torch"], out["path"]


def test_equals_torch_key_averages(tmp_path):
    expected, path = training_profile(tmp_path)
    trace = read_trace(path)
    rows = group_rows(key_averages(trace, np.zeros(len(trace.pids), dtype=np.int64)), by_rank=False)
    got = {(r.key, r.is_user_annotation): (r.count, r.cpu_time_total, r.self_cpu_time_total) for r in rows}
    assert ("ProfilerStep*", True) in got and got[("ProfilerStep*", True)][0] == 3
    assert set(got) == set(expected)
    for key, (count, total, self_) in expected.items():
        g = got[key]
        assert g[0] == count, key
        assert g[1] == pytest.approx(total, rel=1e-6, abs=1e-6), key
        assert g[2] == pytest.approx(self_, rel=1e-6, abs=1e-6), key
