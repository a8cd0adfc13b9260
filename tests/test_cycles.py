"""Schedule cycles (issue 15, item 4): the ``rank{R}.cycle{N}.json.gz`` files a
``torch.profiler.schedule`` writes are windows of one process. A real 2-worker RPC job on
loopback, both workers profiling with a 3-cycle schedule; combine, info, report and offsets
take every cycle of a rank as one process, ``--cycle N`` keeps one cycle."""

import gzip
import json
import os
import textwrap

import pytest

pytest.importorskip("torch")

from support import cli  # noqa: E402
from support.jobs import run_script  # noqa: E402
from support.ranks import load_output  # noqa: E402

JOB_TIMEOUT_S = 120
CYCLES = 3

# Each worker profiles with the same schedule: steps 2-3, 6-7 and 10-11 are recorded.
# worker0 calls worker1 once per step (its RPC n at step n); worker1 adds tensors.
JOB = textwrap.dedent("""
    import os, sys
    import torch
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    from tracemerge.capture import profile

    def worker(rank, port, out):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
        schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=3)
        with profile(out, schedule=schedule) as p:
            for step in range(14):
                if rank == 0:
                    rpc.rpc_sync("worker1", torch.add, args=(torch.ones(2), step))
                else:
                    torch.add(torch.ones(2), step)
                p.step()
        rpc.shutdown()

    if __name__ == "__main__":
        port, out = int(sys.argv[1]), sys.argv[2]
        mp.spawn(worker, args=(port, out), nprocs=2)
""")


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


@pytest.fixture(scope="module")
def cycle_files(tmp_path_factory):
    where = tmp_path_factory.mktemp("cycles")
    out = run_script(JOB, where, JOB_TIMEOUT_S)
    files = sorted(str(p) for p in out.iterdir())
    assert [os.path.basename(f) for f in files] == [f"rank{r}.cycle{c}.json.gz" for r in (0, 1) for c in range(CYCLES)]
    return files


def _by_rank(files):
    return {r: [f for f in files if os.path.basename(f).startswith(f"rank{r}.")] for r in (0, 1)}


def _recorded_ids(files):
    """The RPC ids each side's cycles recorded, read from the input files: the caller's
    calls, and the calls the callee served in its own windows (its pace, not the
    caller's, sets which; a call served in a callee window outside every caller window
    is one only the callee saw)."""
    ids = {"caller": set(), "callee": set()}
    for f in files:
        for r in load_output(f)["tracemerge"]["rpcs"]:
            ids[r["role"]].add(r["rpc_id"])
    return ids


def _ops(doc):
    """The complete events of an input or output document."""
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def test_combine_takes_every_cycle_of_a_rank_as_one_process(cycle_files, tmp_path):
    out = tmp_path / "merged.json"
    res = cli.run("combine", *cycle_files, "-o", out)
    assert res.exit_code == 0, res.stderr
    doc = load_output(out)
    summary = doc["tracemerge"]
    assert [i["rank"] for i in summary["inputs"]] == [0, 1]
    by_rank = _by_rank(cycle_files)
    inputs = {r: [load_output(f) for f in by_rank[r]] for r in (0, 1)}
    for entry in summary["inputs"]:
        r = entry["rank"]
        assert [c["path"] for c in entry["cycles"]] == by_rank[r]
        assert [c["cycle"] for c in entry["cycles"]] == list(range(CYCLES))
        assert entry["events"] == sum(len(d["traceEvents"]) for d in inputs[r])
    # one process per rank: every pid of a rank's cycles maps to one output pid
    for r in (0, 1):
        os_pids = {d["tracemerge"]["pid"] for d in inputs[r]}  # the worker process, as its capture saw it
        assert len(os_pids) == 1
        [os_pid] = os_pids
        assert all(any(e.get("pid") == os_pid for e in d["traceEvents"]) for d in inputs[r])
        assert str(os_pid) in summary["pids"][str(r)]
    # every input span of every cycle is in the output exactly once, on its rank's process,
    # and one machine means one clock: at its recorded time (ts relative to the output's base)
    for r in (0, 1):
        pids = set(summary["pids"][str(r)].values())
        want = sorted((e["name"], round((d["baseTimeNanoseconds"] - doc["baseTimeNanoseconds"]) / 1000 + e["ts"], 3),
                       e["dur"]) for d in inputs[r] for e in _ops(d))
        got = sorted((e["name"], e["ts"], e["dur"]) for e in _ops(doc) if e["pid"] in pids)
        assert got == want
    # the RPCs of every cycle are joined, with both sides (the callee's side of each call
    # the caller recorded is fetched at the caller's cycle end)
    ids = _recorded_ids(cycle_files)
    assert len(ids["caller"]) == 2 * CYCLES
    assert summary["rpc_sides"] == {"calls": len(ids["caller"] | ids["callee"]), "both_sides": 2 * CYCLES,
                                    "caller_only": 0, "callee_only": len(ids["callee"] - ids["caller"]),
                                    "drawn": 2 * CYCLES,
                                    "spans_missing": {"caller": 0, "callee": 0}}, (summary["rpc_sides"], res.stderr)
    flows = [e for e in doc["traceEvents"] if e.get("ph") in ("s", "f") and e.get("cat") == "rpc"]
    assert len(flows) == 4 * 2 * CYCLES  # request and response, two halves each, per call


