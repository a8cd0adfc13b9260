"""Deaths in the first second (issue 47), real jobs (loopback, ``torch.multiprocessing.spawn``):

- a callee that dies by ``os._exit`` in its 2nd served call, within 0.3 s of RPC coming up,
  under each of the README's two block patterns (``profile`` around ``init_rpc``, and
  after it), under ``mp.spawn`` and torchrun: ``tests/early_death_job.py``;
- a rank that raises in its first step of a gloo job (``tests/fr_job.py raise``), the other
  left in the all_reduce it never got out of.

The ground truth is what the jobs plant (the time of death, of the raise). The report is
of every file the capture left (``traces/*``), and of the directory itself.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import cli

from tracemerge import AlignRequest, Job
from tracemerge.report.build import job_report

pytest.importorskip("torch.distributed.rpc")

ROOT = Path(__file__).resolve().parent.parent
JOB_TIMEOUT_S = 300  # a bound, not the time: each job takes seconds on a quiet machine
MS = 1_000_000
PATTERNS = ("long", "short")
LAUNCHERS = ("spawn", "torchrun")
CASES = [f"{launcher}-{pattern}" for launcher in LAUNCHERS for pattern in PATTERNS]


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _command(case: str, out: Path) -> list:
    launcher, pattern = case.split("-")
    job = [str(ROOT / "tests" / "early_death_job.py"), launcher, pattern, str(out / "traces"), str(out / "plant")]
    if launcher == "spawn":
        return job
    return ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.1", *job]


def _run(command: list, log: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    with open(log, "wb") as f:
        subprocess.run(["timeout", "-s", "TERM", str(JOB_TIMEOUT_S), sys.executable, *command], cwd=ROOT, env=env,
                       stdout=f, stderr=f, timeout=JOB_TIMEOUT_S + 30)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    base = tmp_path_factory.mktemp("early")
    runs = {}
    for name in (*CASES, "raise"):
        (base / name / "traces").mkdir(parents=True)
        (base / name / "plant").mkdir()
    commands = [(_command(case, base / case), base / case / "job.log") for case in CASES]
    commands.append(([str(ROOT / "tests" / "fr_job.py"), "raise", str(base / "raise" / "traces")],
                     base / "raise" / "job.log"))
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda c: _run(*c), commands))
    for name in (*CASES, "raise"):
        runs[name] = base / name
    return runs


def _traces(run: Path) -> list:
    return sorted(str(p) for p in (run / "traces").iterdir() if not p.name.startswith("planted"))


@pytest.mark.parametrize("case", CASES)
def test_callee_dead_in_its_first_second_is_named_by_its_rank(jobs, case):
    run = jobs[case]
    log = (run / "job.log").read_text(errors="replace")[-3000:]
    planted = json.loads((run / "plant" / "planted.json").read_text())
    # the planted death in the job's first second: on a loaded machine (CI) the profiler's start
    # alone took 0.42 s between RPC up and the first call, so the bound is the second itself
    assert planted["planted_ns"] - planted["up_ns"] < 1000 * MS, log
    names = [os.path.basename(p) for p in _traces(run)]
    assert "rank1.journal" in names, (names, log)  # named by its rank, learned when init_rpc returned
    lines = [json.loads(line) for line in (run / "traces" / "rank1.journal").read_bytes().splitlines() if line]
    meta = [x["meta"] for x in lines if "meta" in x][-1]
    assert (meta["rank"], meta["world_size"], meta["worker_name"]) == (1, 2, "worker1")
    assert any(x.get("rpc", {}).get("role") == "callee" for x in lines)  # its first served call, flushed
    job = Job.open(_traces(run), align=AlignRequest("auto"))
    pm = job_report(job).postmortem
    assert pm is not None
    dead = {e.rank: e for e in pm.ended if e.how == "died"}
    assert list(dead) == [1], pm.ended
    # after its last sign of life, no later than the planted death (one clock: one machine)
    assert dead[1].at_ns <= planted["planted_ns"] + 5 * MS
    assert dead[1].at_ns >= planted["up_ns"]
    calls = [c for c in pm.in_flight if c.callee == 1]
    assert calls and calls[0].status in ("pending", "error") and calls[0].name.startswith("rpc_sync#serve")
    assert pm.waited_for == 1
    text = cli.run("report", *_traces(run))
    assert text.exit_code == 0, text.stderr
    assert "post-mortem: rank 1 died" in text.stdout
    assert "capture again" not in text.stdout + text.stderr and "clock jump" not in text.stdout + text.stderr
    whole = cli.run("report", str(run / "traces"))
    assert whole.exit_code == 0 and "post-mortem: rank 1 died" in whole.stdout, whole.stderr


def test_rank_that_raises_in_step_one_is_named_with_its_exception(jobs):
    run = jobs["raise"]
    log = (run / "job.log").read_text(errors="replace")[-3000:]
    planted = json.loads((run / "traces" / "planted0.json").read_text())
    job = Job.open(_traces(run), align=AlignRequest("auto"))
    pm = job_report(job).postmortem
    assert pm is not None, log
    ends = {e.rank: e for e in pm.ended}
    assert ends[0].how == "raised"
    assert ends[0].detail == "RuntimeError: planted in step 1 (thread MainThread)"
    assert 0 <= ends[0].at_ns - planted["raised_ns"] < 1000 * MS  # from the raise to the end of its block
    # the other died in the collective rank 0 never joined: its exception (gloo's lost peer) or the launcher's TERM
    assert ends[1].how in ("raised", "SIGTERM"), ends[1]
    assert ends[1].blocked_in == f"all_reduce (group 0, seq {planted['seq']})", ends[1]
    if ends[1].how == "raised":
        assert "Connection closed by peer" in ends[1].detail
    text = cli.run("report", str(run / "traces"))
    assert "rank 0 raised RuntimeError: planted in step 1" in text.stdout, text.stdout[:3000] + text.stderr
