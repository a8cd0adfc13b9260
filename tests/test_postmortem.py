"""Failed jobs leave their traces (issue 32): real 2-worker jobs (RPC on TensorPipe and a
gloo group, loopback) that fail in a planted way (tests/failing_job.py), under
``torch.multiprocessing.spawn`` and ``python -m torch.distributed.run --standalone``:

- ``exit``: the callee dies by ``os._exit`` in its 4th served call;
- ``kill``: the callee is SIGKILLed from outside mid-step;
- ``hang``: the callee blocks forever before a collective (with a call of rank 0's in
  flight to it) and the job is ended by ``timeout -s TERM``.

The dying process itself writes the planted time of death (``planted.json``). Each job runs
once (a module fixture); every test reads its files, reports and merged trace.
"""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import cli
from support.jobs import end_like_timeout

from tracemerge import AlignRequest, Job, combine
from tracemerge.capture.journal import PERIOD_S
from tracemerge.report.build import job_report
from tracemerge.report.render import render

pytest.importorskip("torch.distributed.rpc")

ROOT = Path(__file__).resolve().parent.parent
JOB = str(ROOT / "tests" / "failing_job.py")
LAUNCHERS = ("spawn", "torchrun")
MODES = ("exit", "kill", "hang")
JOB_TIMEOUT_S = 300
S = 1_000_000_000


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _command(launcher: str, mode: str, out: Path) -> list:
    if launcher == "spawn":
        job = [sys.executable, JOB, "spawn", mode, str(out)]
    else:
        job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--monitor-interval", "0.1", JOB, "torchrun", mode, str(out)]
    # the job's own bound; for "hang", what ends it, fired early by the test (below)
    return ["timeout", "-s", "TERM", str(JOB_TIMEOUT_S)] + job


def _run(launcher: str, mode: str, out: Path) -> dict:
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    with open(out / "job.log", "wb") as log:
        proc = subprocess.Popen(_command(launcher, mode, out), cwd=ROOT, env=env, stdout=log, stderr=log)
        # a hung job: ended after hanging a while, its journal flushed since
        end_like_timeout(proc, (out / "planted.json").exists, JOB_TIMEOUT_S,
                         2 * PERIOD_S + 0.5 if mode == "hang" else None)
    run = {"out": out, "mode": mode, "launcher": launcher,
           "planted": json.loads((out / "planted.json").read_text()) if (out / "planted.json").exists() else None}
    if run["planted"] is not None:
        run.update(_examine(out))
    return run


