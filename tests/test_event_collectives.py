"""Collectives from gloo events on hand-made Kineto files (issue 46): what the real DDP jobs
of tests/test_ddp_collectives.py cannot plant — a rank whose order disagrees, an issue op
whose execution never ran in the window, an execution span still open at the stop, and
the capture's records beside the events. Each file is what torch 2.13 writes for gloo on
CPU: ``c10d::<op>`` on the issuing thread, ``gloo:<op>`` on a ``pt_gloo_runloop`` thread,
``distributedInfo`` with one process group."""

import json
from pathlib import Path

from support.cli import invoke

from tracemerge import AlignRequest, Job

US = 1_000
BASE = 1_790_000_000_000_000_000


def _trace(path: Path, rank: int, ops: list, block: dict = None, extra: list = (), world: int = 2) -> str:
    """A rank's file of a job of ``world`` ranks: ``ops`` [(c10d name or None, gloo name or
    None, issue µs, run start µs, run end µs, finished)] plus ``extra`` events."""
    events = [{"ph": "M", "name": "thread_name", "pid": 10 + rank, "tid": 99, "args": {"name": "thread 99 (pt_gloo_runloop)"}}]
    for issue, run, t_issue, t_start, t_end, finished in ops:
        if issue:
            events.append({"ph": "X", "cat": "cpu_op", "name": issue, "pid": 10 + rank, "tid": 10 + rank,
                           "ts": t_issue, "dur": 5, "args": {}})
        if run:
            args = {} if finished else {"finished": False}
            events.append({"ph": "X", "cat": "user_annotation", "name": run, "pid": 10 + rank, "tid": 99,
                           "ts": t_start, "dur": t_end - t_start, "args": args})
    events += list(extra)
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": BASE,
           "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world, "pg_count": 1,
                               "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world,
                                              "ranks": list(range(world))}]},
           "traceEvents": events}
    if block is not None:
        doc["tracemerge"] = block
    out = path / f"rank{rank}.json"
    out.write_text(json.dumps(doc))
    return str(out)


def _reduce(t: int, end: int, finished: bool = True) -> tuple:
    return ("c10d::allreduce_", "gloo:all_reduce", t, t + 10, end, finished)


def test_kth_of_the_group_matched_and_a_mismatch_named(tmp_path):
    """Three all_reduces on both ranks, then rank 1 a broadcast where rank 0 has an
    all_reduce: the first three are matched by their place, the fourth is not, and a
    warning names the collective and what each rank has there."""
    r0 = _trace(tmp_path, 0, [_reduce(1000 * k, 1000 * k + 500) for k in range(4)])
    r1 = _trace(tmp_path, 1, [_reduce(1000 * k + 50, 1000 * k + 502) for k in range(3)]
                + [("c10d::broadcast_", "gloo:broadcast", 3050, 3060, 3502, True)])
    job = Job.open([r0, r1])
    matched = [c for c in job.links.collectives if sorted(c.end_ns) == [0, 1]]
    assert [c.seq for c in matched] == [0, 1, 2] and {c.op for c in matched} == {"all_reduce"}
    (said,) = [w for w in job.warnings if "disagrees" in w]
    assert "#3" in said and "rank 0 has all_reduce" in said and "rank 1 has broadcast" in said


