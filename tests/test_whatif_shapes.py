"""``whatif`` against real reruns, on a representative subset of the job shapes of
``benchmarks/whatif.py`` (all of them run there; each job costs seconds, so CI runs three):
a plain UDF with ``rpc_sync`` (the commonest), a nested ``async_execution`` chain with
``.then()`` (which predicted no change before), and a gloo ``all_reduce`` every step with a
slow rank whose main thread waits in it (blocked time taken as work before).

Each job alternates steps with the planted delay (40 ms) as planted and halved, so each
halved step runs right after a planted one under the same load; ``whatif`` halves the delay
in the planted steps. The predicted median must be within 10 % or 5 ms of the measured
median, or, on a machine loaded enough that two planted steps differ by more, within
twice the difference of the planted steps' medians' spread (as the planted-delay test).

Also a hang guard: 100,000 perfectly nested spans on one thread, through ``whatif`` and
``report --analysis``, each in a subprocess with a generous timeout (both were quadratic in
the nesting depth).
"""

import os
import statistics

import pytest
from support import cli
from support.jobs import run_job
from support.paths import ROOT
from support.ranks import rank_file, write, x

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "whatif_job.py")
MS = 40.0
PAIRS = 3


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


@pytest.mark.parametrize("shape", ["udf", "async", "allreduce"])
def test_prediction_matches_the_rerun(tmp_path, shape):
    pytest.importorskip("torch")
    from tests.whatif_job import compare

    run_job([JOB, shape, tmp_path, *[MS, MS / 2] * PAIRS], 240)
    got = compare([str(tmp_path)], MS)
    assert len(got["predicted"]) == len(got["measured"]) == PAIRS
    predicted = statistics.median(got["predicted"])
    measured = statistics.median(got["measured"])
    base = got["baseline"]
    noise = 2 * (max(base) - min(base))   # two identical steps differ by this on this machine
    bound = max(0.10 * measured, 5e6, noise)
    assert abs(predicted - measured) <= bound, (shape, got)
    # and the prediction is a speed-up of about the halved delay, never a slow-down
    assert predicted < statistics.median(base)


def test_deep_nesting_is_not_quadratic(tmp_path):
    """100k spans each inside the one before (a recursion's trace): each command finishes
    well within the guard (minutes before, a few seconds now on a calm machine)."""
    n = 100_000
    path = str(tmp_path / "rank0.json")
    write(path, rank_file([x(f"op{i % 7}", i, 2 * (n - i) + 1, pid=100, tid=1) for i in range(n)], 0,
                          world_size=1))
    env = dict(os.environ, PYTHONPATH=ROOT)
    for args in (["whatif", path, "--speedup", "op3=2"], ["report", "--analysis", path]):
        r = cli.run(*args, timeout=60, env=env)
        assert r.exit_code == 0, r.stderr[-2000:]