def _examine(out: Path) -> dict:
    """What a user gets of the job's files: the report (every format, in-process) and the
    job's warnings, and ``tracemerge combine`` of them (the CLI)."""
    job = Job.open(_inputs(out), align=AlignRequest("auto"))
    report = job_report(job)
    merged = out / "merged.json"
    done = cli.run("combine", *_inputs(out), "-o", str(merged))
    assert done.exit_code == 0, done.stderr
    return {"report": json.loads(render(report, "json")), "text": render(report, "table"),
            "markdown": render(report, "markdown"), "html": render(report, "html"),
            "csv": render(report, "csv", section="postmortem"), "warnings": list(job.warnings),
            "combine_stderr": done.stderr, "merged": json.loads(merged.read_text())}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The six jobs, three at a time (each is two or three processes mostly waiting)."""
    base = tmp_path_factory.mktemp("failed_jobs")
    cases = [(launcher, mode) for launcher in LAUNCHERS for mode in MODES]
    with ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(lambda c: _run(c[0], c[1], base / f"{c[0]}-{c[1]}"), cases))
    return {(r["launcher"], r["mode"]): r for r in runs}


CASES = [pytest.param(launcher, mode, id=f"{launcher}-{mode}") for launcher in LAUNCHERS for mode in MODES]


def _inputs(out: Path) -> list:
    # what a user types: the job's files, the rank files and journals side by side
    return sorted(str(p) for p in out.glob("rank*"))


def _journal_lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]


def _log(run: dict) -> str:
    return (run["out"] / "job.log").read_text(errors="replace")[-3000:]


@pytest.mark.parametrize("launcher, mode", CASES)
def test_survivors_write_their_files(jobs, launcher, mode):
    run = jobs[launcher, mode]
    assert run["planted"] is not None, _log(run)
    out = run["out"]
    survivors = (0, 1) if mode == "hang" else (0,)
    for rank in survivors:
        path = out / f"rank{rank}.json.gz"
        assert path.exists(), f"rank {rank} wrote no file\n{_log(run)}"
        block = json.loads(gzip.decompress(path.read_bytes()))["tracemerge"]
        assert block["rank"] == rank and block["rpcs"] and block["collectives"]
        if "signal" in block:  # written on the signal: within the launcher's grace period, and measured
            assert block["signal"] == "SIGTERM"
            written = path.stat().st_mtime_ns - block["signal_ns"]
            assert 0 <= written < 5 * S, f"signal to file written: {written / 1e6:.0f} ms"
    if mode == "hang":  # timeout's TERM reached both: each says so
        for rank in survivors:
            block = json.loads(gzip.decompress((out / f"rank{rank}.json.gz").read_bytes()))["tracemerge"]
            assert block.get("signal") == "SIGTERM"
    else:
        assert not (out / "rank1.json.gz").exists()


@pytest.mark.parametrize("launcher, mode", [c for c in CASES if c.values[1] != "hang"])
def test_dead_rank_journal_holds_its_records_up_to_its_death(jobs, launcher, mode):
    run = jobs[launcher, mode]
    died = run["planted"]["planted_ns"]
    lines = _journal_lines(run["out"] / "rank1.journal")
    meta = lines[0]["meta"]
    assert lines[0]["tracemerge_journal"] == 1
    assert meta["rank"] == 1 and meta["boot_id"] and meta["profile_start_ns"] < died
    assert not any("closed_ns" in line for line in lines)  # it never ended its block
    alive = max(line["alive_ns"] for line in lines if "alive_ns" in line)
    assert died - S <= alive <= died
    records = [line.get("rpc") or line.get("collective") for line in lines if "rpc" in line or "collective" in line]
    times = [r[k] for r in records for k in ("start_ns", "end_ns", "send_ns", "complete_ns") if k in r]
    assert died - S <= max(times) <= died
    served = {r["rpc_id"] for r in records if r.get("role") == "callee"}
    assert "0:0" in served  # a call it served (those of the last half second may not be flushed)


def _report(run: dict) -> dict:
    assert not any("older tracemerge" in w or "capture again" in w for w in run["warnings"]), run["warnings"]
    assert "older tracemerge" not in run["combine_stderr"]
    return run["report"]


@pytest.mark.parametrize("launcher, mode", [c for c in CASES if c.values[1] != "hang"])
def test_report_names_the_dead_rank_when_and_the_call_in_flight(jobs, launcher, mode):
    run = jobs[launcher, mode]
    pm = _report(run)["postmortem"]
    died = [e for e in pm["ended"] if e["how"] == "died"]
    assert [e["rank"] for e in died] == [1]
    # one machine: the reference clock is the wall clock the planted time was read on
    assert abs(died[0]["at_ns"] - run["planted"]["planted_ns"]) < S, died[0]
    assert died[0]["known_from"] in ("last journal flush", "last record", "first call to it that never completed")
    in_flight = [c for c in pm["in_flight"] if c["callee"] == 1]
    assert in_flight and in_flight[0]["caller"] == 0 and "serve" in in_flight[0]["name"]
    if mode == "exit":  # the 4th call, the one it died in
        assert in_flight[0]["rpc_id"] == "0:3"
    assert pm["waited_for"] == 1


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_report_of_a_hang_names_the_rank_that_never_arrived(jobs, launcher):
    run = jobs[launcher, "hang"]
    pm = _report(run)["postmortem"]
    assert pm["waited_for"] == 1
    (unjoined,) = pm["unjoined"]
    assert unjoined["op"] == "all_reduce" and unjoined["missing"] == [1] and list(unjoined["waiting"]) == ["0"]
    assert unjoined["waiting"]["0"] > S  # it waited from the hang to the TERM
    ends = {e["rank"]: e for e in pm["ended"]}
    assert ends[0]["how"] == ends[1]["how"] == "SIGTERM"
    assert "all_reduce" in ends[0]["blocked_in"]
    assert "stall" in ends[1]["blocked_in"]  # serving the call that never answers
    assert any(c["caller"] == 0 and c["callee"] == 1 and "stall" in c["name"] for c in pm["in_flight"])
    # said first, in every format
    assert run["text"].startswith("post-mortem: rank 0 was ended by SIGTERM")
    assert "post-mortem: the rank everyone waited for: rank 1" in run["text"]
    assert run["markdown"].startswith("## Post-mortem\n")
    assert run["html"].index('id="postmortem"') < run["html"].index("<h2>Clocks</h2>")
    assert "collective,1,all_reduce" in run["csv"]


@pytest.mark.parametrize("launcher, mode", CASES)
def test_combine_marks_calls_never_completed_without_a_return_arrow(jobs, launcher, mode):
    run = jobs[launcher, mode]
    trace = run["merged"]
    events = trace["traceEvents"]
    marked = {e["args"]["rpc_id"]: e for e in events if e.get("ph") == "X" and (e.get("args") or {}).get("completed") is False}
    pending = {c["rpc_id"] for c in _report(run)["postmortem"]["in_flight"]}
    assert pending and pending <= set(marked)
    for rpc_id in pending:
        flows = [e for e in events if e.get("cat") == "rpc" and e.get("ph") in ("s", "f")
                 and e["args"]["rpc_id"] == rpc_id]
        # at most the request's two ends; never a return
        assert len(flows) in (0, 2) and len({e["id"] for e in flows}) <= 1
        if flows:
            assert [e["ph"] for e in sorted(flows, key=lambda e: e["ts"])] == ["s", "f"]
    # nothing written is lost: every record of the inputs' rank files is in the summary's counts
    rpc_sides = trace["tracemerge"]["rpc_sides"]
    assert rpc_sides["calls"] >= 4
    # the caller's own span of each call carries the mark too, its args otherwise as its rank file wrote them
    for call in _report(run)["postmortem"]["in_flight"]:
        written = _caller_span(run["out"] / f"rank{call['caller']}.json.gz", call["rpc_id"])
        pids = set(trace["tracemerge"]["pids"][str(call["caller"])].values())
        (own,) = [e for e in events if e.get("ph") == "X" and e["pid"] in pids and e["args"].get("role") == "caller"
                  and e["args"].get("rpc_id") == call["rpc_id"]]
        assert own["name"] == written["name"] == call["name"]
        assert own["args"]["completed"] is False and own["args"]["in_flight_to"] == call["callee"] == 1
        assert own["dur"] == pytest.approx(written["dur"], abs=0.002)
        kept = {k: v for k, v in own["args"].items() if k not in ("completed", "in_flight_to", "External id")}
        assert kept == {k: v for k, v in written["args"].items() if k != "External id"}
        assert list(own["args"])[-2:] == ["completed", "in_flight_to"]
    # spans of calls that completed carry no mark
    assert not [e for e in events if e.get("ph") == "X" and (e.get("args") or {}).get("role") == "caller"
                and e["args"]["rpc_id"] not in pending and "completed" in e["args"]]


def _caller_span(path: Path, rpc_id: str) -> dict:
    """The caller span of ``rpc_id`` as its rank file holds it."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    (span,) = [e for e in doc["traceEvents"] if e.get("ph") == "X" and (e.get("args") or {}).get("rpc_id") == rpc_id
               and e["args"].get("role") == "caller"]
    return span


