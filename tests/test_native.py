"""The compiled core against the Python path (the reference): same columns, same bytes, or
the kernel declines and the Python path reads the rank."""

import glob
import gzip
import json
import os
import subprocess
import sys

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import cli, gen_kineto

from fuzz.differential import check_bytes
from tracemerge import native
from tracemerge.model import ARG_ID_KEYS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_core = pytest.mark.skipif(native.active() != "native", reason="the compiled core is not active")


def _bytes(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if path.endswith(".gz") else data


SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*", "*.json*")))
CORPUS = sorted(p for p in glob.glob(os.path.join(ROOT, "tests", "corpus", "*.json*")) if not p.endswith(".gz"))


def test_active_core_follows_the_environment(monkeypatch):
    monkeypatch.setenv(native.ENV, "python")
    assert native.active() == "python"
    assert native.describe().startswith("core: python")
    monkeypatch.delenv(native.ENV)
    assert native.active() == ("native" if native._core is not None else "python")


def test_the_older_name_of_the_environment_variable_still_selects_the_core(monkeypatch):
    monkeypatch.delenv(native.ENV, raising=False)
    monkeypatch.setenv("TRACEMERGE_KERNEL", "python")
    assert native.active() == "python"
    monkeypatch.setenv(native.ENV, "native")  # the new name wins where both are set
    assert native.active() == ("native" if native._core is not None else "python")


@needs_core
@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_samples_are_taken_and_the_same(path):
    assert check_bytes(_bytes(path)) == "same"


@needs_core
@pytest.mark.parametrize("path", CORPUS, ids=os.path.basename)
def test_corpus_same_or_declined(path):
    # malformed files must be declined (the Python path reports them); the others the same
    result = check_bytes(_bytes(path), os.path.basename(path))
    assert result == "same" or result == "python error" or result.startswith("declined")


@needs_core
def test_generated_ranks_are_the_same(tmp_path):
    for args in (["--rank-files"], ["--seed", "7"]):
        out = tmp_path / args[0].strip("-")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "gen_kineto.py"), str(out), "--ranks", "2",
                        "--mb", "2", *args], check=True, capture_output=True)
        files = sorted(out.iterdir())
        assert files
        for f in files:
            assert check_bytes(f.read_bytes(), f.name) == "same", f


@needs_core
@pytest.mark.parametrize("event, reason", [
    ({"ph": "X", "name": "a\\u00e9", "ts": 1, "dur": 1, "pid": 1, "tid": 1}, "escaped"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "id": "7"}, "flow id"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"x": {"y": 1}}}, "nested"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"External id": "5"}}, "args id"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "zzz": 1}, "does not know"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1.5, "tid": 1}, "pid or tid"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "tts": 1.5}, "re-encode"),
])
def test_what_the_kernel_does_not_take_is_declined(event, reason):
    text = json.dumps({"traceEvents": [event]}, ensure_ascii=False)
    text = text.replace("\\\\u00e9", "\\u00e9")
    result = check_bytes(text.encode())
    assert result.startswith("declined") and reason in result, result


@needs_core
def test_repeated_key_is_declined():
    data = b'{"traceEvents": [{"ph": "X", "name": "a", "name": "b", "ts": 1, "pid": 1, "tid": 1}]}'
    assert check_bytes(data).startswith("declined: a repeated key")


