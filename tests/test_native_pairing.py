"""combine pairs builtins sent as themselves with the callee ops that served them
(tracemerge/correlate/native_calls.py), on hand-made rank files whose ground truth the test
plants: which op served which call, the clocks, the threads."""

import pytest
from support import cli
from support.ranks import BASE, rank_file, write, x

from tracemerge import Job

US = 1000
PID0, PID1 = 4000, 4001


def _call(n, send_us, complete_us, func="aten::add", shapes=None, caller=0, kind="rpc_async"):
    rec = {"rpc_id": f"{caller}:{n}", "role": "caller", "kind": kind, "func": func,
           "name": f"{kind}#{func}(worker{caller} -> worker1)", "caller": caller, "callee": 1,
           "caller_name": f"worker{caller}", "callee_name": "worker1", "status": "ok", "native": True,
           "send_ns": BASE + send_us * US, "complete_ns": BASE + complete_us * US}
    if shapes is not None:
        rec["shapes"] = shapes
    return rec


def _op(start_us, end_us, tid, name="aten::add", shapes=None):
    op = {"name": name, "tid": tid, "start_ns": BASE + start_us * US, "end_ns": BASE + end_us * US}
    if shapes is not None:
        op["shapes"] = shapes
    return op


def _files(tmp_path, calls, ops, callee_boot="boot-a", **caller_block):
    """rank0 (the caller, boot-a) and rank1 (the callee): each op is also an event of rank1's trace."""
    events = [{"ph": "M", "name": "thread_name", "pid": PID1, "tid": t, "args": {"name": f"thread {t} (pt_thread_pool)"}}
              for t in sorted({op["tid"] for op in ops}, key=str)]  # int and str tids alike
    events += [x(op["name"], (op["start_ns"] - BASE) / US, (op["end_ns"] - op["start_ns"]) / US, pid=PID1,
                 tid=op["tid"]) for op in ops]
    caller = rank_file([x(c["name"], (c["send_ns"] - BASE) / US, (c["complete_ns"] - c["send_ns"]) / US, pid=PID0,
                          tid=7, cat="user_annotation", rpc_id=c["rpc_id"], role="caller") for c in calls],
                       0, rpcs=calls, boot_id="boot-a", **caller_block)
    callee = rank_file(events, 1, boot_id=callee_boot, served_ops=ops)
    return [write(tmp_path / "rank0.json.gz", caller), write(tmp_path / "rank1.json.gz", callee)]


def _paired(job):
    return {r["rpc_id"]: (r["start_ns"], r["end_ns"], r["tid"]) for r in job.info(0).remote_rpcs
            if r.get("source") == "paired"}


def test_calls_apart_in_time_each_get_their_op(tmp_path):
    calls = [_call(0, 0, 100), _call(1, 200, 300)]
    ops = [_op(210, 250, 11), _op(10, 40, 12)]
    job = Job.open(_files(tmp_path, calls, ops))
    assert _paired(job) == {"0:0": (BASE + 10 * US, BASE + 40 * US, 12), "0:1": (BASE + 210 * US, BASE + 250 * US, 11)}
    assert not [w for w in job.warnings if "sent as themselves" in w]
    call = next(c for c in job.links.rpcs.calls if c.rpc_id == "0:1")
    assert call.complete and call.start_ns == BASE + 210 * US


def test_shapes_tell_calls_in_flight_together_apart(tmp_path):
    # served in the other order than sent, on two threads: only the shapes say which is which
    calls = [_call(0, 0, 100, shapes=[[3], []]), _call(1, 5, 100, shapes=[[4], []])]
    ops = [_op(20, 30, 11, shapes=[[4], [], []]), _op(40, 50, 12, shapes=[[3], [], []])]
    job = Job.open(_files(tmp_path, calls, ops))
    assert _paired(job) == {"0:0": (BASE + 40 * US, BASE + 50 * US, 12), "0:1": (BASE + 20 * US, BASE + 30 * US, 11)}
    assert not [w for w in job.warnings if "sent as themselves" in w]


def test_one_thread_serves_one_callers_calls_in_order(tmp_path):
    calls = [_call(n, n, 100) for n in range(4)]
    ops = [_op(20 + 10 * n, 25 + 10 * n, 11) for n in range(4)]
    job = Job.open(_files(tmp_path, calls, ops))
    assert _paired(job) == {f"0:{n}": (BASE + (20 + 10 * n) * US, BASE + (25 + 10 * n) * US, 11) for n in range(4)}
    assert not [w for w in job.warnings if "sent as themselves" in w]