@pytest.mark.parametrize("launcher, mode", [c for c in CASES if c.values[0] == "spawn"])
def test_in_flight_marks_are_the_same_bytes_from_either_core_and_in_the_pftrace(jobs, launcher, mode, tmp_path,
                                                                                   monkeypatch):
    from support.pftrace import read_pftrace

    from tracemerge import native
    run = jobs[launcher, mode]
    written = {}
    for core in ["python"] + (["native"] if native._core is not None else []):  # the compiled core where built
        monkeypatch.setenv(native.ENV, core)
        job = Job.open(_inputs(run["out"]), align=AlignRequest("auto"))
        for name in ("merged.json", "merged.pftrace"):
            combine(job, None, str(tmp_path / f"{core}.{name}"))
            written[core, name] = (tmp_path / f"{core}.{name}").read_bytes()
    for name in ("merged.json", "merged.pftrace"):
        assert written["python", name] == written.get(("native", name), written["python", name]), name
    slices = read_pftrace(str(tmp_path / "python.merged.pftrace"))["slices"]
    for call in _report(run)["postmortem"]["in_flight"]:
        (own,) = [s for s in slices if s["args"].get("role") == "caller" and s["args"].get("rpc_id") == call["rpc_id"]]
        assert own["args"]["completed"] is False and own["args"]["in_flight_to"] == call["callee"]
        assert own["name"] == call["name"] and not own["terminating"] and not own.get("end_terminating")