@needs_core
def test_an_args_id_key_read_from_the_scan_is_the_decoded_value(tmp_path):
    """The id keys' values the scan recorded (the report's correlations) are what decoding
    the args gives: the last of a repeated key, the key's absence, an event without args,
    and another id key beside it told apart."""
    events = [{"ph": "X", "name": "k", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": a}
              for a in ({"correlation": 7}, {"External id": 3}, None, {"correlation": 0, "External id": 9})]
    text = json.dumps({"traceEvents": events})
    text = text.replace('{"correlation": 7}', '{"correlation": 7, "x": "correlatio", "correlation": 8}')
    path = tmp_path / "t.json"
    path.write_text(text)
    trace, core = native.read_rank(str(path))
    assert core == "native"
    idx = [3, 2, 1, 0, 0]
    assert list(trace.args.key_values(idx, "correlation", missing="absent", no_object="none")) == [
        0, "none", "absent", 8, 8]
    assert list(trace.args.key_values(idx, "External id")) == [9, msgspec.UNSET, 3, msgspec.UNSET, msgspec.UNSET]
    assert check_bytes(text.encode()) == "same"


# ---- hypothesis: random traces through both paths -------------------------------------

PLAIN = st.one_of(st.sampled_from(["aten::mm", "ProfilerStep#1", "é ü", "{", "u\u2028", "", "0", "1",
                                   "process_name", "thread_name", "process_sort_index"]),
                  st.text(st.characters(blacklist_characters='"\\', blacklist_categories=["Cc", "Cs"]), max_size=6))
NAMES = st.one_of(PLAIN, PLAIN, PLAIN, PLAIN, st.sampled_from(["a\"b", "x\\y", "tab\t"]), st.text(max_size=6))
IDS = st.one_of(st.integers(0, 2**32 + 5), st.integers(0, 2**32 + 5), st.integers(-5, 2**63 - 1),
                st.sampled_from(["7", 1.5, None, True]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False),
                    NAMES)
ARGS = st.one_of(
    st.none(),
    st.dictionaries(st.one_of(st.sampled_from([*ARG_ID_KEYS, "name", "sort_index", "Input Dims", "rpc_id"]), NAMES),
                    st.one_of(SCALARS, st.integers(0, 10**19), st.lists(st.integers(0, 9), max_size=3),
                              st.lists(st.lists(st.integers(0, 9), max_size=2), max_size=2)),
                    max_size=4),
    st.just({"nested": {"External id": 3}}), st.just([1, 2]))
GOOD_TIMES = st.one_of(st.integers(0, 10**13), st.floats(0, 1e13, allow_nan=False),
                       st.decimals(0, 10**12, places=3).map(float), st.decimals(0, 10**9, places=6).map(str).map(float))
TIMES = st.one_of(GOOD_TIMES, st.none(), st.just(-1), st.just("5"))


@st.composite
def events(draw, wild):
    """An event: with ``wild`` anything goes (most such traces are errors for both paths),
    else the values a valid trace has, in every spelling the kernel must handle."""
    phs = ["X", "X", "X", "i", "M", "s", "f", "B", "E", "C"] + (["é", ""] if wild else [])
    e = {"ph": draw(st.sampled_from(phs))}
    names = NAMES if wild else PLAIN
    if draw(st.booleans()):
        e["cat"] = draw(st.one_of(names, st.none()))
    if e["ph"] != "E" or draw(st.booleans()):
        e["name"] = draw(st.one_of(NAMES, NAMES, st.none()) if wild else PLAIN)
    for key, values in (("pid", st.one_of(st.integers(-3, 2**40), names)),
                        ("tid", st.one_of(st.integers(-3, 2**40), names, st.none(), *([st.just(1.0)] if wild else [])))):
        if draw(st.integers(0, 9)):
            e[key] = draw(values)
    if e["ph"] != "M" or draw(st.booleans()):
        e["ts"] = draw(TIMES if wild else GOOD_TIMES)
    if draw(st.booleans()):
        e["dur"] = draw(TIMES if wild else GOOD_TIMES)
    if draw(st.booleans()):
        e["args"] = draw(ARGS)
    extra = ["id", "bind_id", "bp", "s", "cname", "flow_in", "tts", "sf"] + (["id2"] if wild else [])
    for key in draw(st.lists(st.sampled_from(extra),
                             max_size=3, unique=True)):
        e[key] = draw(IDS) if key in ("id", "bind_id") else draw(SCALARS)
    order = draw(st.permutations(list(e)))
    return {k: e[k] for k in order}


@st.composite
def documents(draw):
    wild = draw(st.integers(0, 5)) == 0
    doc = {"schemaVersion": 1}
    if draw(st.booleans()):
        doc["baseTimeNanoseconds"] = draw(st.one_of(st.integers(0, 10**18), st.just(1.5)) if wild else
                                          st.integers(0, 10**18))
    if draw(st.booleans()):
        doc["tracemerge"] = draw(st.one_of(st.just({"rank": 1}), st.just([])) if wild else st.just({"rank": 1}))
    doc["traceEvents"] = draw(st.lists(events(wild), max_size=8))
    doc["traceName"] = "x"
    indent = draw(st.sampled_from([None, 0, 2]))
    text = json.dumps(doc, indent=indent, ensure_ascii=wild and draw(st.booleans()))
    if draw(st.booleans()):  # Kineto's spacing: ", " and ": " inside args
        text = text.replace(",\n", ", ")
    return text.encode()


@needs_core
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_hypothesis_traces_same_or_declined(data):
    result = check_bytes(data)
    assert result == "same" or result == "python error" or result.startswith("declined")


@needs_core
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([b"", b'{"traceEvents": [', b'{"traceEvents": [{"ph": "X", ']))
def test_arbitrary_bytes_never_disagree(tail, head):
    result = check_bytes(head + tail)
    assert result in ("same", "python error") or result.startswith("declined")


