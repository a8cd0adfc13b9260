"""One decode per rank: rank files described from their heads, placements checked against
what the workers find in the events, ranks written straight into the output in turn."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from tracemerge.merge.combine import combine
from tracemerge.inputs.scan import scan_head
from tracemerge.merge.executors import LocalEngine
from tracemerge.inputs.head import read_head
from tracemerge.inputs.rankinfo import EVENT_FACTS, describe
from tracemerge.inputs.chrome import read_trace
from tracemerge.session import Session

from tracefiles import BASE, kineto, rank_file, write, x

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from support import gen_kineto


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tracemerge", *map(str, args)], capture_output=True, timeout=120,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def rank_files(tmp_path_factory):
    return gen_kineto.generate(str(tmp_path_factory.mktemp("ranks")), 3, 0.3, seed=11, rank_files=True, gz=True, jobs=1)


def rpc_pair(rpc_id, caller, callee, t1, t2, t3, t4):
    common = {"rpc_id": rpc_id, "kind": "rpc_async", "func": "f", "name": f"rpc_async#f(w{caller} -> w{callee})",
              "caller": caller, "callee": callee, "status": "ok"}
    return ({**common, "role": "caller", "send_ns": t1, "complete_ns": t4},
            {**common, "role": "callee", "start_ns": t2, "end_ns": t3})


def two_ranks(tmp_path, events0, events1, start_ns=BASE + 5 * 10**8):
    """Two rank files exchanging RPCs, profiled from ``start_ns``; events are µs after BASE."""
    calls = [rpc_pair(f"0:{k}", 0, 1, *(start_ns + k * 10**6 + d for d in (0, 100_000, 200_000, 300_000)))
             for k in range(3)]
    docs = [rank_file(events0, 0, rpcs=[c for c, _ in calls], start_ns=start_ns),
            rank_file(events1, 1, rpcs=[r for _, r in calls], start_ns=start_ns)]
    return [write(tmp_path / f"rank{r}.json.gz", d) for r, d in enumerate(docs)]


def merged(paths, out, head, jobs=2):
    session = Session.open(paths, engine=LocalEngine(jobs), head=head)
    combine(session, session.align("auto"), str(out))
    return open(out, "rb").read(), session


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
    session = Session.open([rank_files[0], plain], engine=LocalEngine(2), head=True)
    assert [i.partial for i in session.infos] == [True, False]


@pytest.mark.parametrize("jobs", [1, 2])
def test_combine_from_heads_equals_combine_from_events(rank_files, tmp_path, jobs):
    quick, session = merged(rank_files, tmp_path / "head.json", head=True, jobs=jobs)
    full, _ = merged(rank_files, tmp_path / "full.json", head=False, jobs=jobs)
    assert quick == full
    # what the workers learned is what a full scan says
    for info in session.infos:
        full_info = describe(read_trace(info.path))
        assert not info.partial
        assert {k: getattr(info, k) for k in EVENT_FACTS} == {k: getattr(full_info, k) for k in EVENT_FACTS}


def test_events_before_the_profilers_second_move_the_origin(tmp_path):
    # the profiler starts 0.5 s into a second, but rank 1 has an event 1.4 s earlier: the
    # head's guess of ts 0 is a second too late, and the ranks are written again
    paths = two_ranks(tmp_path, [x("a", 600_000.0, 5.0)], [x("early", -900_000.0, 5.0), x("b", 600_100.0, 5.0)])
    quick, session = merged(paths, tmp_path / "head.json", head=True)
    full, _ = merged(paths, tmp_path / "full.json", head=False)
    assert quick == full
    doc = json.loads(quick)
    assert doc["baseTimeNanoseconds"] == BASE - 10**9
    assert min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X") >= 0


def test_a_thousand_pids_widen_every_rank_block(tmp_path):
    many = [x("p", 600_000.0 + k, 0.5, pid=10_000 + k) for k in range(1001)]
    paths = two_ranks(tmp_path, [x("a", 600_000.0, 5.0)], many)
    quick, _ = merged(paths, tmp_path / "head.json", head=True)
    full, _ = merged(paths, tmp_path / "full.json", head=False)
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
        r = cli("combine", bad_path, *others, "-o", out, "-j", jobs)
        assert r.returncode == 3, r.stderr
        err = r.stderr.decode().strip().splitlines()
        assert err[-1].startswith(f"tracemerge: error: {bad_path}: event 1: negative 'dur' "), err
        assert sorted(os.listdir(tmp_path)) == ["rank0.json"]


def test_gzip_and_stdout_outputs_match_the_file(rank_files, tmp_path):
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    assert cli("combine", *rank_files, "-o", plain, "-j", 2).returncode == 0
    assert cli("combine", *rank_files, "-o", packed, "-j", 2).returncode == 0
    piped = cli("combine", *rank_files, "-o", "-", "-j", 2)
    assert piped.returncode == 0
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes() == piped.stdout


def test_zstd_rank_file_is_described_from_its_head(rank_files, tmp_path):
    zstandard = pytest.importorskip("zstandard")
    packed = tmp_path / "rank0.json.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(gzip.decompress(open(rank_files[0], "rb").read())))
    quick = scan_head(str(packed))
    assert quick.partial and quick.rpcs == scan_head(rank_files[0]).rpcs