@pytest.mark.parametrize("launcher, mode", CASES)
def test_a_rank_left_as_a_journal_is_said_once_not_as_missing_spans(jobs, launcher, mode):
    run = jobs[launcher, mode]
    sides = run["merged"]["tracemerge"]["rpc_sides"]
    stderr = run["combine_stderr"]
    assert "spans of the others are not in the output" not in stderr, stderr
    assert "no timestamped events" not in stderr, stderr
    assert sides["spans_missing"] == {"caller": 0, "callee": 0}
    if mode == "hang":  # every rank wrote its file
        assert "journal_only" not in sides and "journal only" not in stderr
        return
    in_flight = [c for c in _report(run)["postmortem"]["in_flight"] if c["callee"] == 1]
    # rank 1 served every call with both records; it died without writing a span
    assert sides["journal_only"] == {"1": {"died": True, "in_flight_to": len(in_flight),
                                           "spans_never_written": {"caller": 0, "callee": sides["both_sides"]}}}
    if mode == "exit":  # the one call it died in
        assert len(in_flight) == 1
    lines = [line for line in stderr.splitlines() if "rank 1 died (journal only)" in line]
    assert lines == [f"tracemerge: note: rank 1 died (journal only): {len(in_flight)} call"
                     f"{'' if len(in_flight) == 1 else 's'} in flight to it, its spans were never written"
                     + (f" (no arrows for the {sides['both_sides']} calls it served)" if sides["both_sides"] > 1 else
                        " (no arrows for the 1 call it served)" if sides["both_sides"] else "")], stderr


def test_journal_beside_its_rank_file_adds_nothing_twice(jobs, tmp_path):
    """A rank file's journal is removed once the file is written; one left beside it (the
    process died right after, or the files were copied together) adds nothing: here a
    journal made of the rank file's own block (its meta and records), plus the dead rank's."""
    out = jobs["spawn", "exit"]["out"]
    assert not (out / "rank0.journal").exists()  # its block wrote its file: the journal went
    block = json.loads(gzip.decompress((out / "rank0.json.gz").read_bytes()))["tracemerge"]
    meta = {k: block[k] for k in ("job_id", "rank", "world_size", "worker_name", "hostname", "boot_id", "pid",
                                  "profile_start_ns")}
    lines = [{"tracemerge_journal": 1, "meta": meta}] + [{"rpc": r} for r in block["rpcs"]]
    lines += [{"collective": c} for c in block["collectives"]] + [{"closed_ns": block["profile_stop_ns"]}]
    journal = tmp_path / "rank0.journal"
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines))
    both = Job.open([str(out / "rank0.json.gz"), str(journal), str(out / "rank1.journal")])
    alone = Job.open([str(out / "rank0.json.gz"), str(out / "rank1.journal")])
    assert both.ranks == alone.ranks == [0, 1]
    assert [len(i.rpcs) for i in both.infos] == [len(i.rpcs) for i in alone.infos]
    assert both.info(0).path.endswith("rank0.json.gz")
    assert any("read from its journal" in w for w in both.info(1).warnings)  # said in a note
    # the journal alone is rank 0 too, with its records and no events; it ended its block
    only = Job.open([str(journal), str(out / "rank1.journal")])
    assert len(only.info(0).rpcs) == len(block["rpcs"]) and only.info(0).events == 0
    assert only.info(0).ending["journal"]["closed"]


