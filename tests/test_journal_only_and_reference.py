"""Two answers that were silently wrong (issue 48, class 4): a job of which every rank left
only a journal got post-mortem times in Unix-epoch milliseconds instead of from the job's
start; ``--offset`` on the reference rank was accepted and moved it away from the ranks
sharing its clock."""

import glob
import gzip
import json
import os
import re

from support import cli
from support.paths import ROOT

SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "rpc_profiling", "rank*.json.gz")))


def test_a_job_of_journals_alone_is_timed_from_its_start(tmp_path):
    """Both ranks died before writing their files: rank 1 after serving two calls, its
    last flush 100 ms before rank 0's. The times the post-mortem gives are from the job's
    start (the earlier profiling start), as the journals' own clocks give them."""
    starts, alive, paths = [], {}, []
    for rank, path in enumerate(SAMPLES):
        with gzip.open(path) as f:
            block = json.load(f)["tracemerge"]
        meta = {k: v for k, v in block.items() if not isinstance(v, list)}
        lines = [{"tracemerge_journal": 1, "meta": meta}] + [{"rpc": r} for r in block["rpcs"]]
        if rank == 1:
            lines = lines[:3]
        alive[rank] = block["profile_stop_ns"] - (10**8 if rank == 1 else 0)
        lines.append({"alive_ns": alive[rank]})
        starts.append(block["profile_start_ns"])
        paths.append(tmp_path / f"rank{rank}.journal")
        paths[-1].write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = cli.run("report", *paths)
    assert r.exit_code == 0, r.stderr
    deaths = dict((int(rank), float(ms)) for rank, ms in re.findall(
        r"post-mortem: rank (\d+) died without writing its rank file at ([\d.]+) ms", r.stdout))
    assert sorted(deaths) == [0, 1]
    span_ms = (max(alive.values()) - min(starts)) / 1e6
    assert all(0 <= ms <= span_ms + 0.001 for ms in deaths.values()), (deaths, span_ms)  # shown to 1 µs
    # rank 0 is known dead from its last flush: its time, from the job's start
    assert abs(deaths[0] - (alive[0] - min(starts)) / 1e6) < 0.002


def test_an_offset_for_the_reference_is_refused(tmp_path):
    files = sorted(glob.glob(os.path.join(ROOT, "samples", "rl_agent", "rank*.json.gz")))
    for command in (["combine", "-o", tmp_path / "t.json"], ["offsets"], ["report"]):
        for reference in (["--reference", "1"], []):
            rank = 1 if reference else 0
            r = cli.run(*command[:1], *files, *command[1:], *reference, "--offset", f"{rank}=-250000")
            err = r.stderr
            assert r.exit_code == 2, err
            assert f"--offset {rank}=-250000: rank {rank} is the reference" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.json").exists()
    # an offset for another rank is still what it says
    r = cli.run("offsets", *files, "--reference", "1", "--offset", "2=-250000", "--format", "json")
    assert r.exit_code == 0, r.stderr
    [two] = [c for c in json.loads(r.stdout)["ranks"] if c["rank"] == 2]
    assert two["offset_ns"] == -250000 and two["method"] == "forced"
