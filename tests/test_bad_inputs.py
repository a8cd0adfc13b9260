"""Every class of bad input of issue 16 (tests/corpus/bad_inputs.py) through combine to
.json and .pftrace, info, report and offsets: the documented exit code and line, never exit
1, no output left after an error, no event lost after a merge."""

import gzip
import json
import os
import shutil
import subprocess

import orjson
import pytest
from corpus.bad_inputs import CLASSES, COMMANDS, command_args, write_case, write_good
from support import cli
from support.paths import ROOT

PAIRS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "pairs")


def load(path):
    """A JSON file, also one nested 1,000 levels (orjson follows 1,024; json stops at ~990)."""
    with open(path, "rb") as f:
        data = f.read()
    return orjson.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def run_process(*args):
    """The command as its own process: what a deep-nesting input does depends on the C stack
    the command starts with, and in-process runs start deep inside pytest and hypothesis."""
    return cli.run(*args, timeout=300)


def check_run(bad, command, paths, tmp):
    """Run ``command`` on ``paths`` and check it ends as ``bad`` says; returns the result."""
    before = sorted(os.listdir(tmp))
    r = (run_process if bad.name == "args_deep" else cli.invoke)(*command_args(command, paths, tmp, bad))
    want = bad.outcome(command)
    where = f"{bad.name} {command}: exit {r.exit_code}\n{r.stderr}"
    assert r.exit_code != 1 and "Traceback" not in r.stderr and "internal error" not in r.stderr, where
    assert r.exit_code == want.code or r.exit_code in want.also_ok, where
    if r.exit_code:
        errors = [line for line in r.stderr.splitlines() if line.startswith("tracemerge: error: ")]
        assert len(errors) == 1 and want.text in errors[0], where
        if want.names_file and want.code == 3:
            assert any(p in errors[0] for p in paths), where
        assert sorted(os.listdir(tmp)) == before, where  # nothing written, no temporary file left
    else:
        if want.code == 0:
            assert want.text in r.output, where  # info prints a file's warnings under its name
        if command == "json":
            merged = load(os.path.join(tmp, "merged.json"))
            ev = merged["tracemerge"]["events"]
            assert len(merged["traceEvents"]) == ev["out"]
            assert ev["in"] + ev["added"] == ev["out"] + ev["filtered"] + ev["dropped"]
            if bad.name != "truncated":  # a cut file counts what was recovered
                assert ev["in"] == sum(len(load(p)["traceEvents"]) for p in paths)
    return r


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_corpus_pair(name, command, tmp_path):
    """The committed example of each class (tests/corpus/pairs/<class>/), the bad file second."""
    bad = CLASSES[name]
    src = os.path.join(PAIRS, name)
    paths = []
    for f in sorted(os.listdir(src)):
        shutil.copy(os.path.join(src, f), tmp_path / f)
        paths.append(str(tmp_path / f))
    check_run(bad, command, paths, str(tmp_path))


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_corpus_pair_is_what_the_class_makes(name, tmp_path):
    """The committed files are remade by make_corpus.py from the class's first value."""
    bad = CLASSES[name]
    made = write_case(str(tmp_path), bad, target=bad.targets[-1])
    for path in made:
        with open(path, "rb") as f, open(os.path.join(PAIRS, name, os.path.basename(path)), "rb") as g:
            assert f.read() == g.read(), path


def test_offset_beyond_int64_is_a_usage_error(tmp_path):
    paths = write_good(str(tmp_path))
    for args in (["combine", *paths, "-o", tmp_path / "o.json"], ["offsets", *paths], ["report", *paths]):
        r = cli.invoke(*args, "--offset", f"1={10**30}")
        assert r.exit_code == 2 and "--offset" in r.stderr and "out of range" in r.stderr, r.stderr
        assert not (tmp_path / "o.json").exists()


def test_report_warns_of_a_truncated_input(tmp_path):
    paths = write_case(str(tmp_path), CLASSES["truncated"], target=1, value=50)
    r = cli.invoke("report", *paths)
    assert r.exit_code == 0
    assert any(line.startswith("tracemerge: warning: ") and paths[1] in line and "truncated file" in line
               for line in r.stderr.splitlines()), r.stderr


def test_offsets_says_it_read_heads_only(tmp_path):
    paths = write_case(str(tmp_path), CLASSES["string_ts"], target=1)
    r = cli.invoke("offsets", *paths)
    assert r.exit_code == 0 and "events were not read" in r.stderr, r.stderr


@pytest.mark.parametrize("where", ["missing", "readonly"])
def test_output_directory_is_refused_before_reading_inputs(where, tmp_path):
    """A bad input and an unwritable output: the output is what is reported (exit 5), for
    every command that writes a file."""
    paths = write_case(str(tmp_path / "in"), CLASSES["string_ts"], target=1)
    target = tmp_path / "out"
    if where == "readonly":
        target.mkdir()
        read_only(target)
    try:
        for args in (["combine", *paths, "-o", target / "t.json"],
                     ["combine", *paths, "-o", target / "t.pftrace"],
                     ["combine", *paths, "-o", tmp_path / "t.json", f"--report={target / 'r.txt'}"],
                     ["report", *paths, "-o", target / "r.txt"],
                     ["report", *paths, "--html", target / "r.html"]):
            r = cli.invoke(*args)
            assert r.exit_code == 5, (args, r.stderr)
            assert str(target) in r.stderr and "is not a number" not in r.stderr, r.stderr
    finally:
        if target.exists():
            subprocess.run(["chattr", "-i", str(target)], capture_output=True, timeout=30)
            target.chmod(0o755)