def test_journal_cut_in_a_record_is_read_up_to_its_last_whole_one(jobs, tmp_path):
    whole = (jobs["spawn", "kill"]["out"] / "rank1.journal").read_bytes()
    lines = whole.split(b"\n")[:-1]
    # the last record line (an RPC's, or a collective's where the kill came before any RPC was flushed)
    record_lines = [n for n, line in enumerate(lines) if line.startswith((b'{"rpc"', b'{"collective"'))]
    last = record_lines[-1]
    cut = tmp_path / "rank1.journal"
    cut.write_bytes(b"\n".join(lines[:last]) + b"\n" + lines[last][: len(lines[last]) // 2])
    info = Job.open([str(cut)]).info(1)
    kept = [json.loads(line) for line in lines[:last]]
    ids = {(x["rpc"]["rpc_id"], x["rpc"]["role"]) for x in kept if "rpc" in x}
    assert {(r["rpc_id"], r["role"]) for r in info.rpcs} == ids
    assert info.ending["journal"]["cut"] and any("cut in a line" in w for w in info.warnings)


SIGNALLED = """
import os, signal, sys, time
from tracemerge.capture import profile
seen = []
if sys.argv[2] == "chain":
    signal.signal(signal.SIGHUP, lambda s, f: (seen.append(s), print("previous handler ran", flush=True), sys.exit(7)))
with profile(sys.argv[1], trace=False, rank=0):
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("how", ["default", "chain"])
def test_signal_writes_the_file_then_does_what_it_would_have(tmp_path, how):
    """SIGTERM with its default disposition: the file, then death by SIGTERM (status -15);
    SIGHUP with a handler of the job's: the file, then that handler (which exits 7)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(tmp_path), how], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM if how == "default" else signal.SIGHUP)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    block = json.loads(gzip.decompress((tmp_path / "rank0.json.gz").read_bytes()))["tracemerge"]
    if how == "default":
        assert rc == -signal.SIGTERM and block["signal"] == "SIGTERM"
    else:
        assert rc == 7 and block["signal"] == "SIGHUP"
        assert "previous handler ran" in proc.stdout.read()
    assert not (tmp_path / "rank0.journal").exists()  # the file holds it all: the journal went


def test_handlers_are_put_back_when_the_block_ends(tmp_path):
    import signal as sig

    from tracemerge.capture import profile

    def mine(signum, frame):
        pass

    previous = sig.signal(sig.SIGHUP, mine)
    try:
        before = {s: sig.getsignal(s) for s in (sig.SIGTERM, sig.SIGINT, sig.SIGHUP)}
        wakeup = sig.set_wakeup_fd(-1)
        sig.set_wakeup_fd(wakeup)
        with profile(tmp_path, trace=False, rank=0):
            assert sig.getsignal(sig.SIGHUP) is not mine
        assert {s: sig.getsignal(s) for s in before} == before
        assert sig.set_wakeup_fd(wakeup) == wakeup
    finally:
        sig.signal(sig.SIGHUP, previous)


def _cycle_file(path: Path, cycle: int, start: int, stop: int, rpcs: list) -> None:
    block = {"version": 1, "job_id": "j", "rank": 1, "world_size": 2, "worker_name": "worker1", "hostname": "h",
             "boot_id": "b", "pid": 7, "cycle": cycle, "profile_start_ns": start, "profile_stop_ns": stop,
             "rpcs": rpcs, "collectives": [], "remote_sides": []}
    events = [{"ph": "X", "name": f"work{cycle}", "pid": 7, "tid": 1, "ts": 0.0, "dur": (stop - start) / 1000}]
    path.write_bytes(gzip.compress(json.dumps({"tracemerge": block, "baseTimeNanoseconds": start,
                                               "traceEvents": events}).encode()))


def _served(rpc_id: str, start: int, end=None) -> dict:
    rec = {"rpc_id": rpc_id, "role": "callee", "kind": "rpc_sync", "func": "f", "name": "rpc_sync#f(worker0 -> worker1)",
           "caller": 0, "callee": 1, "status": "ok" if end else "pending", "start_ns": start}
    if end:
        rec["end_ns"] = end
    return rec


def test_journal_adds_to_a_dead_rank_cycle_files_what_they_lack(tmp_path):
    """A rank that wrote two schedule cycles, then died: its journal adds the records after
    the last cycle (the served call it died in), and none of the cycles' twice."""
    t = 1_700_000_000 * S
    _cycle_file(tmp_path / "rank1.cycle0.json.gz", 0, t, t + S, [_served("0:0", t + 100)])
    _cycle_file(tmp_path / "rank1.cycle1.json.gz", 1, t + 2 * S, t + 3 * S, [_served("0:1", t + 2 * S + 100)])
    meta = {"job_id": "j", "rank": 1, "world_size": 2, "worker_name": "worker1", "hostname": "h", "boot_id": "b",
            "pid": 7, "profile_start_ns": t}
    lines = [{"tracemerge_journal": 1, "meta": meta}, {"rpc": _served("0:0", t + 100)},
             {"rpc": _served("0:0", t + 100, t + 200)}, {"rpc": _served("0:1", t + 2 * S + 100, t + 2 * S + 200)},
             {"rpc": _served("0:2", t + 4 * S)}, {"alive_ns": t + 4 * S + 10}]
    (tmp_path / "rank1.journal").write_text("".join(json.dumps(x) + "\n" for x in lines))
    job = Job.open(sorted(str(p) for p in tmp_path.iterdir()))
    (info,) = job.infos
    assert [os.path.basename(p.path) for p in info.files] == ["rank1.cycle0.json.gz", "rank1.cycle1.json.gz",
                                                              "rank1.journal"]
    assert sorted(r["rpc_id"] for r in info.rpcs) == ["0:0", "0:1", "0:2"]
    assert info.events == 2 and info.stop_ns == t + 4 * S + 10
    for name in ("merged.json", "merged.pftrace"):  # both formats write such a rank
        combine(Job.open(sorted(str(p) for p in tmp_path.glob("rank1*")), align=AlignRequest("auto")), None,
                str(tmp_path / name))
        assert (tmp_path / name).stat().st_size > 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert {"work0", "work1"} <= {e.get("name") for e in merged["traceEvents"]}


def test_journal_paused_writes_nothing_and_resumed_writes_what_waited(tmp_path):
    """Journal.pause/resume (the capture without its journal, for benchmarks/capture_overhead.py
    --paired journal): paused, no flush for many periods; resumed, what was recorded meanwhile
    is on disk at once, and the flusher runs again."""
    from tracemerge.capture import journal, recorder

    rec = recorder.Recorder()
    j = journal.Journal(tmp_path / "rank0.journal", lambda: {"rank": 0}, rec, period_s=0.02).start()
    try:
        time.sleep(0.1)
        j.pause()
        paused = _journal_lines(j.path)
        assert sum("alive_ns" in line for line in paused) >= 2  # it flushed while running
        rec.collectives.append({"op": "all_reduce", "group": "0", "seq": 1, "start_ns": 5, "end_ns": 6})
        time.sleep(0.2)  # ten periods
        assert _journal_lines(j.path) == paused
        j.resume()
        resumed = _journal_lines(j.path)
        assert resumed[len(paused):-1] == [{"collective": rec.collectives[0]}]
        time.sleep(0.2)
        assert len(_journal_lines(j.path)) > len(resumed)  # flushing every period again
    finally:
        j.close()
    assert "closed_ns" in _journal_lines(j.path)[-1]