@pytest.mark.parametrize("callers", [1, 2])
def test_one_thread_serves_more_calls_in_flight_than_a_window_enumerates(tmp_path, callers):
    """Eighty calls in flight together from one caller, served one after another by one
    thread of a loaded callee (each window holds more ops than MAX_CANDIDATES): each call
    gets the op of its place in the order sent. Where a second caller's calls are in flight
    among them, nothing tells whose op is whose: none is guessed."""
    n = 80
    calls = [_call(k, k, 10 * n + 100) for k in range(n)]
    ops = [_op(100 + 10 * k, 105 + 10 * k, 11) for k in range(n)]
    if callers == 2:
        calls += [_call(k, k, 10 * n + 100, caller=2) for k in range(2)]
        ops += [_op(101 + 10 * n + k, 102 + 10 * n + k, 11) for k in range(2)]
    job = Job.open(_files(tmp_path, calls, ops))
    if callers == 1:
        assert _paired(job) == {f"0:{k}": (BASE + (100 + 10 * k) * US, BASE + (105 + 10 * k) * US, 11) for k in range(n)}
        assert not [w for w in job.warnings if "sent as themselves" in w]
    else:
        assert _paired(job) == {}
        assert any(w.startswith(f"{n + 2} builtin calls sent as themselves to rank 1") for w in job.warnings)


def test_what_neither_time_nor_shapes_tell_apart_is_said(tmp_path):
    calls = [_call(n, n, 100) for n in range(3)]
    ops = [_op(20 + 10 * n, 25 + 10 * n, 11 + n) for n in range(3)]   # three threads
    job = Job.open(_files(tmp_path, calls, ops))
    assert _paired(job) == {}   # any of the 3! ways fits: none is guessed
    said = [w for w in job.warnings if "sent as themselves" in w]
    assert len(said) == 1 and said[0].startswith("3 builtin calls sent as themselves to rank 1")
    assert "rather than given a guessed op" in said[0]
    res = cli.run("combine", *_files(tmp_path, calls, ops), "-o", tmp_path / "out.json")
    assert res.exit_code == 0 and "3 builtin calls sent as themselves to rank 1" in res.stderr


def test_a_call_forced_by_the_others_is_paired_where_the_rest_stay_open(tmp_path):
    # call 0 can only have been served by the op at 20 (its window ends at 30); calls 1 and 2
    # share the ops at 60 and 70 on two threads, which nothing tells apart
    calls = [_call(0, 0, 30), _call(1, 1, 100), _call(2, 2, 100)]
    ops = [_op(20, 25, 11), _op(60, 65, 12), _op(70, 75, 13)]
    job = Job.open(_files(tmp_path, calls, ops))
    assert _paired(job) == {"0:0": (BASE + 20 * US, BASE + 25 * US, 11)}
    said = [w for w in job.warnings if "sent as themselves" in w]
    assert said and said[0].startswith("2 builtin calls sent as themselves to rank 1")


def test_an_op_outside_the_window_or_of_another_function_is_not_taken(tmp_path):
    calls = [_call(0, 100, 200)]
    ops = [_op(50, 60, 11), _op(120, 130, 11, name="aten::mul"), _op(150, 260, 11)]  # before; other; ends after
    job = Job.open(_files(tmp_path, calls, ops))
    assert _paired(job) == {}
    said = [w for w in job.warnings if "sent as themselves" in w]
    assert said and said[0].startswith("1 builtin calls sent as themselves to rank 1 have no op")


SKEW_US = 5_000


def _skewed():
    """Two calls to a callee on another machine whose clock is SKEW_US ahead: (calls, ops,
    the admission's reading, which said so within 10 µs)."""
    calls = [_call(0, 0, 100), _call(1, 200, 300)]
    ops = [_op(10 + SKEW_US, 40 + SKEW_US, 11), _op(210 + SKEW_US, 250 + SKEW_US, 11)]
    reading = {"callee": 1, "asked_ns": BASE - 20 * US, "answered_ns": BASE - 10 * US,
               "answer": {"clock_rank": 1, "boot_id": "boot-b", "read_ns": BASE + (SKEW_US - 15) * US}}
    return calls, ops, reading


def test_another_machine_is_placed_by_the_admissions_clock_reading(tmp_path):
    skew = SKEW_US
    calls, ops, reading = _skewed()
    job = Job.open(_files(tmp_path, calls, ops, callee_boot="boot-b", native_callees=[reading]))
    assert _paired(job) == {"0:0": (BASE + (10 + skew) * US, BASE + (40 + skew) * US, 11),
                            "0:1": (BASE + (210 + skew) * US, BASE + (250 + skew) * US, 11)}
    # without the reading there is no clock to place them by: said, not guessed
    job = Job.open(_files(tmp_path, calls, ops, callee_boot="boot-b"))
    assert _paired(job) == {}
    assert any("do not share a clock" in w for w in job.warnings)