def test_a_large_jobs_traces_are_traces_not_flight_recorder_dumps(tmp_path):
    """Ranks 0 and 1000 of a 1,024-rank job: Kineto writes distributedInfo, whose pg_config
    lists the group's 1,024 ranks, before traceEvents, so the file's first 4 KB hold a
    "pg_config" and no "traceEvents" (as a Flight Recorder dump's do). Each is still read
    as the trace it is: its rank, its events, its all_reduces matched with the other's."""
    files = [_trace(tmp_path, rank, [_reduce(1000 * k + rank // 100, 1000 * k + 500) for k in range(3)], world=1024)
             for rank in (0, 1000)]
    assert all(b'"traceEvents"' not in Path(f).read_bytes()[:4096] for f in files)
    job = Job.open(files)
    assert job.ranks == [0, 1000] and not any("Flight Recorder" in w for w in job.warnings)
    assert [c.seq for c in job.links.collectives if sorted(c.end_ns) == [0, 1000]] == [0, 1, 2]


def test_many_ranks_report_one_note_and_their_longest_waits(tmp_path):
    """20 ranks, each with an all_reduce still open at its stop and rank k arriving 10·k µs
    late to three finished ones: the report says once for all the spans open at the stops
    (naming a few inputs and how many more), and the collectives row lists the 16 longest
    waits, longest first, and the other 4 ranks' mean, not a cell of every rank."""
    files = [_trace(tmp_path, rank, [_reduce(1000 * k + 10 * rank, 1000 * k + 500) for k in range(3)]
                    + [_reduce(3000 + rank, 9000, finished=False)], world=20) for rank in range(20)]
    out = tmp_path / "report.txt"
    invoke("report", *files, "-o", str(out)).ok()
    text = out.read_text()
    notes = [line for line in text.splitlines() if "still open when the profiler stopped" in line]
    assert len(notes) == 1 and notes[0].count(".json (1)") == 3 and "20 inputs" in notes[0] \
        and "and 17 more" in notes[0], notes
    (row,) = [line for line in text.splitlines() if " all_reduce " in line]
    # rank 19 arrived last, 10 µs after rank 18: rank 0 waited longest (190 µs), rank 15 40 µs
    assert " 0:0.190 1:0.180 " in row and " 15:0.040 " in row and "(the other 4 ranks: mean 0.015)" in row, row
    assert " 16:" not in row and " 19:" not in row


def test_issue_without_execution_and_execution_open_at_the_stop(tmp_path):
    """An issue op whose execution never began in the window, and an execution span still
    open at the stop outside any finished step: neither has an end (never left, as far as
    the trace tells), and each still takes its place in the order."""
    r0 = _trace(tmp_path, 0, [_reduce(0, 500), _reduce(1000, 1500), ("c10d::allreduce_", None, 2000, 0, 0, True)])
    r1 = _trace(tmp_path, 1, [_reduce(10, 501), _reduce(1010, 1501), _reduce(2010, 9000, finished=False)])
    job = Job.open([r0, r1])
    by_rank = {i.rank: i.collectives for i in job.infos}
    assert [("end_ns" in r) for r in by_rank[0]] == [True, True, False]
    assert [("end_ns" in r) for r in by_rank[1]] == [True, True, False]
    third = list(job.links.collectives)[2]
    assert third.seq == 2 and sorted(third.start_ns) == [0, 1] and third.end_ns == {}


def test_capture_records_and_events_counted_once(tmp_path):
    """A rank file whose capture recorded one dist.all_reduce (torch's seq 7) among three the
    trace shows (the others DDP's, unrecorded): one record per collective, the events
    numbered 6, 7, 8 from the capture's, no order inferred."""
    files = []
    for rank in (0, 1):
        shift = 20 * rank
        block = {"version": 1, "rank": rank, "world_size": 2, "job_id": "j", "profile_start_ns": BASE,
                 "profile_stop_ns": BASE + 10_000 * US, "rpcs": [],
                 "collectives": [{"op": "all_reduce", "group": "0", "group_ranks": [0, 1], "seq": 7,
                                  "start_ns": BASE + (1000 + shift) * US - 3 * US,
                                  "end_ns": BASE + (1510 + shift) * US}]}
        files.append(_trace(tmp_path, rank, [_reduce(1000 * k + shift, 1000 * k + 500 + shift) for k in range(3)],
                            block))
    job = Job.open(files, align=AlignRequest("auto"))
    for info in job.infos:
        assert sorted(r["seq"] for r in info.collectives) == [6, 7, 8]
        assert [r.get("source") for r in sorted(info.collectives, key=lambda r: r["seq"])] == ["events", None, "events"]
        assert not any(r.get("seq_inferred") for r in info.collectives)
    assert [c.seq for c in job.links.collectives if sorted(c.end_ns) == [0, 1]] == [6, 7, 8]


def test_overlapping_plain_files_of_one_rank_are_not_cycles(tmp_path):
    """Two plain files naming one rank whose windows overlap are no schedule's cycles: still
    refused as two claims of one rank (exit 4), the message naming both files."""
    import pytest

    from tracemerge.errors import RankConflict

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    one = _trace(a, 0, [_reduce(0, 500)])
    two = _trace(b, 0, [_reduce(100, 600)])
    with pytest.raises(RankConflict, match="also claimed"):
        Job.open([one, two])


def _p2p(rank: int, op: str, t: int, end: int, peer=None, tag=None) -> list:
    """A gloo send or receive: ``c10d::send``/``c10d::recv_`` on the rank's main thread at
    ``t`` µs (with ``Concrete Inputs`` naming ``peer`` and ``tag`` when given, as
    ``record_shapes`` writes them) and its ``gloo:send``/``gloo:recv`` span to ``end``."""
    args = {} if peer is None else {"Concrete Inputs": ["", "", str(peer), str(tag)],
                                    "Input type": ["TensorList", "", "Scalar", "Scalar"],
                                    "Input Dims": [[[100]], [], [], []]}
    name = "c10d::send" if op == "send" else "c10d::recv_"
    return [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 10 + rank, "tid": 10 + rank, "ts": t, "dur": 5,
             "args": args},
            {"ph": "X", "cat": "user_annotation", "name": f"gloo:{op}", "pid": 10 + rank, "tid": 10 + rank,
             "ts": t + 6, "dur": end - t - 6, "args": {"Input type": ["float"], "Input Dims": [[100]]}}]


def test_gloo_sends_matched_per_direction_and_tag(tmp_path):
    """Rank 0 sends with tag 5, then tag 6; rank 1 receives tag 6 first (gloo delivers by
    tag): each send is matched with the receive of its tag, not the k-th receive; the
    receives end after their sends began (the one-way link), and no collective comes of them."""
    r0 = _trace(tmp_path, 0, [], extra=_p2p(0, "send", 1000, 1100, 1, 5) + _p2p(0, "send", 2000, 2100, 1, 6))
    r1 = _trace(tmp_path, 1, [], extra=_p2p(1, "recv", 1500, 2300, 0, 6) + _p2p(1, "recv", 2400, 2500, 0, 5))
    job = Job.open([r0, r1])
    p2p = job.links.p2p
    assert list(zip(p2p.sender.tolist(), p2p.receiver.tolist())) == [(0, 1), (0, 1)]
    got = sorted(zip(p2p.send_start.tolist(), p2p.recv_end.tolist()))
    assert got == [(BASE + 1000 * US, BASE + 2500 * US), (BASE + 2000 * US, BASE + 2300 * US)]
    assert p2p.bytes.tolist() == [400, 400]
    assert not job.links.collectives.keys


def test_gloo_send_without_shapes_in_a_pair_takes_the_other_rank(tmp_path):
    """Without ``record_shapes`` a send names no peer; in a group of two its peer is the
    other member, so the pair is still linked one way each direction."""
    r0 = _trace(tmp_path, 0, [], extra=_p2p(0, "send", 1000, 1100) + _p2p(0, "recv", 3000, 3400))
    r1 = _trace(tmp_path, 1, [], extra=_p2p(1, "recv", 1050, 1300) + _p2p(1, "send", 3100, 3200))
    job = Job.open([r0, r1])
    assert sorted(zip(job.links.p2p.sender.tolist(), job.links.p2p.receiver.tolist())) == [(0, 1), (1, 0)]
    assert all(r["tag"] is None for i in job.infos for r in i.p2p)


def _sends_and_receives(tmp_path: Path) -> list:
    """Rank 0 sends with tag 5 at 1000 µs and tag 6 at 2000 µs; rank 1 receives tag 6 first
    (1500–2300 µs), then tag 5 (2400–2500 µs): the send at 1000 is the receive ending at
    2500, the send at 2000 the one ending at 2300."""
    return [_trace(tmp_path, 0, [], extra=_p2p(0, "send", 1000, 1100, 1, 5) + _p2p(0, "send", 2000, 2100, 1, 6)),
            _trace(tmp_path, 1, [], extra=_p2p(1, "recv", 1500, 2300, 0, 6) + _p2p(1, "recv", 2400, 2500, 0, 5))]


# the arrows planted: (the send's c10d::send start µs on rank 0, the receive's gloo:recv end µs on rank 1)
PLANTED_ARROWS = [(1000, 2500), (2000, 2300)]


def _combined(paths: list, out: Path, core: str, monkeypatch, **kw) -> tuple:
    """(the bytes, the summary) of ``paths`` combined to ``out`` by ``core``."""
    from tracemerge import native
    from tracemerge.merge.combine import combine

    monkeypatch.setenv(native.ENV, core)
    summary = combine(Job.open(paths, align=AlignRequest("wall")), None, str(out), force=True, **kw)
    return out.read_bytes(), summary


def _json_enclosing(events: list, flow: dict) -> dict:
    """The innermost X event on the flow event's thread whose span holds its ts."""
    hits = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == (flow["pid"], flow["tid"])
            and e["ts"] <= flow["ts"] <= e["ts"] + e["dur"]]
    assert hits, flow
    return max(hits, key=lambda e: (e["ts"], -e["dur"]))


def test_sends_get_one_arrow_each_to_their_receive_in_json(tmp_path, monkeypatch):
    """Each matched send/recv pair is one p2p arrow in the merged JSON: ``s`` just inside the
    send's ``c10d::send`` on rank 0, ``f`` (``bp: "e"``) just inside the end of its receive's
    ``gloo:recv`` on rank 1 (paired by tag, not by order), ``s`` before ``f``; its id out of
    the RPC arrows' range. Both cores write the same bytes."""
    paths = _sends_and_receives(tmp_path)
    data, summary = _combined(paths, tmp_path / "n.json", "native", monkeypatch)
    assert _combined(paths, tmp_path / "p.json", "python", monkeypatch) == (data, summary)
    events = json.loads(data)["traceEvents"]
    flows = [e for e in events if e["ph"] in "sf"]
    assert {e["cat"] for e in flows} == {"p2p"} and len(flows) == 2 * len(PLANTED_ARROWS)
    by_id: dict = {}
    for e in flows:
        by_id.setdefault(e["id"], {})[e["ph"]] = e
    got = []
    for fid, ends in by_id.items():
        assert sorted(ends) == ["f", "s"] and ends["f"]["bp"] == "e"
        assert 2 ** 52 + 2 ** 51 <= fid < 2 ** 53
        send, recv = _json_enclosing(events, ends["s"]), _json_enclosing(events, ends["f"])
        assert (send["name"], send["pid"]) == ("c10d::send", summary["pids"]["0"]["10"])
        assert (recv["name"], recv["pid"]) == ("gloo:recv", summary["pids"]["1"]["11"])
        assert ends["s"]["ts"] < ends["f"]["ts"]
        assert ends["s"]["args"] == {"sender": 0, "receiver": 1, "bytes": 400}
        got.append((round(send["ts"]), round(recv["ts"] + recv["dur"])))
    assert sorted(got) == PLANTED_ARROWS   # the output's µs after its base, the files' own (one clock)
    assert json.loads(data)["baseTimeNanoseconds"] == BASE
    assert summary["p2p_flows"] == {"send_spans": 2, "recv_spans": 2, "flow_events": 4}


def test_sends_get_one_arrow_each_to_their_receive_in_pftrace(tmp_path, monkeypatch):
    """The same arrows in a .pftrace, read back with Perfetto's protos: the send's slice
    begins with the flow id, its receive's slice ends with it as a terminating id; one arc
    per pair from rank 0's ``c10d::send`` to rank 1's ``gloo:recv``, in time order. Both
    cores write the same bytes."""
    from support.pftrace import read_pftrace, thread_of

    paths = _sends_and_receives(tmp_path)
    data, summary = _combined(paths, tmp_path / "n.pftrace", "native", monkeypatch)
    assert _combined(paths, tmp_path / "p.pftrace", "python", monkeypatch) == (data, summary)
    got = read_pftrace(str(tmp_path / "n.pftrace"))
    assert not got["unmatched_flow_ends"]
    arcs = []
    for fid, send, recv in got["arcs"]:
        assert 2 ** 52 + 2 ** 51 <= fid < 2 ** 53
        assert send["flows"] == [fid] and recv["end_terminating"] == [fid]
        assert (send["name"], thread_of(got["tracks"], send["track"])[0]) == ("c10d::send", summary["pids"]["0"]["10"])
        assert (recv["name"], thread_of(got["tracks"], recv["track"])[0]) == ("gloo:recv", summary["pids"]["1"]["11"])
        assert send["ts"] < recv["end"]
        arcs.append(((send["ts"] - BASE) // US, (recv["end"] - BASE) // US))
    assert sorted(arcs) == PLANTED_ARROWS


def test_no_send_arrow_with_one_end_in_the_air(tmp_path, monkeypatch):
    """A pair one of whose spans the output leaves out gets no arrow, on either rank: rank 1
    left out (``--ranks 0``), or every ``c10d::send`` (5 µs) under ``--min-duration 10``."""
    from tracemerge.place.selection import Selection

    paths = _sends_and_receives(tmp_path)
    for selection in (Selection(ranks=frozenset({0})), Selection(min_duration_us=10)):
        data, summary = _combined(paths, tmp_path / "t.json", "python", monkeypatch, selection=selection)
        assert not [e for e in json.loads(data)["traceEvents"] if e["ph"] in "sf"], selection
        assert "p2p_flows" not in summary
