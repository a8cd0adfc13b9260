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
