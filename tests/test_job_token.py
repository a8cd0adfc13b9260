"""A rank that never heard its job's token (issue 45): its file has the rendezvous address
only (``host:port``), the others ``host:port@token``; it is still of its job, and
``--strict`` takes the files. Ids of two runs, or of other addresses, still differ."""

import pytest
from support import cli
from support.ranks import BASE, load_output, rank_file, write, x


def _files(tmp_path, ids):
    paths = []
    for rank, job_id in enumerate(ids):
        events = [x("step", 100 + rank, 50, pid=4000 + rank, tid=1)]
        paths.append(write(tmp_path / f"rank{rank}.json.gz",
                           rank_file(events, rank, job_id=job_id, world_size=len(ids), start_ns=BASE,
                                     boot_id="one-machine")))  # one clock: nothing else for --strict to refuse
    return [str(p) for p in paths]


def test_an_address_only_id_is_of_the_job_with_that_address(tmp_path):
    paths = _files(tmp_path, ["127.0.0.1:29500@5f1c", "127.0.0.1:29500", "127.0.0.1:29500@5f1c"])
    out = tmp_path / "merged.json"
    res = cli.run("combine", *paths, "--strict", "-o", out)
    assert res.exit_code == 0, res.stderr
    assert "different jobs" not in res.stderr
    assert load_output(out)["traceEvents"]


@pytest.mark.parametrize("ids", [
    ["127.0.0.1:29500@5f1c", "127.0.0.1:29500", "127.0.0.1:29500@9a0b"],   # two runs on one address: which?
    ["127.0.0.1:29500@5f1c", "127.0.0.1:29501"],                           # another address
])
def test_other_jobs_are_still_refused(tmp_path, ids):
    res = cli.run("combine", *_files(tmp_path, ids), "--strict", "-o", tmp_path / "merged.json")
    assert res.exit_code != 0 and "different jobs: job_id differs" in res.stderr, res.stderr
    assert not (tmp_path / "merged.json").exists()


@pytest.mark.job  # a real torch job (CI's reference-path pass leaves it out)
def test_a_real_rank_that_never_heard_the_token_and_was_termed_is_of_its_job(tmp_path):
    """tests/token_job.py under torchrun: rank 1 asks rank 0 for the token while rank 0
    holds Python's lock, so its id is the address alone (the planted truth, read back from
    its file); both ranks hang and the job is ended as `timeout -s TERM` would. `--strict`
    takes the two files as one job (the release before refused them: "different jobs"),
    and the post-mortem has both ranks ended by SIGTERM."""
    import gzip
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from support.jobs import end_like_timeout
    from support.paths import ROOT

    root = Path(ROOT)
    out = tmp_path / "traces"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TRACEMERGE_JOB_ID"}  # the job agrees its own id
    env["PYTHONPATH"] = str(root)
    with open(tmp_path / "job.log", "wb") as log:
        proc = subprocess.Popen(["timeout", "-s", "TERM", "120", sys.executable, "-m", "torch.distributed.run",
                                 "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.1",
                                 str(root / "tests" / "token_job.py"), str(out)],
                                cwd=root, env=env, stdout=log, stderr=log)
        end_like_timeout(proc, (out / "planted.json").exists, 150, 1)
    log_tail = (tmp_path / "job.log").read_text(errors="replace")[-3000:]
    paths = sorted(str(p) for p in out.glob("rank*.json.gz"))
    assert len(paths) == 2, log_tail
    ids = [json.load(gzip.open(p))["tracemerge"]["job_id"] for p in paths]
    assert "@" in ids[0] and "@" not in ids[1] and ids[0].startswith(ids[1] + "@"), ids
    res = cli.run("report", *paths, "--strict")
    assert res.exit_code == 0, res.stderr
    assert "different jobs" not in res.stderr
    assert "post-mortem: rank 0 was ended by SIGTERM" in res.stdout and "post-mortem: rank 1 was ended by SIGTERM" in res.stdout
    merged = tmp_path / "merged.json"
    res = cli.run("combine", *paths, "--strict", "-o", merged)
    assert res.exit_code == 0, res.stderr
    assert len({e["pid"] for e in load_output(merged)["traceEvents"] if e.get("ph") == "X"}) >= 2  # both ranks
