"""The tools users already have read tracemerge's files right (issue 51).

One real 3-rank job (tests/interop_job.py: TensorPipe RPC and gloo on loopback, captured
with ``tracemerge.capture.profile``) is run for the module. Its rank files spell their rank
as torch does where tools read the text, and HolisticTraceAnalysis (a test extra; the HTA
tests say why they skip where it is not installed) loads every rank as its own with all
its events. ``tracemerge align`` on copies of those files given other machines' clocks by
the test (offsets, drift, new boot ids) moves every event exactly as ``tracemerge offsets``
reports and keeps everything else; HTA on its output finds the ranks and starts them where
the planted truth says, within the offsets' error bounds. Plain torch.profiler traces
(schedule cycle files) and a rank read from its journal are aligned too; bad outputs are
one-line errors with nothing half-written.
"""

import gzip
import hashlib
import json
import os
import re
import sys

import pytest
from support import cli
from support.jobs import run_job
from support.ranks import load_output
from support.synth import skew_job

from tracemerge.clocks.clock import ClockModel

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interop_job.py")
WORLD = 3
HTA_RANK = re.compile(r'"rank":\s+(\d+)')   # hta/common/trace_file.py: how HTA tells a file's rank
US = 1000
# the clocks the test gives ranks 1 and 2 (rank 0's stays: the reference): true time t reads
# to_local(t) there
PLANTED = {1: (3_000_000, 40.0), 2: (-7_500_000, -25.0)}


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _hta():
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as e:  # the test extra: pip install 'tracemerge[test]'
        pytest.skip(f"HolisticTraceAnalysis is not installed ({e}); pip install HolisticTraceAnalysis==0.5.0")
    return TraceAnalysis


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    out = tmp_path_factory.mktemp("interop")
    run_job([JOB, str(out)], timeout=240)
    files = sorted(out.glob("rank*.json.gz"))
    assert [f.name for f in files] == [f"rank{r}.json.gz" for r in range(WORLD)]
    return out