def test_an_older_capture_with_appended_spans_is_read_and_said_to_be_older(tmp_path):
    """A callee of the previous capture wrote the callee record itself and appended the
    #remote span after its events (out of time order on its thread)."""
    call = _call(0, 0, 100)
    callee_rec = dict(call, role="callee", start_ns=BASE + 10 * US, end_ns=BASE + 40 * US)
    for k in ("send_ns", "complete_ns"):
        callee_rec.pop(k)
    events = [x("aten::add", 10, 30, pid=PID1, tid=11), x("aten::mul", 500, 10, pid=PID1, tid=11),
              x(call["name"] + "#remote", 9.999, 30.002, pid=PID1, tid=11, cat="user_annotation",
                rpc_id="0:0", role="callee", **{"async": False})]
    caller = rank_file([x(call["name"], 0, 100, pid=PID0, tid=7, cat="user_annotation", rpc_id="0:0", role="caller")],
                       0, rpcs=[call], boot_id="boot-a")
    files = [write(tmp_path / "rank0.json.gz", caller),
             write(tmp_path / "rank1.json.gz", rank_file(events, 1, rpcs=[callee_rec], boot_id="boot-a"))]
    job = Job.open(files)
    assert any("older capture" in w and "rank1.json.gz" in w for w in job.warnings)
    assert _paired(job) == {}   # the callee's own record stands
    res = cli.run("combine", *files, "-o", tmp_path / "out.json")
    assert res.exit_code == 0, res.stderr
    assert "older capture" in res.stderr and "1 RPCs: 1 with both sides" in res.stderr


@pytest.mark.parametrize("command", ["info", "combine"])
def test_the_commands_say_it(tmp_path, command):
    calls = [_call(n, n, 100) for n in range(2)]
    ops = [_op(20, 25, 11), _op(30, 35, 12)]
    files = _files(tmp_path, calls, ops)
    args = [command, *files] + (["-o", tmp_path / "out.json"] if command == "combine" else [])
    res = cli.run(*args)
    assert res.exit_code == 0, res.stderr
    assert "2 builtin calls sent as themselves to rank 1" in res.stderr + res.stdout


