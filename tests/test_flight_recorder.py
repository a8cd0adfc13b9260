"""PyTorch Flight Recorder dumps as input (issue 47): real 2-rank gloo jobs (loopback,
``tests/fr_job.py``) with the Flight Recorder on, each rank's ring dumped in both forms
torch writes (``_dump_fr_trace()`` pickle, ``_dump_fr_trace_json()`` JSON), named as the
watchdog names them (prefix + rank):

- ``hang``: rank 1 never joins an all_reduce; ``HANG_S`` after rank 0 entered it, both dump;
  the test then ends the job with SIGTERM (as ``timeout`` would);
- ``mismatch``: rank 1's all_reduce of one step has another shape, of the next another
  dtype (the same bytes: a different element count aborts a gloo process before any dump).

The planted truth is what the job wrote (``planted{R}.json``: the collective's sequence
number, when rank 0 entered it, when each rank dumped). torch's own analyser
(``torch.distributed.flight_recorder.fr_trace``) is run on the same dumps: what it reports
must be in tracemerge's post-mortem.
"""

import json
import os
import pickle
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import cli
from support.jobs import end_like_timeout

from tracemerge import AlignRequest, Job
from tracemerge.report.build import job_report

pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parent.parent
JOB = str(ROOT / "tests" / "fr_job.py")
JOB_TIMEOUT_S = 300  # a bound, not the time: each job takes seconds on a quiet machine
MS = 1_000_000
sys.path.insert(0, str(ROOT / "tests"))
from fr_job import HANG_S  # noqa: E402

pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _run(mode: str, out: Path) -> Path:
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    dumps = [out / form / name for form, name in (("pickle", "nccl_trace_rank_0"), ("pickle", "nccl_trace_rank_1"),
                                                  ("json", "nccl_trace_rank_0.json"),
                                                  ("json", "nccl_trace_rank_1.json"))]
    with open(out / "job.log", "wb") as log:
        proc = subprocess.Popen(["timeout", "-s", "TERM", str(JOB_TIMEOUT_S), sys.executable, JOB, mode, str(out)],
                                cwd=ROOT, env=env, stdout=log, stderr=log)
        # a hung job: ended once the last dump's planted time is written
        end_like_timeout(proc, lambda: all(p.exists() for p in dumps), JOB_TIMEOUT_S,
                         0.3 if mode == "hang" else None)
    return out


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    base = tmp_path_factory.mktemp("fr_jobs")
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(("hang", "mismatch"), pool.map(lambda m: _run(m, base / m), ("hang", "mismatch"))))
    for out in runs.values():
        assert (out / "planted0.json").exists(), (out / "job.log").read_text(errors="replace")[-3000:]
    return runs


def _planted(out: Path, rank: int) -> dict:
    return json.loads((out / f"planted{rank}.json").read_text())


def _dumps(out: Path, form: str) -> list:
    return sorted(str(p) for p in (out / form).iterdir())


def _pm(paths: list):
    job = Job.open(paths, align=AlignRequest("auto"))
    return job, job_report(job).postmortem


FORMS = ("pickle", "json")


@pytest.mark.parametrize("form", FORMS)
def test_hung_job_dumps_alone_name_who_never_joined_and_how_long_the_others_waited(jobs, form):
    out = jobs["hang"]
    planted = _planted(out, 0)
    job, pm = _pm(_dumps(out, form))
    assert [i.rank_source for i in job.infos] == ["filename", "filename"]  # nccl_trace_rank_{R}
    assert pm is not None and len(pm.unjoined) == 1
    u = pm.unjoined[0]
    assert (u.group, u.seq, u.op, u.missing) == ("0", planted["seq"], "all_reduce", [1])
    assert list(u.waiting) == [0]
    # from its entry (made as it entered) to its dump (the file's time): the planted interval
    truth = planted["dump_ns"] - planted["enter_ns"]
    assert truth >= HANG_S * 1e9
    assert abs(u.waiting[0] - truth) < 50 * MS, (u.waiting[0], truth)
    assert pm.waited_for == 1
    status = {(g.rank, g.group): g for g in pm.groups}
    assert status[0, "0"].pending == f"all_reduce (seq {planted['seq']})"
    assert status[0, "0"].last_completed == status[1, "0"].last_completed == planted["seq"] - 1
    assert status[1, "0"].pending == ""
    if form == "pickle":  # the JSON form holds no frames
        assert re.fullmatch(r"fr_job\.py:\d+ worker", u.where[0]), u.where
        assert u.missing_last[1].startswith(f"all_reduce (seq {planted['seq'] - 1}) at fr_job.py:")
    text = cli.run("report", *_dumps(out, form))
    assert text.exit_code == 0, text.stderr
    assert f"all_reduce (group 0, seq {planted['seq']}): rank 1 never joined; rank 0 waited" in text.stdout
    assert "the rank everyone waited for: rank 1" in text.stdout


