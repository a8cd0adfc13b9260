"""Several gloo process groups and point-to-point sends in one real job (issue 46):
tests/gloo_groups_job.py under ``python -m torch.distributed.run --standalone`` (3 ranks,
CPU, loopback), profiled with ``tracemerge.capture.profile``.

Groups: the world, [0, 1] and [1, 2]. DDP's reducers issue an all_reduce per step on each
(from C++: only the traces show them), each of its model's own size; the script's own
``dist.all_reduce`` on the two subgroups and ``dist.barrier()`` on the world are the
capture's records too. No trace names the group of a gloo op, and gloo counts a group's
sends and receives in its sequence numbers, which differ between ranks. Sends: 0 to 1
(``send``/``recv``, tag = the step), 1 to 2 (``isend``/``irecv``), 0 and 2 both ways
(``batch_isend_irecv``).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracemerge import AlignRequest, Job

pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import gloo_groups_job as planted  # noqa: E402  (the job's sizes and groups: what the test planted)

pytestmark = pytest.mark.job  # runs a real torch job: CI's reference-path pass leaves it out (setup.cfg)

FLOAT = 4


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("groups") / "job"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = ["timeout", "-s", "TERM", "240", sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "3", "--monitor-interval", "0.1", str(ROOT / "tests" / "gloo_groups_job.py"), str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    files = sorted(str(p) for p in out.iterdir() if p.name.endswith(".json.gz"))
    assert len(files) == 3
    return Job.open(files, align=AlignRequest("auto"))


def _group_names(job) -> dict:
    """{planted group name: the process group's name as torch gave it} from the ranks' own
    distributedInfo (the group whose ranks are the planted ones)."""
    out: dict = {}
    for c in job.links.collectives:
        for name, ranks in planted.GROUPS.items():
            if sorted(c.start_ns) == ranks and c.op == "all_reduce" and set(c.bytes.values()) == {
                    planted.SIZES[name] * FLOAT}:
                out.setdefault(name, c.group)
    return out


def test_each_groups_collectives_matched_within_it(job):
    """Every collective is matched across exactly its group's ranks, and the k-th of each
    group is the same op of the same size on each of them: DDP's all_reduce of the
    group's model and, on the subgroups, the script's all_reduce, step after step, each
    group numbered 0, 1, 2, … without a gap or a repeat; none counted twice."""
    assert not job.links.order_warnings
    names = _group_names(job)
    assert sorted(names) == ["g01", "g12", "world"] and len(set(names.values())) == 3
    for planted_name, group in names.items():
        ranks = planted.GROUPS[planted_name]
        mine = sorted((c for c in job.links.collectives if c.group == group), key=lambda c: c.seq)
        assert [c.seq for c in mine] == list(range(mine[0].seq, mine[0].seq + len(mine)))
        for c in mine:
            assert sorted(c.start_ns) == ranks and sorted(c.end_ns) == ranks, (planted_name, c)
            assert len(set(c.bytes.values())) == 1, (planted_name, c)   # the k-th agree in size on every rank
        reduces = [c for c in mine if c.op == "all_reduce"]
        ddp = [c for c in reduces if c.bytes[ranks[0]] == planted.SIZES[planted_name] * FLOAT]
        assert len(ddp) == planted.STEPS, (planted_name, [(c.seq, c.bytes) for c in reduces])
        if planted_name in planted.PY_SIZES:
            script = [c for c in reduces if c.bytes[ranks[0]] == planted.PY_SIZES[planted_name] * FLOAT]
            assert len(script) == planted.STEPS and len(reduces) == 2 * planted.STEPS
            # each step's DDP all_reduce comes before the script's, on every rank
            assert all(a.seq < b.seq for a, b in zip(ddp, script))
        else:
            barriers = [c for c in mine if c.op == "barrier"]
            assert len(barriers) == planted.STEPS and len(reduces) == planted.STEPS
    for info in job.infos:
        keys = [(r["group"], r["seq"]) for r in info.collectives]
        assert len(keys) == len(set(keys))   # the capture's records and the events' kept once


def test_sends_matched_as_one_way_links(job):
    """Each send is matched with its receive, per direction and tag: 0→1 (send/recv), 1→2
    (isend/irecv), 0→2 and 2→0 (batch_isend_irecv), one each per step; on the aligned
    clocks no receive ends before its send was issued (beyond the clocks' error bounds)."""
    p2p = job.links.p2p
    pairs = list(zip(p2p.sender.tolist(), p2p.receiver.tolist()))
    assert sorted(set(pairs)) == [(0, 1), (0, 2), (1, 2), (2, 0)]
    assert all(pairs.count(d) == planted.STEPS for d in set(pairs))
    tags = sorted(r["tag"] for r in job.infos[0].p2p if r["op"] == "send" and r["peer"] == 1)
    assert tags == list(range(planted.STEPS))
    assert all(r["bytes"] == planted.P2P_SIZE * FLOAT for info in job.infos for r in info.p2p)
    clocks = job.alignment.clocks
    for s, r, start, end in zip(p2p.sender.tolist(), p2p.receiver.tolist(), p2p.send_start.tolist(),
                                p2p.recv_end.tolist()):
        sent, received = clocks[s].to_reference(start), clocks[r].to_reference(end)
        assert received - sent >= -(clocks[s].error_bound_ns + clocks[r].error_bound_ns), (s, r)


def test_sends_in_the_collectives_report(job):
    """The report's collectives section has a ``p2p`` row per direction: its sends, their
    bytes, and the time from a send's issue to its receive's completion (never below 0
    beyond the clocks' error bounds)."""
    from tracemerge.report.build import job_report

    rows = {c.op: c for c in job_report(job).collectives if c.group == "p2p"}
    assert sorted(rows) == ["send 0->1", "send 0->2", "send 1->2", "send 2->0"]
    bound = max(c.error_bound_ns for c in job.alignment.clocks.values()) * 2 / 1000
    for row in rows.values():
        assert row.count == planted.STEPS and row.bytes == planted.STEPS * planted.P2P_SIZE * FLOAT
        assert row.skew_us["max"] >= row.skew_us["mean"] >= -bound


def test_sends_bound_the_clocks_one_way(job, tmp_path):
    """The sends alone (each rank's collectives left out of its file) link the ranks: the
    2→0 and 0→2 sends bound rank 2's clock on both sides, and a shift planted on it (rank 2
    set 40 ms ahead) is recovered within the bound the sends give."""
    import gzip
    import json

    shift = 40_000_000
    files = []
    for info in job.infos:
        doc = json.loads(gzip.open(info.path).read())
        doc.pop("tracemerge", None)   # no capture records: what a plain trace holds
        keep = ("gloo:send", "gloo:recv", "c10d::send", "c10d::recv_")
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or e.get("name") in keep
                              or "ProfilerStep" in str(e.get("name"))]
        if info.rank == 2:
            doc["baseTimeNanoseconds"] += shift
        files.append(tmp_path / f"rank{info.rank}.json")
        files[-1].write_text(json.dumps(doc))
    plain = Job.open([str(f) for f in files], align=AlignRequest("collective"))
    assert not plain.links.collectives.keys and len(plain.links.p2p) == 4 * planted.STEPS
    clock = plain.alignment.clocks[2]
    # the ranks share this machine's clock: rank 2's offset is the planted shift
    assert abs(clock.offset_ns - shift) <= clock.error_bound_ns, clock
    assert clock.error_bound_ns < 20_000_000, clock


def _json_enclosing(events, flow):
    """The innermost X event on the flow event's thread (a lane's, where its span moved to
    one) whose span holds its ts."""
    hits = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == (flow["pid"], flow["tid"])
            and e["ts"] <= flow["ts"] <= e["ts"] + e["dur"]]
    assert hits, flow
    return max(hits, key=lambda e: (e["ts"], -e["dur"]))


