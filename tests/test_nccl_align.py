"""A real 8-rank NCCL job (tests/corpus/gpu/param_dlrm: PARAM's DLRM, torch of 2023, no c10d
fields) aligned by its NCCL kernels alone: ranks' clocks moved by planted amounts (10 µs to
10 s) are recovered within 20 µs, with and without the group fields later torch versions
write; after ``combine`` every collective's kernel ends agree across ranks as they did on
the true clocks (one host: the raw files' own). Expectations come from the raw JSON
(tests/nccl_corpus.py) and the planted shifts, never from tracemerge."""

import json
from collections import defaultdict
from typing import Dict, List

import pytest
from click.testing import CliRunner

import nccl_corpus as corpus
from tracemerge.cli import main
from tracemerge.job import AlignRequest, Job

# µs each moved rank's clock is moved by; the others (0, 2, 4, 7) keep the true clock
SHIFTS_US = {1: 10, 3: 3_200, 5: 2_500_000, 6: -10_000_000}
TOLERANCE_NS = 20_000


@pytest.fixture(scope="module", params=list(corpus.FIELDS))
def moved_job(request, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp(f"dlrm_{request.param.replace('+', '_')}"))
    paths = corpus.write_job(folder, corpus.FIELDS[request.param], SHIFTS_US)
    return request.param, paths, Job.open(paths, align=AlignRequest("auto"))


def test_moved_clocks_recovered_within_20_us_by_kernel_ends(moved_job):
    _, _, job = moved_job
    clocks = job.alignment.clocks
    assert set(clocks) == set(range(8))
    for rank, clock in clocks.items():
        truth = SHIFTS_US.get(rank, 0) * 1000
        assert abs(clock.offset_ns - truth) <= TOLERANCE_NS, (rank, clock)
        if rank:
            assert clock.method == "nccl-kernel" and clock.samples == 8
            assert clock.error_bound_ns is not None and clock.error_bound_ns >= abs(clock.offset_ns - truth)
    assert not any("link" in w for w in job.warnings)


def test_named_method_and_offsets_show_it(moved_job):
    _, paths, job = moved_job
    same = job.align("nccl-kernel").clocks
    assert {r: c.offset_ns for r, c in same.items()} == {r: c.offset_ns for r, c in job.alignment.clocks.items()}
    result = CliRunner().invoke(main, ["offsets", *paths, "--align", "nccl-kernel", "--format", "json"])
    assert result.exit_code == 0, result.output
    ranks = json.loads(result.stdout)["ranks"]
    assert [r["method"] for r in ranks] == ["reference"] + ["nccl-kernel"] * 7


def rank_of_pids(doc: dict) -> Dict[int, int]:
    """{output pid: rank} from the merged trace's process names ("rank N · …")."""
    return {e["pid"]: int(e["args"]["name"].split()[1]) for e in doc["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"].startswith("rank ")}


def test_combined_kernel_ends_agree_as_on_the_true_clocks(moved_job, tmp_path):
    name, paths, _ = moved_job
    if name == "c10d":
        pytest.skip("one combine per generation is enough: the clocks are the same (test above)")
    out = tmp_path / "merged.json"
    result = CliRunner().invoke(main, ["combine", *paths, "-o", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    ranks = rank_of_pids(doc)
    ends: Dict[int, List[float]] = defaultdict(list)
    for e in sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]),
                    key=lambda e: e["ts"]):
        ends[ranks[e["pid"]]].append(e["ts"] + e["dur"])
    assert sorted(ends) == list(range(8))
    true = corpus.true_spreads()
    merged = [round((max(col) - min(col)) * 1000) for col in zip(*(ends[r] for r in range(8)))]
    assert len(merged) == len(true) == 8
    for got, want in zip(merged, true):
        assert got <= 1.5 * want, (merged, true)