def read_only(directory):
    """Make ``directory`` refuse new files, also to root (immutable when chattr can)."""
    directory.chmod(0o555)
    if os.access(directory, os.W_OK):  # root: permissions do not apply
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True, timeout=30).returncode:
            pytest.skip("cannot make a directory read-only here")


def test_malformed_event_in_a_later_rank_is_named_not_abandoned(tmp_path):
    """Rank 0 takes its worker a while; rank 1's bad event must be what is reported, not
    rank 0's worker giving up its turn (it used to be "internal error (Abandoned)")."""
    paths = write_case(str(tmp_path), CLASSES["string_ts"], target=1)
    docs = json.load(open(paths[0]))
    x = next(e for e in docs["traceEvents"] if e.get("ph") == "X")
    docs["traceEvents"] += [{**x, "ts": x["ts"] + i, "dur": 0.5} for i in range(150_000)]
    with open(paths[0], "w") as f:
        json.dump(docs, f)
    for out in ("o.json", "o.pftrace", "o.json.gz"):
        r = cli.run("combine", *paths, "-o", tmp_path / out, "-j", "2", timeout=300)
        assert r.exit_code == 3 and f"{paths[1]}: event " in r.stderr and "is not a number" in r.stderr, r.stderr
        assert sorted(os.listdir(tmp_path)) == ["rank0.json", "rank1.json"]


def test_default_inflation_bound_names_the_file(tmp_path):
    """Without --max-inflate: 64x the compressed size, at least 256 MiB. 300 MB of spaces
    after a real rank gzip to ~0.3 MB: refused once 256 MiB are out, before any parse."""
    import zlib
    paths = write_good(str(tmp_path))
    c = zlib.compressobj(9, wbits=31)
    with open(paths[1], "rb") as f:
        parts = [c.compress(f.read())]
    block = b" " * (1 << 20)
    parts += [c.compress(block) for _ in range(300)]
    parts.append(c.flush())
    bomb = tmp_path / "rank1.json.gz"
    bomb.write_bytes(b"".join(parts))
    os.unlink(paths[1])
    r = cli.invoke("info", paths[0], str(bomb))
    assert r.exit_code == 3 and f"{bomb}: the gzip stream inflates to more than 256 MiB" in r.stderr, r.stderr
    os.environ["TRACEMERGE_MAX_INFLATE"] = "0"  # lifted: read, the trailing blanks ignored
    try:
        r = cli.invoke("info", paths[0], str(bomb))
    finally:
        del os.environ["TRACEMERGE_MAX_INFLATE"]
    assert r.exit_code == 0, r.stderr


def test_report_reads_columns_without_per_event_objects(tmp_path):
    """report holds one rank at a time, as columns: no typed-reader struct per event (the
    1 GB rank's report peak: docs/performance.md, "Memory per worker")."""
    import numpy as np

    from tracemerge.inputs.chrome import read_columns, read_trace
    paths = write_good(str(tmp_path))
    for path in paths:
        lean, full = read_columns(path), read_trace(path)
        assert lean.events is None and full.events is not None
        for col in ("ph", "name", "cat", "pid", "tid", "ts", "dur"):
            assert np.array_equal(getattr(lean, col), getattr(full, col)), col
        assert list(lean.args) == list(full.args) and lean.names == full.names


def test_a_remote_side_time_out_of_range_is_named(tmp_path):
    # found by the property test: a callee side's time beyond int64 reached the clock model
    with gzip.open(os.path.join(ROOT, "samples", "rpc_profiling", "rank0.json.gz")) as f:
        doc = json.load(f)
    last = len(doc["tracemerge"]["remote_sides"][0]["calls"]) - 1
    doc["tracemerge"]["remote_sides"][0]["calls"][last]["start_ns"] = 10795485981415172285
    bad = tmp_path / "rank0.json"
    bad.write_text(json.dumps(doc))
    other = os.path.join(ROOT, "samples", "rpc_profiling", "rank1.json.gz")
    for args in (["combine", bad, other, "-o", tmp_path / "o.json"], ["offsets", bad, other], ["report", bad, other]):
        r = cli.invoke(*args)
        assert r.exit_code == 3, (args[0], r.stderr)
        assert r.stderr.strip() == (f"tracemerge: error: {bad}: tracemerge.remote_sides[0].calls[{last}]: 'start_ns' "
                                    "10795485981415172285 is out of range (beyond year 2116: 2**62 ns)")
    assert not (tmp_path / "o.json").exists()