def test_sends_drawn_as_arrows_in_the_merged_trace(job, tmp_path):
    """``combine`` draws one p2p arrow per matched send/recv (4 directions, a pair each per
    step): in JSON an ``s`` inside the sender's ``c10d::send`` and an ``f`` inside the end of
    the receiver's ``gloo:recv``, ``s`` before ``f`` on the aligned timeline (beyond the
    clocks' error bounds); in the .pftrace one arc per pair between the same slices."""
    import json

    from support.pftrace import read_pftrace, thread_of

    from tracemerge.merge.combine import combine

    p2p = job.links.p2p
    want = sorted(zip(p2p.sender.tolist(), p2p.receiver.tolist()))
    assert len(want) == 4 * planted.STEPS
    summary = combine(job, None, str(tmp_path / "t.json"))
    pids = {int(r): set(m.values()) for r, m in summary["pids"].items()}
    rank_of_pid = {pid: r for r, ps in pids.items() for pid in ps}
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    ends: dict = {}
    for e in events:
        if e["ph"] in "sf" and e.get("cat") == "p2p":
            ends.setdefault(e["id"], {})[e["ph"]] = e
    bound = max(c.error_bound_ns for c in job.alignment.clocks.values()) * 2 / 1000
    got = []
    for fid, pair in ends.items():
        assert sorted(pair) == ["f", "s"] and pair["f"]["bp"] == "e", fid
        send, recv = _json_enclosing(events, pair["s"]), _json_enclosing(events, pair["f"])
        assert send["name"] == "c10d::send" and recv["name"] == "gloo:recv", (send, recv)
        s, r = rank_of_pid[send["pid"]], rank_of_pid[recv["pid"]]
        assert (pair["s"]["args"]["sender"], pair["s"]["args"]["receiver"]) == (s, r)
        assert pair["f"]["ts"] - pair["s"]["ts"] >= -bound, (s, r)
        got.append((s, r))
    assert sorted(got) == want
    assert summary["p2p_flows"] == {"send_spans": len(want), "recv_spans": len(want), "flow_events": 2 * len(want)}

    combine(job, None, str(tmp_path / "t.pftrace"))
    trace = read_pftrace(str(tmp_path / "t.pftrace"))
    arcs = [(fid, a, b) for fid, a, b in trace["arcs"] if fid >= 2 ** 52 + 2 ** 51]
    assert sorted(ends) == sorted(fid for fid, _, _ in arcs)
    arced = []
    for fid, send, recv in arcs:
        assert send["name"] == "c10d::send" and recv["name"] == "gloo:recv"
        assert send["flows"] == [fid] and recv["end_terminating"] == [fid]
        arced.append((rank_of_pid[thread_of(trace["tracks"], send["track"])[0]],
                      rank_of_pid[thread_of(trace["tracks"], recv["track"])[0]]))
    assert sorted(arced) == want


@pytest.mark.parametrize("name", ["t.json", "t.pftrace"])
def test_both_cores_draw_the_same_arrows(job, tmp_path, monkeypatch, name):
    """The compiled core and the Python reference path write the same bytes for the real
    job's merged trace, its send arrows among them."""
    from tracemerge import native
    from tracemerge.merge.combine import combine

    out = {}
    for core in ("native", "python"):
        monkeypatch.setenv(native.ENV, core)
        again = Job.open([info.path for info in job.infos], align=AlignRequest("auto"))
        combine(again, None, str(tmp_path / f"{core}.{name}"))
        out[core] = (tmp_path / f"{core}.{name}").read_bytes()
    assert out["native"] == out["python"]
    assert b'"cat":"p2p"' in out["native"] or name.endswith(".pftrace")