def test_both_forms_of_one_ranks_dump_are_one_process(jobs):
    out = jobs["hang"]
    job, pm = _pm(_dumps(out, "pickle") + _dumps(out, "json"))
    assert job.ranks == [0, 1] and all(len(i.parts) == 2 for i in job.infos)
    assert [(u.seq, u.missing) for u in pm.unjoined] == [(_planted(out, 0)["seq"], [1])]


@pytest.mark.parametrize("form", FORMS)
def test_hung_job_dumps_beside_rank_files(jobs, form):
    out = jobs["hang"]
    planted = _planted(out, 0)
    rank_files = sorted(str(p) for p in out.glob("rank*.json.gz"))
    assert len(rank_files) == 2
    job, pm = _pm(rank_files + _dumps(out, form))
    assert job.ranks == [0, 1]
    assert all(len(i.parts) == 2 for i in job.infos)  # each rank: its rank file and its dump, one process
    u = pm.unjoined[0]
    assert (u.seq, u.missing) == (planted["seq"], [1])
    # beside the rank file, rank 0 waited until its block ended (the SIGTERM), after its dump
    assert u.waiting[0] >= planted["dump_ns"] - planted["enter_ns"] - 50 * MS
    assert {e.rank: e.how for e in pm.ended} == {0: "SIGTERM", 1: "SIGTERM"}
    assert pm.waited_for == 1
    # the rank file's record of the hung collective gained the dump's fields
    rec = next(c for c in job.info(0).collectives if c["seq"] == planted["seq"])
    assert rec["input_sizes"] == [[4]] and rec["state"] == "scheduled" and not rec["completed"]


EXPECTED_MISMATCHES = [
    ("SIZE_OR_SYNTAX_MISMATCH", "Expected input sizes: '[[4]]' does not match found input sizes: '[[2, 2]]'"),
    ("COLLECTIVE_DTYPE_MISMATCH",
     "Expected dtypes: '{'Float'}' does not match found dtype: '{'Float'}/{'Int'}/{'Int'}'"),
]


@pytest.mark.parametrize("form", FORMS)
def test_mismatched_sizes_and_dtypes_are_named(jobs, form):
    out = jobs["mismatch"]
    seq = _planted(out, 1)["seq"]
    _, pm = _pm(_dumps(out, form))
    assert pm is not None and not pm.unjoined
    found = [(m.seq, m.rank, m.expected_rank, m.kind, m.culprit) for m in pm.mismatches]
    assert found == [(seq + n, 1, 0, kind, culprit) for n, (kind, culprit) in enumerate(EXPECTED_MISMATCHES)]
    text = cli.run("report", *_dumps(out, form))
    assert f"all_reduce (group 0, seq {seq}): rank 1 does not match rank 0: SIZE_OR_SYNTAX_MISMATCH" in text.stdout


def test_combine_draws_each_ranks_entries_as_a_process(jobs, tmp_path):
    out = jobs["hang"]
    merged = tmp_path / "merged.json"
    done = cli.run("combine", *_dumps(out, "pickle"), "-o", str(merged))
    assert done.exit_code == 0, done.stderr
    trace = json.loads(merged.read_text())
    entries = {r: pickle.loads((out / "pickle" / f"nccl_trace_rank_{r}").read_bytes())["entries"] for r in (0, 1)}
    pids = {int(r): next(p for name, p in m.items() if name == "Flight Recorder")
            for r, m in trace["tracemerge"]["pids"].items()}
    assert len(set(pids.values())) == 2
    for rank, pid in pids.items():
        drawn = [e for e in trace["traceEvents"] if e.get("pid") == pid and e.get("cat") == "flight_recorder"]
        assert [e["args"]["seq"] for e in drawn] == [x["collective_seq_id"] for x in entries[rank]]
        assert {e["name"] for e in drawn} == {"gloo:all_reduce"}
        names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("pid") == pid and e["ph"] == "M"
                 and e["name"] == "process_name"]
        assert len(names) == 1 and names[0].startswith(f"rank {rank} · Flight Recorder"), names
    # the hung entry is drawn where it began: rank 0's last, after rank 1's last
    last = {r: max(e["ts"] for e in trace["traceEvents"] if e.get("pid") == p and e.get("cat") == "flight_recorder")
            for r, p in pids.items()}
    assert last[0] > last[1]


