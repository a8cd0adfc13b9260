from collections import Counter

import pytest
from support.ranks import BASE, kineto, load_output, rank_file, write, x

from tracemerge.errors import RankConflict
from tracemerge.inputs.rankinfo import rank_from_name
from tracemerge.job import Session
from tracemerge.merge.combine import combine


def two_ranks(tmp_path, skew_ns=0, start_gap_us=0.0):
    """Rank 1's clock reads ``skew_ns`` ahead of rank 0's; both profile the same instant at 1000 µs true time."""
    r0 = kineto([x("op", 1000.0, 10.0, pid=77, tid=1), x("op", 2000.0, 10.0, pid="Spans", tid="")],
                rank=0, profiler_start=900.0)
    skew_us = skew_ns / 1000
    r1 = kineto([x("op", 1000.0 + skew_us, 10.0, pid=77, tid=1),
                 {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 5, "pid": 77, "tid": 1, "ts": 1000.0 + skew_us},
                 {"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 5, "bp": "e", "pid": 77, "tid": 1, "ts": 1005.0 + skew_us}],
                rank=1, profiler_start=900.0 + skew_us + start_gap_us)
    return [write(tmp_path / "a.json", r0), write(tmp_path / "b.json", r1)]


def run(paths, tmp_path, method="wall", **kw):
    session = Session.open(paths, kw.pop("rank_from", "auto"))
    out = str(tmp_path / "out.json")
    combine(session, session.align(method, **kw), out, force=True)
    return load_output(out)


def by_rank(doc):
    pid_rank = {pid: int(r) for r, pids in doc["tracemerge"]["pids"].items() for pid in pids.values()}
    return pid_rank


@pytest.mark.parametrize("name, rank", [
    ("rank3.json", 3), ("rank-3.json.gz", 3), ("rank_12.trace.json", 12), ("worker3.json", 3),
    ("trainer_2.pt.trace.json", 2), ("host1_rank7.json", 7), ("trace.json", None),
])
def test_rank_from_file_name(name, rank):
    assert rank_from_name(f"/some/dir.rank9/{name}") == rank


def test_rank_identity_order_of_precedence(tmp_path):
    block = write(tmp_path / "rank5.json", rank_file([x("a", 1, 1)], rank=2))      # block beats name
    dist = write(tmp_path / "rank6.json", kineto([x("a", 1, 1)], rank=4))          # distributedInfo beats name
    named = write(tmp_path / "worker_9.json", kineto([x("a", 1, 1)]))
    s = Session.open([block, dist, named])
    assert [(i.rank, i.rank_source) for i in s.infos] == [(2, "tracemerge"), (4, "distributedInfo"), (9, "filename")]


def test_duplicate_and_unknown_ranks_are_errors_unless_by_order(tmp_path):
    a = write(tmp_path / "a.json", kineto([x("a", 1, 1)], rank=1))
    b = write(tmp_path / "b.json", kineto([x("a", 1, 1)], rank=1))
    c = write(tmp_path / "c.json", kineto([x("a", 1, 1)]))
    with pytest.raises(RankConflict, match=r"b.json: rank 1 \(from distributedInfo\) is also claimed by .*a.json"):
        Session.open([a, b])
    with pytest.raises(RankConflict, match="c.json: cannot tell the rank"):
        Session.open([a, c])
    s = Session.open([b, a, c], rank_from="order")
    assert [(i.path, i.rank) for i in s.infos] == [(b, 0), (a, 1), (c, 2)]


def test_every_event_once_in_rank_owned_pids(tmp_path):
    doc = run(two_ranks(tmp_path), tmp_path)
    summary = doc["tracemerge"]
    events = doc["traceEvents"]
    ev = summary["events"]
    assert ev["in"] == 2 + 1 + 3 + 1 and ev["out"] == len(events) == ev["in"] + ev["added"]
    pid_rank = by_rank(doc)
    # both ranks used pid 77 and "Spans": four distinct integer pids now, none 0
    assert len(pid_rank) == 4 and all(isinstance(p, int) and 0 < p < 2**31 for p in pid_rank)
    seen = Counter((pid_rank[e["pid"]], e["name"]) for e in events if e["ph"] != "M")
    assert seen == Counter({(0, "op"): 2, (0, "PyTorch Profiler (0)"): 1, (1, "op"): 1,
                            (1, "PyTorch Profiler (0)"): 1, (1, "fwdbwd"): 2})
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert set(names) == {int(p) for p in pid_rank}
    for pid, name in names.items():
        assert name == f"rank {pid_rank[pid]} · {'ab'[pid_rank[pid]]} · unknown host"
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["ph"] == "M" and e["name"] == "process_sort_index"}
    assert sorted(sort, key=sort.get) == sorted(sort, key=lambda p: (pid_rank[p], p))


def test_flow_ids_are_namespaced_per_rank(tmp_path):
    paths = two_ranks(tmp_path)
    r0 = kineto([{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 1.0},
                 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 5, "bp": "e", "pid": 1, "tid": 2, "ts": 2.0},
                 x("kernel", 2.0, 1.0, pid=1, tid=2, correlation=5, **{"External id": 9})], rank=0)
    paths[0] = write(tmp_path / "a.json", r0)
    events = run(paths, tmp_path)["traceEvents"]
    flows = [e for e in events if e["ph"] in "sf"]
    ids = {(e["cat"], e["ph"]): e["id"] for e in flows}
    assert ids[("ac2g", "s")] == ids[("ac2g", "f")]              # a flow stays joined within its rank
    assert ids[("fwdbwd", "s")] == ids[("fwdbwd", "f")]
    assert ids[("ac2g", "s")] != ids[("fwdbwd", "s")]            # same input id 5, two ranks: never one arrow
    kernel = next(e for e in events if e["name"] == "kernel")
    assert kernel["args"]["correlation"] == ids[("ac2g", "s")]   # correlation follows the flow id
    assert kernel["args"]["External id"] not in (9, None)