def test_cycle_option_keeps_one_cycle(cycle_files, tmp_path):
    out = tmp_path / "one.json"
    res = cli.run("combine", *cycle_files, "--cycle", "1", "-o", out)
    assert res.exit_code == 0, res.stderr
    summary = load_output(out)["tracemerge"]
    assert [i["path"] for i in summary["inputs"]] == [f for f in cycle_files if ".cycle1." in f]
    assert all("cycles" not in i for i in summary["inputs"])
    cycle1 = [load_output(f) for f in cycle_files if ".cycle1." in f]
    assert summary["events"]["in"] == sum(len(d["traceEvents"]) for d in cycle1)
    # worker0 issued RPCs 6 and 7 in its cycle 1 (RPC n at step n); worker1 served
    # whichever calls reached it in its own cycle 1, which its own pace set
    calls = {r["rpc_id"] for rec in summary["records"] for r in rec["rpcs"] if r["role"] == "caller"}
    assert {i.split(":")[1] for i in calls} == {"6", "7"}

    res = cli.run("combine", *cycle_files, "--cycle", "5", "-o", tmp_path / "none.json")
    assert res.exit_code == 2 and "--cycle 5: no input holds cycle 5" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "none.json").exists()


def test_info_report_and_offsets_take_the_cycles_together(cycle_files):
    res = cli.run("info", *cycle_files)
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert out.count("\n  rank ") == 2
    assert out.count("3 schedule cycles, one process") == 2

    res = cli.run("offsets", *cycle_files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    clocks = {c["rank"]: c for c in json.loads(res.stdout)["ranks"]}
    assert set(clocks) == {0, 1}
    assert clocks[1]["method"] == "shared-clock"

    res = cli.run("report", *cycle_files, "--format", "json", "--group-by", "name,rank")
    assert res.exit_code == 0, res.stderr
    rep = json.loads(res.stdout)
    # aten::add of each rank's cycles, counted from the input files. An op still running
    # when a cycle stopped (a call rank 1 served on a server thread, under load) is written
    # with args.finished false and a duration that runs to the stop: no row of the key
    # averages, and the report says so
    adds = {r: [e for f in _by_rank(cycle_files)[r] for e in _ops(load_output(f)) if e["name"] == "aten::add"]
            for r in (0, 1)}
    done = {r: sum(1 for e in es if e.get("args", {}).get("finished") is not False) for r, es in adds.items()}
    got = {row["node_id"]: row["count"] for row in rep["key_averages"] if row["key"] == "aten::add"}
    assert got == {r: n for r, n in done.items() if n}, (got, done)
    if any(n < len(adds[r]) for r, n in done.items()):
        assert "still open when the profiler stopped" in res.stderr, res.stderr
    [calls] = rep["rpc"]["keys"]
    ids = _recorded_ids(cycle_files)
    assert (calls["count"], calls["complete"], calls["caller"], calls["callee"]) == (
        len(ids["caller"] | ids["callee"]), 2 * CYCLES, 0, 1)


def test_order_numbering_keeps_cycle_files_apart(cycle_files, tmp_path):
    res = cli.run("combine", *cycle_files, "--rank-from", "order", "-o", tmp_path / "o.json")
    assert res.exit_code == 0, res.stderr
    assert len(load_output(tmp_path / "o.json")["tracemerge"]["inputs"]) == 2 * CYCLES


def _rewrite(src, dst, change):
    doc = load_output(src)
    change(doc)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("kernel", ["native", "python"])
@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_a_cycle_whose_pids_come_in_another_order_stays_on_its_process(cycle_files, tmp_path, kernel, suffix):
    files = []
    for f in _by_rank(cycle_files)[0]:
        dst = tmp_path / os.path.basename(f)
        # cycle 1 names its processes in reverse order: its pid codes differ from cycle 0's
        _rewrite(f, dst, lambda d: d["traceEvents"].reverse() if ".cycle1." in f else None)
        files.append(str(dst))
    out = tmp_path / f"merged{suffix}"
    if kernel == "native" and _core_missing():
        pytest.skip("the compiled core is not built")
    # the core asked for, whatever the test run itself selected
    env = f"import os; os.environ['TRACEMERGE_CORE'] = {'' if kernel == 'native' else 'python'!r}; "
    res = cli.run("combine", *files, "-o", out, code=env + "from tracemerge.cli import main; main()")
    assert res.exit_code == 0, res.stderr
    if kernel == "native" and suffix == ".json":  # a .pftrace encodes a rank's cycles joined, in one piece
        assert "read by the Python path: a cycle whose pids are not in the order" in res.stderr
    if suffix == ".json":
        doc = load_output(out)
        pids = doc["tracemerge"]["pids"]["0"]
        os_pid = next(p for p in pids if p.isdigit())
        for cycle, f in enumerate(files):
            steps = {e["name"] for e in _ops(load_output(f)) if e["name"].startswith("ProfilerStep")}
            assert len(steps) == 2
            placed = {e["pid"] for e in _ops(doc) if e["name"] in steps}
            assert placed == {pids[os_pid]}, cycle
    else:
        from tests.support.pftrace import read_pftrace, thread_of
        got = read_pftrace(out)
        steps = [s for s in got["slices"] if s["name"].startswith("ProfilerStep")]
        assert len(steps) == 2 * CYCLES
        assert len({thread_of(got["tracks"], s["track"])[0] for s in steps}) == 1  # one process


def _core_missing():
    from tracemerge import native
    return native._core is None


def test_cycles_of_two_processes_are_refused(cycle_files, tmp_path):
    files = []
    for f in _by_rank(cycle_files)[0]:
        dst = tmp_path / os.path.basename(f)
        _rewrite(f, dst, lambda d: d["tracemerge"].update(job_id="another run") if ".cycle2." in f else None)
        files.append(str(dst))
    res = cli.run("combine", *files, "-o", tmp_path / "o.json")
    assert res.exit_code == 4
    assert "cycle 2 of rank 0 is not from the process of" in res.stderr and "job_id" in res.stderr
    assert not (tmp_path / "o.json").exists()


def test_info_of_a_merged_trace_names_every_cycle_file(cycle_files, tmp_path):
    out = tmp_path / "merged.json"
    assert cli.run("combine", *cycle_files, "-o", out).exit_code == 0
    res = cli.run("info", out)
    assert res.exit_code == 0, res.stderr
    text = res.stdout
    for f in cycle_files:  # each rank's line names all its cycle files, not the first alone
        assert f in text, f
    assert text.count(f"{CYCLES} cycle files: ") == 2


def _journal_beside(files, tmp_path):
    """rank 1 as it is left when it dies after writing its cycle files 0 and 1: those two
    files and its journal, which holds every record of its three cycles."""
    by_rank = _by_rank(files)
    docs = [load_output(f) for f in by_rank[1]]
    meta = {k: v for k, v in docs[0]["tracemerge"].items() if not isinstance(v, list) and k != "cycle"}
    lines = [{"tracemerge_journal": 1, "meta": meta}] + [{"rpc": r} for d in docs for r in d["tracemerge"]["rpcs"]]
    lines.append({"alive_ns": docs[-1]["tracemerge"]["profile_stop_ns"]})
    journal = tmp_path / "rank1.journal"
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return by_rank[0] + by_rank[1][:2] + [str(journal)], docs


def test_with_a_journal_beside_cycle_files_one_cycle_keeps_its_own_records(cycle_files, tmp_path):
    """--cycle N once joined a dead rank's journal after the filter: the other cycles'
    records leaked into cycle N as one more part."""
    from tracemerge import Job

    files, docs = _journal_beside(cycle_files, tmp_path)
    for n in (0, 1):
        job = Job.open(files, cycle=n)
        rank1 = job.info(1)
        assert [p.path for p in rank1.files] == [_by_rank(cycle_files)[1][n]]
        assert sorted(r["rpc_id"] for r in rank1.rpcs) == sorted(r["rpc_id"] for r in docs[n]["tracemerge"]["rpcs"])
    # the journal's own part is what none of the files holds: cycle 2's records, as cycle 2
    job = Job.open(files, cycle=2)
    assert [p.path for p in job.info(1).files] == [files[-1]]
    assert sorted(r["rpc_id"] for r in job.info(1).rpcs) == sorted(r["rpc_id"] for r in docs[2]["tracemerge"]["rpcs"])


def _whole_run(cycles, path):
    """One rank's cycle files as the one file a run profiled whole would have left."""
    docs = [load_output(f) for f in cycles]
    whole = docs[0]
    for d in docs[1:]:
        whole["traceEvents"] += d["traceEvents"]
        whole["tracemerge"]["rpcs"] += d["tracemerge"]["rpcs"]
    whole["tracemerge"].update(cycle=None, profile_stop_ns=docs[-1]["tracemerge"]["profile_stop_ns"])
    path.write_bytes(gzip.compress(json.dumps(whole).encode()))
    return str(path)


@pytest.mark.parametrize("shape", ["journal", "whole_run"])
def test_ranks_of_different_numbers_of_files_are_reported(cycle_files, tmp_path, shape):
    """A rank of several files beside a rank of one (cycle files and a journal; a whole-run
    file beside another rank's cycle files) once ended report, combine --report and
    --critical-path in exit 1: a worker's handle reached code in the parent."""
    by_rank = _by_rank(cycle_files)
    if shape == "journal":  # rank 0 one whole-run file, rank 1 two cycle files and its journal
        files = [_whole_run(by_rank[0], tmp_path / "rank0.json.gz")] + _journal_beside(cycle_files, tmp_path)[0][3:]
    else:
        files = by_rank[0] + [_whole_run(by_rank[1], tmp_path / "rank1.json.gz")]
    for args in (["report", *files, "--analysis", "--format", "json", "-o", tmp_path / "r.json"],
                 ["combine", *files, "-o", tmp_path / "t.json", "--force", "--report", "--critical-path"]):
        res = cli.run(*args)
        assert res.exit_code == 0, res.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1]
    names = {e["args"]["name"] for e in load_output(tmp_path / "t.json")["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert any("critical path" in n for n in names), names
    assert "RPC latency" in (tmp_path / "t.report.txt").read_text()


def test_a_cycle_file_given_twice_is_refused(cycle_files, tmp_path):
    """A cycle file copied under another cycle number was merged twice, 0 duplicates said."""
    by_rank = _by_rank(cycle_files)
    copy = tmp_path / f"rank0.cycle{CYCLES}.json.gz"
    copy.write_bytes(open(by_rank[0][0], "rb").read())
    res = cli.run("combine", *cycle_files, copy, "-o", tmp_path / "t.json")
    assert res.exit_code == 4
    assert f"{copy}: holds cycle 0 of rank 0, as {by_rank[0][0]} does" in res.stderr
    # the same with the cycle told by the name alone (a block without its cycle)
    doc = load_output(by_rank[0][0])
    doc["tracemerge"]["cycle"] = None
    copy.write_bytes(gzip.compress(json.dumps(doc).encode()))
    res = cli.run("combine", *cycle_files, copy, "-o", tmp_path / "t.json")
    assert res.exit_code == 4
    assert f"{copy}: cycle {CYCLES} of rank 0 is a copy of {by_rank[0][0]}" in res.stderr
    assert not (tmp_path / "t.json").exists()