def _text(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read().decode()


def _hta_kept(doc):
    """The events HTA keeps of a trace (hta/common/trace_parser.py, _compress_df): those with
    a ``dur`` and a ``cat``, except the ``Trace`` category (the profiler's own span)."""
    return [e for e in doc["traceEvents"] if e.get("dur") is not None and e.get("cat") is not None
            and e["cat"] != "Trace"]


def _hta_load(TraceAnalysis, directory):
    """HTA's Trace of the traces in ``directory``, as a user opens them (the last step kept)."""
    return TraceAnalysis(trace_dir=str(directory), include_last_profiler_step=True).t


# ---- rank files ---------------------------------------------------------------------------------

def test_rank_files_spell_their_rank_as_kineto_does(captured):
    for r in range(WORLD):
        text = _text(captured / f"rank{r}.json.gz")
        doc = json.loads(text)
        assert int(HTA_RANK.search(text).group(1)) == r  # the first spaced rank is the file's own
        # distributedInfo as torch writes it (json.dumps of the dict: ", " and ": ")
        assert doc["distributedInfo"]["rank"] == r
        assert f'"distributedInfo": {json.dumps(doc["distributedInfo"])}' in text
        assert text.startswith('{\n  "tracemerge": {"version": 1, ')
        assert list(doc)[0] == "tracemerge" and list(doc)[-1] == "traceName"


def test_hta_loads_every_rank_of_the_capture_with_all_its_events(captured):
    TraceAnalysis = _hta()
    trace = _hta_load(TraceAnalysis, captured)
    assert sorted(trace.traces) == [0, 1, 2]
    for r in range(WORLD):
        path = str(captured / f"rank{r}.json.gz")
        assert os.path.samefile(trace.trace_files[r], path)
        kept = _hta_kept(load_output(path))
        assert len(trace.traces[r]) == len(kept) > 20
        names = set(trace.symbol_table.get_sym_table()[i] for i in trace.traces[r]["name"].unique())
        assert names == {e["name"] for e in kept}


# ---- align on other machines' clocks -----------------------------------------------------------

@pytest.fixture(scope="module")
def skewed(captured, tmp_path_factory):
    """The capture's files as if ranks 1 and 2 ran on machines of their own (PLANTED clocks,
    new boot ids): (directory, {rank: true ClockModel}, {rank: original doc})."""
    docs = {r: load_output(captured / f"rank{r}.json.gz") for r in range(WORLD)}
    anchor = docs[0]["tracemerge"]["profile_start_ns"]
    truth = {r: ClockModel(rank=r, method="planted", offset_ns=PLANTED.get(r, (0, 0))[0],
                           drift_ppm=PLANTED.get(r, (0, 0.0))[1], anchor_ns=anchor) for r in range(WORLD)}
    out = tmp_path_factory.mktemp("skewed")
    for r, doc in skew_job(docs, truth).items():
        doc["tracemerge"]["boot_id"] = f"machine-{r}"
        doc["tracemerge"]["hostname"] = f"host{r}"
        (out / f"rank{r}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out, truth, docs


def _abs_ns(doc, e):
    return (doc.get("baseTimeNanoseconds") or 0) + round(e["ts"] * US)


def _on_reference(c, local_ns):
    """Reference-clock ns of ``local_ns`` by an ``offsets`` row (local = ref + offset + drift (ref - anchor))."""
    return c["anchor_ns"] + (local_ns - c["offset_ns"] - c["anchor_ns"]) / (1 + c["drift_ppm"] * 1e-6)


def _without_times(e):
    return {k: v for k, v in e.items() if k not in ("ts", "dur")}


def test_align_moves_every_event_as_offsets_reports_and_keeps_the_rest(skewed, tmp_path):
    src, truth, _ = skewed
    files = [src / f"rank{r}.json.gz" for r in range(WORLD)]
    before = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    res = cli.run("offsets", *files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    clocks = {c["rank"]: c for c in json.loads(res.stdout)["ranks"]}
    assert clocks[1]["method"].startswith(("rpc", "collective", "auto")) and clocks[1]["error_bound_ns"] > 0
    out = tmp_path / "aligned"
    res = cli.run("align", *files, "-o", out)
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.splitlines()
    assert re.match(rf"tracemerge: 3 ranks, \d+ events in, \d+ out \(\d+ moved\), aligned by auto to rank 0 -> {out} "
                    r"\(rank0\.pt\.trace\.json\.gz, rank1\.pt\.trace\.json\.gz, rank2\.pt\.trace\.json\.gz\)$", lines[0])
    assert any(line.startswith("tracemerge: causality: 0 violations") for line in lines), lines
    assert {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files} == before  # inputs never changed
    assert sorted(os.listdir(out)) == [f"rank{r}.pt.trace.json.gz" for r in range(WORLD)]
    for r in range(WORLD):
        doc_in, doc_out = load_output(src / f"rank{r}.json.gz"), load_output(out / f"rank{r}.pt.trace.json.gz")
        assert list(doc_out) == list(doc_in)  # every top-level key, in torch's order
        assert {k: v for k, v in doc_out.items() if k not in ("traceEvents", "tracemerge")} == \
            {k: v for k, v in doc_in.items() if k not in ("traceEvents", "tracemerge")}
        ev_in, ev_out = doc_in["traceEvents"], doc_out["traceEvents"]
        assert len(ev_out) == len(ev_in) > 20
        assert [_without_times(e) for e in ev_out] == [_without_times(e) for e in ev_in]
        c = clocks[r]
        worst = 0.0
        for a, b in zip(ev_in, ev_out):
            if "ts" not in a:
                assert "ts" not in b
                continue
            want = _on_reference(c, _abs_ns(doc_in, a))
            worst = max(worst, abs(_abs_ns(doc_out, b) - want))
            if "dur" in a:
                end = _on_reference(c, _abs_ns(doc_in, a) + round(a["dur"] * US))
                worst = max(worst, abs(_abs_ns(doc_out, b) + round(b["dur"] * US) - end))
        assert worst <= 1 * US, (r, worst)
        block_in, block_out = doc_in["tracemerge"], doc_out["tracemerge"]
        for key in ("profile_start_ns", "profile_stop_ns"):
            assert abs(block_out[key] - _on_reference(c, block_in[key])) <= US
        for rec_in, rec_out in zip(block_in["rpcs"], block_out["rpcs"]):
            for key in (k for k in rec_in if k.endswith("_ns")):
                assert abs(rec_out[key] - _on_reference(c, rec_in[key])) <= US
        for side_in, side_out in zip(block_in["remote_sides"], block_out["remote_sides"]):  # the callee's clock
            peer = clocks[side_in["clock_rank"]]
            for call_in, call_out in zip(side_in.get("calls", []), side_out.get("calls", [])):
                assert abs(call_out["start_ns"] - _on_reference(peer, call_in["start_ns"])) <= US
        aligned = block_out["aligned"]
        assert (aligned["method"], aligned["reference"], aligned["offset"], aligned["drift_ppm"],
                aligned["error_bound"], aligned["unit"]) == \
            (c["method"], 0, c["offset_ns"], c["drift_ppm"], c["error_bound_ns"], "ns")
        assert aligned["from"] == [f"rank{r}.json.gz"]
    # the estimates hold the planted clocks within their bounds
    for r in (1, 2):
        t = clocks[r]["anchor_ns"]
        assert abs(clocks[r]["offset_ns"] - (truth[r].to_local(t) - t)) <= clocks[r]["error_bound_ns"]
    # the outputs are rank files on one clock: read again, every rank is where the reference is
    res = cli.run("offsets", *sorted(out.iterdir()), "--format", "json")
    assert res.exit_code == 0, res.stderr
    again = {c["rank"]: c for c in json.loads(res.stdout)["ranks"]}
    for r in (1, 2):
        assert abs(again[r]["offset_ns"]) <= again[r]["error_bound_ns"], again[r]


def test_hta_on_align_output_finds_the_ranks_where_the_truth_starts_them(skewed, tmp_path):
    TraceAnalysis = _hta()
    src, truth, originals = skewed
    files = [src / f"rank{r}.json.gz" for r in range(WORLD)]
    offsets = json.loads(cli.run("offsets", *files, "--format", "json").stdout)
    bound = {c["rank"]: c["error_bound_ns"] or 0 for c in offsets["ranks"]}
    out = tmp_path / "aligned"
    assert cli.run("align", *files, "-o", out).exit_code == 0
    trace = _hta_load(TraceAnalysis, out)
    assert sorted(trace.traces) == [0, 1, 2]
    # the capture ran on one machine: its own times are the true ones
    true_start = {r: min(_abs_ns(doc, e) for e in _hta_kept(doc)) for r, doc in originals.items()}
    for r in range(WORLD):
        assert len(trace.traces[r]) == len(_hta_kept(originals[r]))
        start = trace.get_trace_start_unixtime_ns(r) + int(trace.traces[r]["ts"].min()) * US
        assert abs(start - true_start[r]) <= bound[r] + US, (r, start - true_start[r], bound[r])
    # on the skewed files themselves, HTA's starts are off by the planted offsets
    raw = _hta_load(TraceAnalysis, src)
    off = raw.get_trace_start_unixtime_ns(2) + int(raw.traces[2]["ts"].min()) * US - true_start[2]
    assert abs(off - PLANTED[2][0]) < 1_000 * US


def _tb_profiler():
    try:
        from torch_tb_profiler import consts
        from torch_tb_profiler.profiler.data import RunProfileData
    except ImportError as e:  # the test extra: pip install 'tracemerge[test]'
        pytest.skip(f"torch-tb-profiler is not installed ({e}); pip install torch-tb-profiler==0.4.3")
    return consts.WORKER_PATTERN, RunProfileData


def test_tb_profiler_names_the_workers_of_align_output_and_starts_them_at_the_truth(skewed, captured, tmp_path):
    pattern, RunProfileData = _tb_profiler()
    src, _, _ = skewed
    files = [src / f"rank{r}.json.gz" for r in range(WORLD)]
    bound = {c["rank"]: c["error_bound_ns"] or 0 for c in json.loads(cli.run("offsets", *files, "--format", "json").stdout)["ranks"]}
    out = tmp_path / "aligned"
    assert cli.run("align", *files, "-o", out).exit_code == 0
    cache = str(tmp_path / "cache")
    for r in range(WORLD):
        name = f"rank{r}.pt.trace.json.gz"
        assert pattern.match(name).group(1) == f"rank{r}"  # the run's worker, as tb-profiler lists files
        aligned = RunProfileData.parse(f"rank{r}", None, str(out / name), cache)
        truth = RunProfileData.parse(f"rank{r}", None, str(captured / f"rank{r}.json.gz"), cache)
        skew = RunProfileData.parse(f"rank{r}", None, str(files[r]), cache)
        assert aligned.distributed_info["rank"] == truth.distributed_info["rank"] == r  # its distributed view's rank
        assert len(aligned.events) == len(truth.events) > 10
        # µs after the shared base, which the truth's files share too (one machine)
        assert abs(aligned.profiler_start_ts - truth.profiler_start_ts) * US <= bound[r] + US
        if r == 2:
            assert abs((skew.profiler_start_ts - truth.profiler_start_ts) * US - PLANTED[2][0]) < 1_000 * US


def test_the_readme_hta_snippet_runs_on_align_output(captured, tmp_path, monkeypatch):
    _hta()
    readme = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md"),
                  encoding="utf-8").read()
    section = readme.split("### `tracemerge align FILES... -o DIR`", 1)[1].split("\n### ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", section, re.S)[0]
    snippet = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    align_line = next(line for line in commands.splitlines() if line.startswith("tracemerge align"))
    args = align_line.split("#")[0].split()[2:]  # rank*.json.gz -o aligned/
    assert args == ["rank*.json.gz", "-o", "aligned/"]
    monkeypatch.chdir(tmp_path)
    assert cli.run("align", str(captured / "rank*.json.gz"), "-o", tmp_path / "aligned").exit_code == 0
    scope: dict = {}
    exec(snippet, scope)
    assert scope["analysis"].t.get_ranks() == [0, 1, 2]


# ---- plain torch.profiler traces, journals --------------------------------------------------

def _plain_cycles(directory, rank):
    """Two schedule cycles of plain torch.profiler traces of one process, named as cycle files."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    cycle = [0]

    def ready(prof):
        prof.export_chrome_trace(str(directory / f"rank{rank}.cycle{cycle[0]}.json"))
        cycle[0] += 1

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1, repeat=2),
                 on_trace_ready=ready) as prof:
        for _ in range(4):
            torch.mm(torch.ones(16, 16), torch.ones(16, 16))
            prof.step()
    return [directory / f"rank{rank}.cycle{n}.json" for n in range(2)]


def test_align_plain_torch_profiler_cycle_files_one_file_per_rank(tmp_path):
    pytest.importorskip("torch")
    src = tmp_path / "plain"
    src.mkdir()
    files = _plain_cycles(src, 0) + _plain_cycles(src, 1)
    out = tmp_path / "aligned"
    res = cli.run("align", *files, "-o", out, "--name", "rank{rank}_trace.json")
    assert res.exit_code == 0, res.stderr
    assert sorted(os.listdir(out)) == ["rank0_trace.json", "rank1_trace.json"]
    for r in (0, 1):
        cycles = [load_output(f) for f in files[2 * r:2 * r + 2]]
        doc = load_output(out / f"rank{r}_trace.json")
        assert [k for k in doc if k != "tracemerge"] == list(cycles[0])
        assert doc["tracemerge"]["rank"] == r and doc["tracemerge"]["aligned"]["from"] == \
            [f"rank{r}.cycle0.json", f"rank{r}.cycle1.json"]
        # one process, one clock: every event of both cycles, at the time it was written
        want = [e for c in cycles for e in c["traceEvents"]]
        assert len(doc["traceEvents"]) == len(want)
        for a, b in zip(want, doc["traceEvents"]):
            assert _without_times(a) == _without_times(b)
            if "ts" in a:
                assert abs(_abs_ns(doc, b) - _abs_ns(cycles[0], a)) <= 1
        assert int(HTA_RANK.search(_text(out / f"rank{r}_trace.json")).group(1)) == r


def test_align_a_rank_read_from_its_journal_is_said_not_invented(captured, tmp_path):
    doc = load_output(captured / "rank2.json.gz")
    block = doc["tracemerge"]
    meta = {k: block[k] for k in ("job_id", "rank", "world_size", "worker_name", "hostname", "boot_id", "pid",
                                  "profile_start_ns")}
    lines = [{"tracemerge_journal": 1, "meta": meta}] + [{"rpc": r} for r in block["rpcs"]] + \
        [{"alive_ns": block["profile_stop_ns"]}]
    journal = tmp_path / "rank2.journal"
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "aligned"
    res = cli.run("align", captured / "rank0.json.gz", captured / "rank1.json.gz", journal, "-o", out)
    assert res.exit_code == 0, res.stderr
    assert sorted(os.listdir(out)) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert "tracemerge: note: rank 2 was read from its journal alone" in res.stderr
    assert "2 ranks, " in res.stderr.splitlines()[0]


# ---- bad outputs and inputs ----------------------------------------------------------------------

def test_align_bad_outputs_are_one_line_errors_and_nothing_is_half_written(captured, tmp_path):
    files = [captured / f"rank{r}.json.gz" for r in range(WORLD)]
    res = cli.run("align", *files, "-o", tmp_path / "a", "--name", "trace.json.gz")
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1 and "{rank}" in res.stderr
    res = cli.run("align", *files, "-o", tmp_path / "a", "--name", "rank{rank}.txt")
    assert res.exit_code == 2 and "must end in" in res.stderr
    (tmp_path / "file").write_text("x")
    res = cli.run("align", *files, "-o", tmp_path / "file")
    assert res.exit_code == 5 and res.stderr.count("\n") == 1 and "not a directory" in res.stderr
    res = cli.run("align", *files, "-o", tmp_path / "missing" / "dir")
    assert res.exit_code == 5 and "does not exist" in res.stderr
    # one output there already: refused without --force, and no other output appears
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank1.pt.trace.json.gz").write_bytes(b"mine")
    res = cli.run("align", *files, "-o", out)
    assert res.exit_code == 5 and "rank1.pt.trace.json.gz: exists; pass --force" in res.stderr
    assert os.listdir(out) == ["rank1.pt.trace.json.gz"] and (out / "rank1.pt.trace.json.gz").read_bytes() == b"mine"
    res = cli.run("align", *files, "-o", out, "--force", "--ranks", "1,2")
    assert res.exit_code == 0, res.stderr
    assert sorted(os.listdir(out)) == ["rank1.pt.trace.json.gz", "rank2.pt.trace.json.gz"]
    assert load_output(out / "rank1.pt.trace.json.gz")["tracemerge"]["rank"] == 1
    # an output that would be an input: refused even with --force
    res = cli.run("align", *files, "-o", captured, "--name", "rank{rank}.json.gz", "--force")
    assert res.exit_code == 5 and "the output is also an input" in res.stderr
    # a bad input: exit 3 naming it, the directory never made
    bad = tmp_path / "rank9.json"
    bad.write_text('{"traceEvents": [{"ph": "X"')
    res = cli.run("align", files[0], bad, "-o", tmp_path / "never")
    assert res.exit_code == 3 and len(res.stderr.splitlines()) == 1
    assert not (tmp_path / "never").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tracemerge-align-")]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
