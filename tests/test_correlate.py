"""Joining RPC and collective records across ranks: which record wins, what counts as complete."""

import glob
import os
from types import SimpleNamespace

import numpy as np
import pytest

from tracemerge.clocks.bands import collective_constraints, rpc_constraints
from tracemerge.correlate import match
from tracemerge.correlate.match import RpcCall, match_collectives, match_rpcs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def info(rank, rpcs=(), collectives=()):
    return SimpleNamespace(rank=rank, rpcs=list(rpcs), collectives=list(collectives), remote_rpcs=[], job_id="job-1")


def caller(rpc_id, a, b, t1, t4=None, **extra):
    return {"rpc_id": rpc_id, "role": "caller", "caller": a, "callee": b, "send_ns": t1, "complete_ns": t4, **extra}


def callee(rpc_id, a, b, t2, t3=None, **extra):
    return {"rpc_id": rpc_id, "role": "callee", "caller": a, "callee": b, "start_ns": t2, "end_ns": t3, **extra}


def test_rpc_sides_join_in_order_of_first_sight_and_the_last_time_given_counts():
    infos = [info(0, [caller("0:1", 0, 1, 10, 50), caller("0:2", 0, 1, 60), caller("0:3", 0, 5, 70, 80)]),
             info(1, [callee("1:9", 1, 0, 5, 6), callee("0:1", 0, 1, 20, 30), callee("0:1", 0, 1, 21, None),
                      callee("0:2", 0, 1, 62, 64, status="error"), callee("0:2", 0, 1, 63, 65)])]
    match = match_rpcs(infos)
    calls = list(match.calls)
    assert [c.rpc_id for c in calls] == ["0:1", "0:2", "0:3", "1:9"]
    assert calls[0] == RpcCall("0:1", "", "", "", 0, 1, 10, 21, 30, 50)  # a later None keeps the end given before
    assert calls[1] == RpcCall("0:2", "", "", "", 0, 1, 60, 63, 65, None, "error")  # a failure on any record counts
    assert (match.caller_only, match.callee_only, match.missing_peer) == (1, 1, {5: 1})
    assert match.calls.quadruples.tolist() == [True, False, False, False]


def test_rpc_constraints_put_the_lower_rank_first_whoever_called():
    infos = [info(0, [caller("0:1", 0, 1, 100, 400), callee("1:1", 1, 0, 1_000, 1_100)]),
             info(1, [callee("0:1", 0, 1, 1_150, 1_250), caller("1:1", 1, 0, 900, 1_300)])]
    (pair, c), = rpc_constraints(match_rpcs(infos).calls).items()
    assert pair == (0, 1) and c.samples == 2
    # 0 → 1: g(t1) <= t2 - t1, g(t4) >= t3 - t4; 1 → 0: g(t3) <= t4 - t3, g(t2) >= t1 - t2
    assert c.x_upper.tolist() == [100, 1_100] and c.upper.tolist() == [1_050, 200]
    assert c.x_lower.tolist() == [400, 1_000] and c.lower.tolist() == [850, -100]


def test_collectives_keep_each_ranks_last_start_and_last_end_given():
    rec = {"op": "all_reduce", "group": 0, "group_ranks": [0, 1, 2], "seq": 7}
    infos = [info(2, collectives=[{**rec, "start_ns": 10, "end_ns": 40, "bytes": 4}]),
             info(0, collectives=[{**rec, "start_ns": 5, "end_ns": 30, "bytes": 1},
                                  {**rec, "start_ns": 6, "bytes": 2}]),
             info(1, collectives=[{**rec, "op": "broadcast", "group": "0", "seq": 8, "start_ns": 1, "end_ns": 2}])]
    first, second = match_collectives(infos)
    assert (first.group, first.seq, first.op, second.op) == ("0", 7, "all_reduce", "broadcast")
    assert list(first.start_ns.items()) == [(2, 10), (0, 6)] and first.end_ns == {2: 40, 0: 30}
    assert first.bytes == {2: 4, 0: 2} and not first.complete
    # only the synchronising one bounds the clocks, with the lower rank first
    (pair, c), = collective_constraints(match_collectives(infos)).items()
    assert pair == (0, 2) and np.array_equal(c.upper, [40 - 6]) and np.array_equal(c.lower, [10 - 30])


def test_the_join_is_read_only_once_made():
    infos = [info(0, [caller("a", 0, 1, 10, 40)]), info(1, [callee("a", 0, 1, 20, 30)])]
    first = match_rpcs(infos)
    with pytest.raises(ValueError):
        first.calls.times[0, 0] = 1  # shared by every reader of the job: read-only


