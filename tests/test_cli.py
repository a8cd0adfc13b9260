import glob
import json
import os

import pytest
from support import cli
from support.cli import invoke
from support.paths import SAMPLES as SAMPLE_SETS
from support.ranks import kineto, load_output, write, x

import tracemerge

SAMPLES = sorted(glob.glob(os.path.join(SAMPLE_SETS, "kineto_rpc", "worker*.json.gz")))


def test_version_and_help():
    first, core = invoke("--version").output.strip().splitlines()
    assert first.endswith(tracemerge.__version__)
    assert core.startswith(("core: native", "core: python"))
    out = invoke("combine", "--help").output
    for option in ("--output", "--align", "--reference", "--rank-from", "--force", "--offset"):
        assert option in out


def test_combine_bundled_samples(tmp_path):
    out = tmp_path / "trace.json"
    r = invoke("combine", *SAMPLES, "-o", out)
    assert r.exit_code == 0, r.output
    doc = load_output(out)
    inputs = sum(len(load_output(p)["traceEvents"]) for p in SAMPLES)
    assert doc["tracemerge"]["events"]["in"] == inputs
    assert "events in" in r.output  # the one-line account goes to stderr (mixed in by CliRunner)
    ranks = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            ranks.setdefault(e["args"]["name"].split(" · ")[0], set()).add(e["pid"])
    assert set(ranks) == {"rank 0", "rank 1"} and not ranks["rank 0"] & ranks["rank 1"]


def test_combine_gzip_and_stdout(tmp_path):
    out = tmp_path / "trace.json.gz"
    assert invoke("combine", *SAMPLES, "-o", out).exit_code == 0
    gz = load_output(out)
    r = cli.run("combine", *SAMPLES, "-o", "-", timeout=60)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["traceEvents"] == gz["traceEvents"]


def test_exit_codes(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    bad = tmp_path / "rank1.json"
    bad.write_text("{")
    r = invoke("combine", good, bad, "-o", tmp_path / "o.json")
    assert r.exit_code == 3 and f"{bad}: not valid JSON" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o.json").exists()
    dup = write(tmp_path / "other_rank0.json", kineto([x("a", 1, 1)]))
    r = invoke("combine", good, dup, "-o", tmp_path / "o.json")
    assert r.exit_code == 4 and "also claimed" in r.output
    r = invoke("combine", good, "-o", good)
    assert r.exit_code == 5 and "also an input" in r.output
    assert invoke("combine", good, "--align", "bogus", "-o", tmp_path / "o.json").exit_code == 2
    assert invoke("combine", good, "--offset", "x", "-o", tmp_path / "o.json").exit_code == 2


def test_existing_output_needs_force(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    out = tmp_path / "o.json"
    out.write_text("keep me")
    r = invoke("combine", good, "-o", out)
    assert r.exit_code == 5 and out.read_text() == "keep me"
    assert invoke("combine", good, "-o", out, "--force").exit_code == 0
    assert load_output(out)["tracemerge"]["events"]["in"] == 1


def test_failed_write_leaves_nothing(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    bad = write(tmp_path / "rank1.json", kineto([x("a", 1, 1)]))

    # fail in the middle of writing: the second rank is unreadable by the time it is streamed
    from tracemerge.job import Job
    from tracemerge.merge.combine import combine
    s = Job.open([good, bad])
    s.traces.clear()  # read again from the files at write time
    os.unlink(bad)
    with pytest.raises(Exception):
        combine(s, s.align("wall"), str(tmp_path / "o.json"))
    assert sorted(os.listdir(tmp_path)) == ["rank0.json"]


def test_info(tmp_path):
    r = invoke("info", *SAMPLES)
    assert r.exit_code == 0
    assert "rank 0 (from filename)" in r.output and "rank 1 (from filename)" in r.output
    assert "profiler start from PyTorch Profiler (0)" in r.output


def test_usage_errors_are_one_line_at_every_level():
    for args in (["--bogus"], ["nosuch"], ["combine", "--bogus"]):
        r = cli.run(*args, timeout=60)
        assert r.exit_code == 2
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("tracemerge: error: ")
