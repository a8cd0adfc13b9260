"""One decode per rank: rank files described from their heads, placements checked against
what the workers find in the events, ranks written straight into the output in turn."""

import gzip
import json
import os

import pytest
from support import cli
from support.ranks import BASE, calling_ranks, kineto, rank_file, write, x

from tracemerge.inputs import read_trace
from tracemerge.inputs.head import read_head
from tracemerge.inputs.rankinfo import EVENT_FACTS, describe
from tracemerge.job import Session, reads
from tracemerge.job.describe_files import scan_head
from tracemerge.merge.combine import combine
from tracemerge.runtime.engine import LocalEngine


def merged(paths, out, jobs=2):
    """(the merged bytes, the job): files read by ``jobs`` workers, or kept in memory (``jobs`` None)."""
    job = Session.open(paths, engine=None if jobs is None else LocalEngine(jobs))
    combine(job, job.align("auto"), str(out))
    return open(out, "rb").read(), job


def test_head_holds_the_block_and_kineto_keys(rank_files):
    head = read_head(rank_files[0])
    assert list(head)[0] == "tracemerge" and "traceEvents" not in head
    assert head["baseTimeNanoseconds"] == read_trace(rank_files[0]).base_ns


def test_head_is_found_past_its_name_inside_a_string(tmp_path):
    doc = rank_file([x("a", 1.0, 2.0)], 0, worker_name='w", "traceEvents": [')
    path = write(tmp_path / "rank0.json", doc)
    assert read_head(path)["tracemerge"]["worker_name"] == 'w", "traceEvents": ['


def test_no_head_when_the_events_come_first(tmp_path):
    doc = {"traceEvents": [x("a", 1.0, 2.0)], "tracemerge": rank_file([], 0)["tracemerge"]}
    path = write(tmp_path / "rank0.json", doc)
    assert read_head(path) is None
    assert scan_head(path) is None  # described from its events instead
    bare = write(tmp_path / "rank1.json", [x("a", 1.0, 2.0)])
    assert read_head(bare) is None


def test_head_scan_is_the_full_scan_without_the_event_facts(rank_files, tmp_path):
    for path in rank_files:
        quick, full = scan_head(path), describe(read_trace(path))
        assert quick.partial and not full.partial
        for field in ("rank", "rank_source", "worker_name", "hostname", "job_id", "base_ns", "start_ns", "stop_ns",
                      "start_source", "rpcs", "collectives", "has_block", "job"):
            assert getattr(quick, field) == getattr(full, field), field
    plain = write(tmp_path / "rank5.json", kineto([x("a", 1.0, 2.0)], rank=5))
    assert scan_head(plain) is None  # no block: the events are read
    session = Session.open([rank_files[0], plain], engine=LocalEngine(2), read=reads.heads)
    assert [i.partial for i in session.infos] == [True, False]


@pytest.mark.parametrize("jobs", [1, 2])
def test_every_rank_is_described_whole_before_anything_is_written(rank_files, tmp_path, jobs):
    job = Session.open(rank_files, engine=LocalEngine(jobs))
    for info in job.infos:  # the facts only events tell are there up front, as a full read says
        full_info = describe(read_trace(info.path))
        assert not info.partial
        assert {k: getattr(info, k) for k in EVENT_FACTS} == {k: getattr(full_info, k) for k in EVENT_FACTS}
    by_workers, _ = merged(rank_files, tmp_path / "workers.json", jobs=jobs)
    in_memory, _ = merged(rank_files, tmp_path / "memory.json", jobs=None)
    assert by_workers == in_memory


def test_events_before_the_profilers_second_move_the_origin(tmp_path):
    # the profiler starts 0.5 s into a second, but rank 1 has an event 1.4 s earlier: ts 0
    # is the second before that event, not the profiler's (its head alone would say)
    paths = calling_ranks(tmp_path, [x("a", 600_000.0, 5.0)], [x("early", -900_000.0, 5.0), x("b", 600_100.0, 5.0)])
    quick, _ = merged(paths, tmp_path / "workers.json")
    full, _ = merged(paths, tmp_path / "memory.json", jobs=None)
    assert quick == full
    doc = json.loads(quick)
    assert doc["baseTimeNanoseconds"] == BASE - 10**9
    assert min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X") >= 0


def test_a_thousand_pids_widen_every_rank_block(tmp_path):
    many = [x("p", 600_000.0 + k, 0.5, pid=10_000 + k) for k in range(1001)]
    paths = calling_ranks(tmp_path, [x("a", 600_000.0, 5.0)], many)
    quick, _ = merged(paths, tmp_path / "workers.json")
    full, _ = merged(paths, tmp_path / "memory.json", jobs=None)
    assert quick == full
    pids = json.loads(quick)["tracemerge"]["pids"]
    assert set(pids["1"].values()).isdisjoint(pids["0"].values())
    assert min(pids["1"].values()) == 4000  # blocks of 2000 pids: rank 1 starts at the second block


def test_bad_event_found_by_a_worker_fails_cleanly_in_turn(rank_files, tmp_path):
    # the head is fine, an event is not: found only when the worker decodes the rank
    bad = rank_file([x("a", 1.0, 2.0), {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5.0, "dur": -1.0}], 0)
    bad_path = write(tmp_path / "rank0.json", bad)
    others = [p for p in rank_files if not os.path.basename(p).startswith("rank0")]
    out = tmp_path / "out.json"
    for jobs in (1, 2):
        r = cli.run("combine", bad_path, *others, "-o", out, "-j", jobs)
        assert r.exit_code == 3, r.stderr
        err = r.stderr.strip().splitlines()
        assert err[-1].startswith(f"tracemerge: error: {bad_path}: event 1: negative 'dur' "), err
        assert sorted(os.listdir(tmp_path)) == ["rank0.json"]


def test_gzip_and_stdout_outputs_match_the_file(rank_files, tmp_path):
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    assert cli.run("combine", *rank_files, "-o", plain, "-j", 2).exit_code == 0
    assert cli.run("combine", *rank_files, "-o", packed, "-j", 2).exit_code == 0
    piped = cli.run("combine", *rank_files, "-o", "-", "-j", 2)
    assert piped.exit_code == 0
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes() == piped.stdout_bytes


def test_zstd_rank_file_is_described_from_its_head(rank_files, tmp_path):
    zstandard = pytest.importorskip("zstandard")
    packed = tmp_path / "rank0.json.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(gzip.decompress(open(rank_files[0], "rb").read())))
    quick = scan_head(str(packed))
    assert quick.partial and quick.rpcs == scan_head(rank_files[0]).rpcs


def test_a_head_that_is_not_utf8_is_left_to_the_full_reader(tmp_path):
    """A byte that is no UTF-8 in a key before the events (found by the bad-input property
    test): no head, and the reader's one-line error, not an internal error."""
    path = tmp_path / "rank0.json"
    path.write_bytes(b'{"k\xffey": 1, "traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}')
    assert read_head(str(path)) is None
    r = cli.run("info", path)
    assert r.exit_code == 3 and r.stderr.startswith(f"tracemerge: error: {path}: byte 3: not valid UTF-8")