def aligned_op_starts(doc):
    pid_rank = by_rank(doc)
    return {pid_rank[e["pid"]]: e["ts"] for e in doc["traceEvents"] if e["name"] == "op" and e["tid"] == 1}


def test_align_wall_trusts_clocks(tmp_path):
    doc = run(two_ranks(tmp_path, skew_ns=250_000), tmp_path, "wall")
    ts = aligned_op_starts(doc)
    assert round((ts[1] - ts[0]) * 1000) == 250_000
    assert [a["offset_ns"] for a in doc["tracemerge"]["alignment"]] == [0, 0]


def test_align_start_makes_profiler_starts_coincide(tmp_path):
    doc = run(two_ranks(tmp_path, skew_ns=250_000), tmp_path, "start")
    ts = aligned_op_starts(doc)
    assert ts[1] == ts[0]
    assert [a["offset_ns"] for a in doc["tracemerge"]["alignment"]] == [0, 250_000]
    # with rank 1 as the reference, rank 0 moves instead
    doc = run(two_ranks(tmp_path, skew_ns=250_000), tmp_path, "start", reference=1)
    assert [a["offset_ns"] for a in doc["tracemerge"]["alignment"]] == [-250_000, 0]
    assert doc["tracemerge"]["reference"] == 1


def test_align_start_uses_rank_file_anchor(tmp_path):
    a = write(tmp_path / "a.json", rank_file([x("op", 100.0, 1)], rank=0, start_ns=BASE + 50_000))
    b = write(tmp_path / "b.json", rank_file([x("op", 100.0, 1)], rank=1, start_ns=BASE + 80_000))
    doc = run([a, b], tmp_path, "start")
    ts = aligned_op_starts(doc)
    assert round((ts[0] - ts[1]) * 1000) == 30_000


def test_align_none_ignores_bases(tmp_path):
    a = write(tmp_path / "a.json", kineto([x("op", 1000.0, 1, tid=1)], rank=0, base=BASE))
    b = write(tmp_path / "b.json", kineto([x("op", 1000.0, 1, tid=1)], rank=1, base=BASE + 5 * 10**9))
    assert aligned_op_starts(run([a, b], tmp_path, "none")) == {0: 1000.0, 1: 1000.0}
    ts = aligned_op_starts(run([a, b], tmp_path, "wall"))
    assert round((ts[1] - ts[0]) * 1000) == 5 * 10**9


def test_forced_offset_overrides_method(tmp_path):
    doc = run(two_ranks(tmp_path, skew_ns=250_000), tmp_path, "wall", offsets={1: 250_000})
    ts = aligned_op_starts(doc)
    assert ts[0] == ts[1]
    assert doc["tracemerge"]["alignment"][1]["method"] == "forced"


def test_output_keeps_epoch_recoverable(tmp_path):
    doc = run(two_ranks(tmp_path), tmp_path)
    base = doc["baseTimeNanoseconds"]
    op = next(e for e in doc["traceEvents"] if e["name"] == "op")
    assert base + round(op["ts"] * 1000) == BASE + 1_000_000
    assert base % 10**9 == 0


@pytest.mark.parametrize("block, problem", [
    ({"rpcs": {"a": 1}}, "'tracemerge.rpcs' is a dict, not a list"),
    ({"rpcs": [17]}, "tracemerge.rpcs[0] is a int, not an object"),
    ({"rpcs": [{"rpc_id": "0:1", "role": "caller", "caller": 0}]}, "tracemerge.rpcs[0]: missing or bad 'callee' (None)"),
    ({"rpcs": [{"rpc_id": "0:1", "role": "caller", "caller": 0, "callee": 1, "send_ns": 1.5}]},
     "tracemerge.rpcs[0]: 'send_ns' is not integer ns (1.5)"),
    ({"collectives": [{"group": "0", "seq": "3", "start_ns": 1}]}, "tracemerge.collectives[0]: missing or bad 'seq' ('3')"),
])
def test_malformed_records_are_named(tmp_path, block, problem):
    from tracemerge.errors import TraceError
    doc = rank_file([x("a", 1, 1)], rank=0)
    doc["tracemerge"].update(block)
    path = write(tmp_path / "rank0.json", doc)
    with pytest.raises(TraceError) as e:
        Session.open([path])
    assert str(e.value) == f"{path}: {problem}"


def test_unfinished_collective_is_kept_without_end(tmp_path):
    from tracemerge.correlate.match import match_collectives
    coll = {"op": "all_reduce", "group": "0", "group_ranks": [0, 1], "seq": 1, "bytes": 4}
    a = write(tmp_path / "rank0.json", rank_file([x("a", 1, 1)], rank=0, collectives=[{**coll, "start_ns": BASE, "end_ns": BASE + 5}]))
    b = write(tmp_path / "rank1.json", rank_file([x("a", 1, 1)], rank=1, collectives=[{**coll, "start_ns": BASE}]))
    (m,) = match_collectives(Session.open([a, b]).infos)
    assert m.start_ns == {0: BASE, 1: BASE} and m.end_ns == {0: BASE + 5} and not m.complete


def test_file_without_events_warns_and_does_not_move_time_zero(tmp_path):
    empty = write(tmp_path / "rank1.json", kineto([], rank=1))
    doc = run([two_ranks(tmp_path)[0], empty], tmp_path)
    assert "no timestamped events" in " ".join(doc["tracemerge"]["inputs"][1]["warnings"])
    op = next(e for e in doc["traceEvents"] if e["name"] == "op")
    assert op["ts"] < 10**7  # still relative to the job's first second, not to the epoch
