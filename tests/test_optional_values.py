"""The rule for options whose value may be left out (docs/errors.md, "Optional values"):
a bare ``--report`` never takes the next word, which is an input. It once took the first
rank file as the report's path and, with ``--force``, overwrote that input with the report."""

import glob
import hashlib
import json
import os
import shutil

import pytest
from support import cli
from support.paths import ROOT

SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "rpc_profiling", "rank*.json.gz")))


@pytest.fixture
def ranks(tmp_path):
    """The two sample rank files, copied where the command may write beside them."""
    paths = []
    for p in SAMPLES:
        shutil.copy(p, tmp_path / os.path.basename(p))
        paths.append(str(tmp_path / os.path.basename(p)))
    return paths


def digests(paths):
    return {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in paths}


@pytest.mark.parametrize("shape", ["before", "between", "cluster", "dashdash", "existing_out"])
def test_a_bare_report_leaves_every_input_an_input(ranks, tmp_path, shape):
    out = str(tmp_path / "out.json")
    if shape == "existing_out":
        with open(out, "w") as f:
            f.write("{}")
    argv = {
        "before": ["combine", "-o", out, "--force", "--report", *ranks],
        "between": ["combine", ranks[0], "--report", ranks[1], "-o", out, "--force"],
        "cluster": ["combine", "-qo", out, "--force", "--report", *ranks],
        "dashdash": ["combine", "-o", out, "--report", "--force", "--", *ranks],
        "existing_out": ["combine", "-o", out, "--force", "--report", *ranks],
    }[shape]
    before = digests(ranks)
    r = cli.run(*argv)
    assert digests(ranks) == before, "an input was changed"
    assert r.exit_code == 0, r.stderr
    with open(out) as f:
        summary = json.load(f)["tracemerge"]
    assert sorted(i["rank"] for i in summary["inputs"]) == [0, 1]
    with open(tmp_path / "out.report.txt") as f:
        assert "rpc_sync#udf_with_ops(worker0 -> worker1)" in f.read()


def test_report_path_given_with_equals(ranks, tmp_path):
    out, md = str(tmp_path / "out.json"), str(tmp_path / "r.md")
    before = digests(ranks)
    r = cli.run("combine", *ranks, "-o", out, f"--report={md}")
    assert r.exit_code == 0, r.stderr
    assert digests(ranks) == before
    with open(md) as f:
        assert f.read().lstrip().startswith(("#", "|"))  # Markdown, picked by the suffix
    assert not os.path.exists(tmp_path / "out.report.txt")


def test_a_word_after_bare_report_that_is_no_trace_gets_the_hint(ranks, tmp_path):
    out = str(tmp_path / "out.json")
    r = cli.run("combine", *ranks, "-o", out, "--report", str(tmp_path / "r.md"))
    err = r.stderr
    assert r.exit_code == 3
    assert len(err.strip().splitlines()) == 1
    assert "r.md" in err and "--report takes a value only as --report=" in err
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in ranks)  # nothing written


def test_report_equal_to_an_input_is_refused_and_the_input_kept(ranks, tmp_path):
    out = str(tmp_path / "out.json")
    before = digests(ranks)
    r = cli.run("combine", *ranks, "-o", out, "--force", f"--report={ranks[0]}")
    assert r.exit_code == 5
    assert "also an input" in r.stderr
    assert digests(ranks) == before
    assert not os.path.exists(out)


def test_overview_takes_a_number_but_never_a_file(ranks, tmp_path):
    counted = {}
    for name, extra in {"number": ["--overview", "0"], "bare": ["--overview"]}.items():
        out = str(tmp_path / f"{name}.json")
        r = cli.run("combine", "-o", out, *extra, *ranks)
        assert r.exit_code == 0, r.stderr
        with open(out) as f:
            counted[name] = json.load(f)["tracemerge"]["events"]
    # a threshold of 0 keeps every complete event, the default one leaves short ones out
    assert counted["number"]["filtered"] == 0 < counted["bare"]["filtered"]
    r = cli.run("combine", *ranks, "-o", str(tmp_path / "nan.json"), "--overview", "nan")
    assert r.exit_code == 2 and "finite" in r.stderr