def test_info_describes_a_dump(jobs):
    out = jobs["mismatch"]
    done = cli.run("info", *_dumps(out, "json"))
    assert done.exit_code == 0, done.stderr
    assert "rank 0 (from filename)" in done.stdout and "rank 1 (from filename)" in done.stdout
    assert "Flight Recorder dump (json, version" in done.stdout


def test_a_pickle_that_names_a_global_is_refused_unrun(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "nccl_trace_rank_0"
    bad.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [Evil()]}))
    for command in ("report", "info", "combine"):
        args = [command, str(bad)] + (["-o", str(tmp_path / "m.json")] if command == "combine" else [])
        done = cli.run(*args)
        assert done.exit_code == 3, done
        assert done.stderr.count("\n") == 1 and str(bad) in done.stderr and "refused" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not marker.exists() and not (tmp_path / "m.json").exists()


def _torchfrtrace(dumps: list, where: Path) -> subprocess.CompletedProcess:
    where.mkdir()
    for path in dumps:
        (where / os.path.basename(path)).write_bytes(Path(path).read_bytes())
    return subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(where)],
                          capture_output=True, text=True, timeout=120)


def _repaired(dumps: list, where: Path) -> list:
    """The dumps with the default group's config keyed as their entries name it ('' -> '0'),
    which is all torchfrtrace lacks to read gloo's dumps."""
    where.mkdir()
    out = []
    for path in dumps:
        dump = pickle.loads(Path(path).read_bytes())
        dump["pg_config"] = {"0": dump["pg_config"][""]}
        out.append(where / os.path.basename(path))
        out[-1].write_bytes(pickle.dumps(dump))
    return [str(p) for p in out]


@pytest.mark.parametrize("mode", ("hang", "mismatch"))
def test_everything_torchfrtrace_reports_is_in_the_postmortem(jobs, mode, tmp_path):
    dumps = _dumps(jobs[mode], "pickle")
    # where it fails: gloo keys the default group's config '' while its entries say '0'
    failed = _torchfrtrace(dumps, tmp_path / "as_dumped")
    assert failed.returncode != 0 and "KeyError: ('0', 0)" in failed.stderr, failed.stderr[-2000:]
    # on the same dumps with that key repaired, it reads them: each of its findings is ours
    done = _torchfrtrace(_repaired(dumps, tmp_path / "repaired"), tmp_path / "ran")
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout + done.stderr
    _, pm = _pm(dumps)
    missing = re.findall(r"Not all ranks joining collective, sequence number: (\d+).*?missing ranks: \{([\d, ]+)\}",
                         said, re.S)
    errors = re.findall(r"Collective sequence number: (\d+) has errors.*?error msg: Culprit rank (\d+); "
                        r"Error type: (\w+), (.*?)\n", said, re.S)
    assert missing or errors, said[-2000:]
    for seq, ranks in missing:
        assert any(u.seq == int(seq) and u.missing == sorted(int(r) for r in ranks.split(",")) for u in pm.unjoined)
    for seq, rank, kind, culprit in errors:
        assert any((m.seq, m.rank, m.kind, m.culprit) == (int(seq), int(rank), kind, culprit) for m in pm.mismatches)
    assert len(missing) == len(pm.unjoined) and len(errors) == len(pm.mismatches)


def test_report_and_combine_of_the_jobs_directory(jobs, tmp_path):
    """What the job left, with a stray JSON and a merged trace beside: the same post-mortem
    as its files given one by one, what is left out named in one note."""
    import shutil

    out = tmp_path / "job"
    shutil.copytree(jobs["hang"], out)
    (out / "config.json").write_text('{"lr": 0.1}')
    given = sorted(str(p) for p in out.glob("rank*.json.gz")) + _dumps(out, "pickle") + _dumps(out, "json")
    merged = out / "merged.json"
    done = cli.run("combine", *given, "-o", str(merged))
    assert done.exit_code == 0, done.stderr
    one_by_one = cli.run("report", *given, "--format", "json")
    whole = cli.run("report", str(out), "--format", "json")
    assert whole.exit_code == 0, whole.stderr
    assert json.loads(whole.stdout)["postmortem"] == json.loads(one_by_one.stdout)["postmortem"]
    notes = [line for line in whole.stderr.splitlines() if "left out" in line]
    assert len(notes) == 1, whole.stderr
    for name in ("config.json (JSON that is no trace", "planted0.json", "job.log (not a trace",
                 "merged.json (a merged trace"):
        assert name in notes[0]
    again = tmp_path / "again.json"
    done = cli.run("combine", str(out), "-o", str(again))
    assert done.exit_code == 0, done.stderr
    assert len(json.loads(again.read_text())["tracemerge"]["inputs"]) == 2  # two ranks, each of its files
