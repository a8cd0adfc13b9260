"""Names (issue 48, class 6): a file name of any bytes is read and written (the bytes kept
where a file or a terminal takes them, shown ``\\xff`` where the output is JSON or a message);
every path an output will take is checked before the work starts, its name's length too;
``report``, ``diff`` and ``whatif`` replace an existing output only with ``--force``, as
``combine`` does. Real processes, a UTF-8 locale that is strict about what it prints."""

import json
import os

import pytest
from support import cli, ranks

ENV = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}


def run(*args):
    done = cli.run(*args, env=ENV)
    return done.exit_code, done.stdout_bytes, done.stderr


@pytest.fixture()
def job(tmp_path):
    """rank0.json.gz and rank1-\\xff.json.gz (a name that is not UTF-8), one step each."""
    paths = []
    for r, name in ((0, b"rank0.json.gz"), (1, b"rank1-\xff.json.gz")):
        events = [ranks.x("ProfilerStep#1", 0, 5000, cat="user_annotation"), ranks.x("aten::add", 100, 1000)]
        path = os.path.join(os.fsencode(tmp_path), name)
        ranks.write(os.fsdecode(path), ranks.rank_file(events, r), gz=True)
        paths.append(path)
    return paths


def test_a_name_that_is_not_utf8(job, tmp_path):
    d = os.fsencode(tmp_path)
    shown = os.fsdecode(job[1]).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    assert shown.endswith("rank1-\\xff.json.gz")
    for out in (b"m.json", b"m.pftrace", b"m.json.gz"):
        code, _, err = run("combine", *job, "-o", os.path.join(d, out))
        assert code == 0, err
    summary = json.loads(open(os.path.join(d, b"m.json"), "rb").read())["tracemerge"]
    assert shown in [i["path"] for i in summary["inputs"]]
    # the report beside an output whose own name is not UTF-8
    code, _, err = run("combine", *job, "-o", os.path.join(d, b"n\xfe.json"), "--report")
    assert code == 0, err
    assert os.path.isfile(os.path.join(d, b"n\xfe.report.txt"))
    for args in (["report", "--format", "json"], ["offsets", "--format", "json"]):
        code, out, err = run(*args, *job)
        assert code == 0, (args, err)
        text = out.decode()            # UTF-8: JSON holds the name escaped
        json.loads(text)
    code, out, err = run("info", *job)
    assert code == 0, err
    assert job[1] in out            # a terminal gets the name's own bytes, as ls prints it
    code, _, err = run("export", *job, "-o", os.path.join(d, b"t"))
    assert code == 0, err
    assert shown in json.loads(open(os.path.join(d, b"t", b"tracemerge.json"), "rb").read())["inputs"][1]["path"]
    code, out, err = run("whatif", *job, "--speedup", "aten::add=2", "--format", "json")
    assert code == 0, err
    # align: a rank file per input, each block naming the files it came from
    code, _, err = run("align", *job, "-o", os.path.join(d, b"aligned-\xfe"))
    assert code == 0, err
    written = sorted(os.listdir(os.path.join(d, b"aligned-\xfe")))
    assert len(written) == 2, written
    blocks = [ranks.load_output(os.fsdecode(os.path.join(d, b"aligned-\xfe", w)))["tracemerge"] for w in written]
    assert [b["aligned"]["from"] for b in blocks] == [["rank0.json.gz"], ["rank1-\\xff.json.gz"]]
    code, _, err = run("info", os.path.join(d, b"rank9-\xff.json.gz"))
    assert code == 3 and "rank9-\\xff.json.gz: cannot read" in err, err


def test_every_output_path_checked_before_the_work(job, tmp_path):
    """NAME.json fits the filesystem's name limit, NAME.report.txt does not: refused before
    the merge, with nothing written (the trace used to be written, then exit 5)."""
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    stem = "x" * (limit - 8)
    out = tmp_path / f"{stem}.json"
    code, _, err = run("combine", *job, "-o", str(out), "--report")
    assert code == 5 and "file name" in err and "report.txt" in err, err
    assert sorted(os.listdir(tmp_path)) == sorted(os.fsdecode(p).split("/")[-1] for p in job)
    code, _, err = run("combine", *job, "-o", str(out), "--report", "--force")   # its temporary name too
    assert code == 5 and "file name" in err, err
    assert sorted(os.listdir(tmp_path)) == sorted(os.fsdecode(p).split("/")[-1] for p in job)
    html = tmp_path / ("h" * (limit - 4) + ".html")
    code, _, err = run("report", *job, "-o", str(tmp_path / "r.txt"), "--html", str(html))
    assert code == 5 and str(html) in err, err
    assert not (tmp_path / "r.txt").exists()
    code, _, err = run("export", *job, "-o", str(tmp_path / ("e" * (limit - 10))))
    assert code == 5 and "file name" in err, err
    # one output named twice
    code, _, err = run("report", *job, "-o", str(tmp_path / "same.html"), "--html", str(tmp_path / "same.html"))
    assert code == 2, err
    assert not (tmp_path / "same.html").exists()


@pytest.mark.parametrize("command", [["report"], ["whatif", "--speedup", "aten::add=2"], ["diff"]])
def test_existing_output_needs_force(job, tmp_path, command):
    target = tmp_path / "out.txt"
    target.write_bytes(b"keep me")
    inputs = [job[0], job[1]] if command != ["diff"] else [job[0], job[1]]
    code, _, err = run(command[0], *inputs, *command[1:], "-o", str(target))
    assert code == 5 and "--force" in err, err
    assert target.read_bytes() == b"keep me"
    if command[0] != "diff":
        code, _, err = run(command[0], *inputs, *command[1:], "--html" if command[0] == "report" else "-q",
                           *([str(target)] if command[0] == "report" else []), "-o", str(tmp_path / "new.txt"))
        if command[0] == "report":
            assert code == 5 and "--force" in err, err
            assert not (tmp_path / "new.txt").exists()
    code, _, err = run(command[0], *inputs, *command[1:], "-o", str(target), "--force")
    assert code == 0, err
    assert target.read_bytes() != b"keep me"