def test_a_command_joins_the_records_once(monkeypatch, tmp_path):
    """combine (with --critical-path and --report), report --analysis: the RPC and the
    collective joins are each made once per job, and every stage reads that one."""
    from tracemerge import AlignRequest, Job
    from tracemerge.commands.compose import combine
    from tracemerge.report.build import job_report
    from tracemerge.report.write import write_combine_report

    made = {"rpcs": 0, "collectives": 0}
    real_rpcs, real_collectives = match._match_rpcs, match.match_collectives

    def counted_rpcs(infos):
        made["rpcs"] += 1
        return real_rpcs(infos)

    def counted_collectives(infos, *cuts):
        made["collectives"] += 1
        return real_collectives(infos, *cuts)

    monkeypatch.setattr(match, "_match_rpcs", counted_rpcs)
    monkeypatch.setattr(match, "match_collectives", counted_collectives)
    paths = sorted(glob.glob(os.path.join(ROOT, "samples", "rpc_profiling", "rank*.json.gz")))
    job = Job.open(paths, align=AlignRequest("auto"))
    combine(job, None, str(tmp_path / "t.json"), critical_path=True)
    write_combine_report(job, None, str(tmp_path / "t.json"), str(tmp_path / "t.report.txt"))
    report = job_report(job, analysis=True)
    assert report.rpc is not None and report.analysis is not None
    assert made == {"rpcs": 1, "collectives": 1}


def test_records_of_two_jobs_are_never_joined():
    """rpc_ids and collective sequence numbers restart in every run: two runs' records that
    happen to share them stay apart."""
    caller = {"rpc_id": "0:0", "role": "caller", "caller": 0, "callee": 1, "send_ns": 10, "complete_ns": 90}
    callee = {"rpc_id": "0:0", "role": "callee", "caller": 0, "callee": 1, "start_ns": 40, "end_ns": 60}
    coll = {"group": "0", "seq": 1, "start_ns": 5, "end_ns": 9}
    same = [SimpleNamespace(rank=0, rpcs=[caller], collectives=[coll], remote_rpcs=[], job_id="run-a"),
            SimpleNamespace(rank=1, rpcs=[callee], collectives=[coll], remote_rpcs=[], job_id="run-a")]
    assert len(match_rpcs(same).calls) == 1 and len(match_collectives(same)) == 1
    two = [SimpleNamespace(**{**vars(same[0]), "job_id": "run-a"}), SimpleNamespace(**{**vars(same[1]), "job_id": "run-b"})]
    match = match_rpcs(two)
    assert len(match.calls) == 2 and not match.calls.quadruples.any()
    assert len(match_collectives(two)) == 2


def test_calls_made_before_the_callers_window_are_named_for_what_they_are(tmp_path):
    """Rank 0 entered profile a second late: the two calls it made before have only the
    callee's side, and the warning says they were made outside the caller's window (not
    'give every rank's file': every file was given); a call from a rank with no file is
    told apart."""
    from support.ranks import BASE, rank_file, write, x

    from tracemerge.job import Job

    def callee(rpc_id, caller, t2):
        return {"rpc_id": rpc_id, "kind": "rpc_async", "func": "f", "name": "rpc_async#f(w -> w1)", "caller": caller,
                "callee": 1, "role": "callee", "start_ns": t2, "end_ns": t2 + 50_000, "status": "ok"}

    opened = BASE + 2 * 10**9  # rank 0's profiler opened 2 s into the run
    r0 = rank_file([x("a", 2_000_100.0, 5.0)], 0, start_ns=opened)
    r1 = rank_file([x("b", 100.0, 5.0)], 1, start_ns=BASE,
                   rpcs=[callee("0:0", 0, BASE + 10**6), callee("0:1", 0, BASE + 2 * 10**6),
                         callee("2:0", 2, BASE + 3 * 10**6)])
    job = Job.open([write(tmp_path / "rank0.json", r0), write(tmp_path / "rank1.json", r1)])
    (said,) = [w for w in job.warnings if "only the callee's side" in w]
    assert said.startswith("3 of 3 RPCs have only the callee's side")
    assert "1 was made by ranks that have no input file" in said
    assert "2 were made while their caller was not recording, outside its profiling window" in said
    assert "have no caller record although" not in said


def test_the_calls_an_output_can_draw_are_those_with_a_send_and_a_start_between_its_ranks():
    # between() reads the columns; the calls iterated one by one say the same thing
    infos = [info(0, [caller("0:1", 0, 1, 10, 50), caller("0:2", 0, 1, 60), caller("0:3", 0, 2, 70, 80),
                      caller("0:4", 0, 1, 90, 99)]),
             info(1, [callee("0:1", 0, 1, 20, 30), callee("0:2", 0, 1, 62), callee("1:5", 1, 0, 5, 6)]),
             info(2, [callee("0:3", 0, 2, 72, 75)])]
    calls = match_rpcs(infos).calls
    for ranks in ({0, 1}, {0, 1, 2}, {1}, set()):
        expected = [(n, c.rpc_id, c.caller, c.callee, c.end_ns is not None and c.complete_ns is not None)
                    for n, c in enumerate(calls)
                    if c.send_ns is not None and c.start_ns is not None and c.caller in ranks and c.callee in ranks]
        assert calls.between(ranks) == expected
    # by hand: 0:2 was never ended by its callee (no return), 0:4 never started, 1:5 has no send
    assert calls.between({0, 1}) == [(0, "0:1", 0, 1, True), (1, "0:2", 0, 1, False)]