def test_invalid_utf8_in_a_string_is_a_one_line_error(tmp_path):
    # found by fuzz/run: msgspec raises UnicodeDecodeError (not DecodeError) for it, which
    # the reader did not catch: "internal error", exit 1
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a\xff", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}')
    run = cli.run("combine", path, "-o", tmp_path / "o.json")
    assert run.exit_code == 3, run.stderr
    assert "not valid UTF-8" in run.stderr and "internal error" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("base, ts", [(17908570260000400000, 1), (9_000_000_000_000_000_000, 7e15)])
def test_times_beyond_int64_are_a_one_line_error(tmp_path, base, ts):
    # found by fuzz/run: a baseTimeNanoseconds beyond int64 was an OverflowError ("internal
    # error", exit 1); a sum beyond int64 would have wrapped around
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"baseTimeNanoseconds": base, "traceEvents": [
        {"ph": "X", "name": "a", "ts": ts, "dur": 1, "pid": 1, "tid": 1}]}))
    run = cli.run("combine", path, "-o", tmp_path / "o.json")
    assert run.exit_code == 3, run.stderr
    assert "out of range" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert check_bytes(path.read_bytes()) == "python error"


# ---- end to end: the whole combine under both cores ---------------------------------

def _combine(files, out, env_core, *options):
    env = dict(os.environ)
    env.pop(native.ENV, None)
    if env_core == "python":
        env[native.ENV] = "python"
    return cli.run("combine", *files, "-o", out, *options, env=env)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return gen_kineto.generate(str(tmp_path_factory.mktemp("kranks")), 3, 0.6, seed=5, rank_files=True, jobs=1)


@needs_core
@pytest.mark.parametrize("suffix, options", [
    (".json", ["--jobs", "2"]), (".json", ["--jobs", "1"]), (".json.gz", []), (".pftrace", []),
    (".json", ["--window", "1:40", "--min-duration", "3", "--drop-category", "python_function"]),
    (".pftrace", ["--min-duration", "3"]), (".json", ["--align", "none", "--ranks", "0,2"]),
])
def test_combine_is_the_same_bytes_under_both_cores(tmp_path, generated, suffix, options):
    for files in (generated, sorted(glob.glob(os.path.join(ROOT, "samples", "rl_agent", "*.json.gz")))):
        native_out, python_out = tmp_path / f"n{suffix}", tmp_path / f"p{suffix}"
        a = _combine(files, native_out, "native", "--force", *options)
        b = _combine(files, python_out, "python", "--force", *options)
        assert a.exit_code == b.exit_code == 0, a.stderr + b.stderr
        assert native_out.read_bytes() == python_out.read_bytes()
        kept = 2 if "--ranks" in options else len(files)
        # rl_agent's rank 0 has calls in flight together: the kernel writes them to lanes too
        assert f"core: native ({kept} of {kept} ranks)" in a.stderr
        assert "core: python" in b.stderr and "TRACEMERGE_CORE=python" in b.stderr