def test_a_paired_builtins_op_is_its_callee_span_on_the_critical_path(tmp_path):
    """rank 0 waits in an rpc_sync of torch.add from 20 to 200 µs; rank 1's pool thread ran
    the op from 60 to 150: that op is the call's callee execution on the path, not 180 µs
    of transfer."""
    from tracemerge import AlignRequest
    from tracemerge.analysis.critical_path import EXECUTION, TRANSFER, critical_path
    from tracemerge.analysis.job_timeline import job_timeline
    from tracemerge.report.build import job_report
    from tracemerge.tables import load

    call = dict(_call(0, 20, 200, kind="rpc_sync"))
    ops = [_op(60, 150, 11)]
    events = [{"ph": "M", "name": "thread_name", "pid": PID1, "tid": 11, "args": {"name": "thread 11 (pt_thread_pool)"}},
              x("aten::add", 60, 90, pid=PID1, tid=11), x("main1", 0, 5, pid=PID1, tid=PID1)]
    caller = rank_file([x("before", 0, 20, pid=PID0, tid=PID0),
                        x(call["name"], 20, 180, pid=PID0, tid=PID0, cat="user_annotation", rpc_id="0:0", role="caller"),
                        x("after", 200, 10, pid=PID0, tid=PID0)], 0, rpcs=[call], boot_id="boot-a")
    files = [write(tmp_path / "rank0.json.gz", caller),
             write(tmp_path / "rank1.json.gz", rank_file(events, 1, boot_id="boot-a", served_ops=ops))]
    job = Job.open(files, align=AlignRequest("auto"))
    expected = [(0, "before", "compute", 0, 20), (0, call["name"], TRANSFER, 20, 60),
                (1, "aten::add", EXECUTION, 60, 150), (1, call["name"], TRANSFER, 150, 200),
                (0, "after", "compute", 200, 210)]
    # the analyses' own timeline, the report's (report --analysis) and the tables' (export)
    report = job_report(job, analysis=True).analysis.critical_path
    tables = load(files).arrow["critical_path"]
    for windows in (critical_path(job_timeline(job)), report):
        [window] = windows
        assert [(s.rank, s.name, s.kind, (s.start_ns - BASE) // US, (s.end_ns - BASE) // US)
                for s in window.segments] == expected
    assert [(r, n, k) for r, n, k in zip(tables["rank"].to_pylist(), tables["name"].to_pylist(),
                                          tables["kind"].to_pylist())] == [e[:3] for e in expected]


def test_causality_counts_the_drawn_callee_spans(tmp_path):
    # the callee's clock is 5 ms ahead: under --align wall the op drawn as the call's
    # #remote span lies outside the caller's span, and the figures say so, as the output shows
    from tracemerge import AlignRequest

    calls, ops, reading = _skewed()
    files = _files(tmp_path, calls, ops, callee_boot="boot-b", native_callees=[reading])
    wall = Job.open(files, align=AlignRequest("wall")).alignment.causality["violations_before"]
    assert wall["spans"] == 2 and wall["rpc"] == 2
    fitted = Job.open(files, align=AlignRequest("auto")).alignment.causality["violations_before"]
    assert fitted["total"] == 0


def test_the_rpcs_table_names_the_thread_that_served_a_builtin(tmp_path):
    """export's rpcs table: a paired builtin's callee side is its op's, on the thread the
    callee's own file names (``thread 12 (pt_thread_pool)``), not the name of the
    process combine draws its span in."""
    from tracemerge.tables import load

    calls = [_call(0, 0, 100), _call(1, 200, 300)]
    ops = [_op(210, 250, 11), _op(10, 40, 12)]
    rpcs = load(_files(tmp_path, calls, ops), critical_path=False, gpu=False).arrow["rpcs"].to_pylist()
    got = {r["rpc_id"]: (r["callee_rank"], r["callee_tid"], r["callee_thread"], r["sides"]) for r in rpcs}
    assert got == {"0:0": (1, "12", "thread 12 (pt_thread_pool)", "both"),
                   "0:1": (1, "11", "thread 11 (pt_thread_pool)", "both")}


def _served_with_children(tmp_path):
    """rank 0 sends torch.add as itself (rpc_sync, 0 to 100 µs); rank 1's pool thread 11 ran
    the op from 10 to 40, an aten::empty under it (12 to 15) and a launch (20 to 22) of a
    7 µs kernel; rank 1 also ran an aten::add of its own on its main thread."""
    call = _call(0, 0, 100, kind="rpc_sync")
    events = [{"ph": "M", "name": "thread_name", "pid": PID1, "tid": 11, "args": {"name": "thread 11 (pt_thread_pool)"}},
              x("aten::add", 10, 30, pid=PID1, tid=11), x("aten::empty", 12, 3, pid=PID1, tid=11),
              x("cudaLaunchKernel", 20, 2, pid=PID1, tid=11, cat="cuda_runtime", correlation=5),
              x("add_kernel", 30, 7, pid=0, tid=7, cat="kernel", correlation=5),
              x("aten::add", 60, 4, pid=PID1, tid=PID1)]
    caller = rank_file([x(call["name"], 0, 100, pid=PID0, tid=PID0, cat="user_annotation", rpc_id="0:0",
                          role="caller")], 0, rpcs=[call], boot_id="boot-a")
    return [write(tmp_path / "rank0.json.gz", caller),
            write(tmp_path / "rank1.json.gz", rank_file(events, 1, boot_id="boot-a", served_ops=[_op(10, 40, 11)]))]


def test_a_paired_builtins_op_is_its_calls_remote_row(tmp_path):
    """The key averages count the op as a wrapped call's callee side: a #remote row of rank 1
    with the op's time (30 µs), self 0 and the op's device time (7 µs); the op keeps its
    row, and with --remote-ops it and its child are named by the call (issue 45)."""
    import json

    files = _served_with_children(tmp_path)
    name = "rpc_sync#aten::add(worker0 -> worker1)"

    def rows(*extra):
        res = cli.invoke("report", *files, "--format", "json", "--group-by", "name,rank", *extra)
        assert res.exit_code == 0, res.stderr
        return {(r["key"], r["node_id"]): (r["count"], r["cpu_time_total"], r["self_cpu_time_total"],
                                           r["self_device_time_total"], r["device_time_total"])
                for r in json.loads(res.stdout)["key_averages"]}

    plain, remote = rows(), rows("--remote-ops")
    span = (1, 30.0, 0.0, 0.0, 7.0)
    assert plain[(name + "#remote", 1)] == remote[(name + "#remote", 1)] == span
    # the served op (30 µs less its children's 5) and rank 1's own (4)
    assert plain[("aten::add", 1)] == (2, 34.0, 29.0, 7.0, 7.0)
    assert plain[("aten::empty", 1)] == (1, 3.0, 3.0, 0.0, 0.0)
    assert remote[(name + "#remote_op: add", 1)] == (1, 30.0, 25.0, 7.0, 7.0)
    assert remote[(name + "#remote_op: empty", 1)] == (1, 3.0, 3.0, 0.0, 0.0)
    assert remote[(name + "#remote_op: cudaLaunchKernel", 1)] == (1, 2.0, 2.0, 0.0, 0.0)
    assert remote[("aten::add", 1)] == (1, 4.0, 4.0, 0.0, 0.0)
    assert ("aten::empty", 1) not in remote