@needs_core
def test_spans_moved_to_lanes_are_written_by_the_kernel(tmp_path):
    # rl_agent's rank 0 has calls in flight together, and the recipe's workers cross spans
    for sample in ("rl_agent", "rpc_profiling"):
        files = sorted(glob.glob(os.path.join(ROOT, "samples", sample, "*.json.gz")))
        a = _combine(files, tmp_path / "n.json", "native", "--force")
        b = _combine(files, tmp_path / "p.json", "python", "--force")
        assert a.exit_code == b.exit_code == 0, a.stderr + b.stderr
        assert f"core: native ({len(files)} of {len(files)} ranks)" in a.stderr
        doc = json.loads((tmp_path / "n.json").read_text())
        assert doc["tracemerge"]["lanes"]["spans"] > 0
        lane_tids = {(e["pid"], e["tid"]) for e in doc["traceEvents"]
                     if e.get("ph") == "X" and "(overlap" in str(e.get("tid"))}
        assert len(lane_tids) == doc["tracemerge"]["lanes"]["lanes"]
        assert (tmp_path / "n.json").read_bytes() == (tmp_path / "p.json").read_bytes()


@needs_core
def test_a_rank_the_kernel_declines_falls_back_and_is_counted(tmp_path, generated):
    odd = tmp_path / "odd.json"
    with open(generated[1], "rb") as f:
        doc = json.loads(f.read())
    doc["traceEvents"][5]["name"] = "caf\u00e9"
    odd.write_text(json.dumps(doc, indent=1))  # ensure_ascii: the name is spelled with a \u escape
    files = [generated[0], odd, generated[2]]
    a = _combine(files, tmp_path / "n.json", "native")
    b = _combine(files, tmp_path / "p.json", "python")
    assert a.exit_code == b.exit_code == 0, a.stderr + b.stderr
    assert (tmp_path / "n.json").read_bytes() == (tmp_path / "p.json").read_bytes()
    assert f"core: native (2 of 3 ranks); {odd} read by the Python path: an escaped name or cat" in a.stderr


@needs_core
@pytest.mark.parametrize("name", ["missing_ts.json", "negative_dur.json", "truncated.json", "trailing_zeros.json",
                                  "not_json.json", "wrong_shape_events_object.json"])
def test_bad_inputs_give_the_same_error_or_output_under_both_cores(tmp_path, name):
    files = [os.path.join(ROOT, "tests", "corpus", name)]
    a = _combine(files, tmp_path / "n.json", "native", "--rank-from", "order")
    b = _combine(files, tmp_path / "p.json", "python", "--rank-from", "order")
    assert a.exit_code == b.exit_code
    if a.exit_code == 0:
        assert (tmp_path / "n.json").read_bytes() == (tmp_path / "p.json").read_bytes()
    else:
        assert a.stderr == b.stderr


@needs_core
def test_traces_a_job_keeps_in_memory_are_written_the_same(tmp_path, monkeypatch, generated):
    from tracemerge import AlignRequest, Job
    from tracemerge.merge.combine import write
    outs = {}
    for core in ("native", "python"):
        monkeypatch.setenv(native.ENV, core)
        job = Job.open(generated, align=AlignRequest())  # small inputs: the events stay in memory
        assert job.traces, "the job was expected to keep its traces"
        outs[core] = tmp_path / f"{core}.json"
        written = write(job, None, str(outs[core]))
        assert {c for _, c in written.cores} == {core}
    assert outs["native"].read_bytes() == outs["python"].read_bytes()


def test_without_a_compiler_the_build_succeeds_and_says_so_in_one_line(tmp_path):
    env = dict(os.environ, CC="false", CXX="false", LDSHARED="false")
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                          "--build-temp", str(tmp_path / "tmp")], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if "compiled core" in line]
    assert len(lines) == 1 and lines[0].startswith("tracemerge: the compiled core was not built (")
    assert lines[0].endswith("the pure-Python core will be used")
    assert not list(tmp_path.rglob("_core*.so"))


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_a_number_beyond_a_double_in_args_is_a_one_line_error(tmp_path, suffix):
    # found by fuzz/run: both readers keep args raw; decoding them for the output (all of a
    # .pftrace's, a process_name's for JSON) raised msgspec's ValidationError: "internal error"
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, '
                    '"args": {"name": "x", "n": 1e4002763}}, {"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, '
                    '"tid": 1, "args": {"n": 1e4002763}}]}')
    for core in ("native", "python"):
        run = _combine([path], tmp_path / f"o{suffix}", core, "--rank-from", "order")
        assert run.exit_code == 3, run.stderr
        assert f"{path}: an event's args cannot be decoded: Number out of range" in run.stderr
        assert "internal error" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
        assert not (tmp_path / f"o{suffix}").exists()
