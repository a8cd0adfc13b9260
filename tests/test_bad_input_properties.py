"""Hypothesis over every class of bad input (tests/corpus/bad_inputs.py): any rank file
(first or not), any event or record, any of the class's bad values, any of the five
commands — the documented outcome, never exit 1, nothing left after an error, no event lost.

TRACEMERGE_FUZZ_EXAMPLES sets the examples per class (default 6; the adversarial run of
issue 16 is ~60)."""

import gzip
import os
import tempfile

import pytest
from corpus.bad_inputs import CLASSES, COMMANDS, command_args, write_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import invoke
from test_bad_inputs import check_run, load

SETTINGS = settings(max_examples=int(os.environ.get("TRACEMERGE_FUZZ_EXAMPLES", 6)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("name", sorted(CLASSES))
@SETTINGS
@given(data=st.data())
def test_every_member_of_every_class_ends_as_documented(name, data):
    bad = CLASSES[name]
    target = data.draw(st.sampled_from(bad.targets), label="target")
    pick = data.draw(st.integers(0, 40), label="pick")
    value = data.draw(st.sampled_from(bad.values), label="value")
    command = data.draw(st.sampled_from(COMMANDS), label="command")
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_case(tmp, bad, target, pick, value)
        check_run(bad, command, paths, tmp)


@st.composite
def mutated_bytes(draw):
    """The sample's rank 1 file with a few random edits: bytes replaced, removed, inserted
    (from JSON's own alphabet, so the edits often keep it parseable), or a key's value
    swapped for another JSON value."""
    data = bytearray(CLASSES["truncated"].make(1, 0, 50)[0])  # rank 0's bytes, intact
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["replace", "delete", "insert"]))
        piece = draw(st.sampled_from([b"", b"0", b"-", b"1e400", b'"', b"[", b"]", b"{", b"}", b",", b":", b"null",
                                      b"true", b"\\u", b"\xff", b"9" * 30, b'"ph"', b'"ts"', b'{"a":[]}']))
        if kind == "replace":
            data[at:at + len(piece) or 1] = piece
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 20))]
        else:
            data[at:at] = piece
    return bytes(data)


@SETTINGS
@given(data=mutated_bytes(), command=st.sampled_from(COMMANDS), target=st.sampled_from([0, 1]),
       codec=st.sampled_from(["", "gzip", "zstd"]), cut=st.floats(0.5, 1.0))
def test_random_edits_never_end_in_an_internal_error(data, command, target, codec, cut):
    """What the adversarial run did: any edit, any command, plain or compressed (and the
    compressed stream possibly cut) — a documented exit code, one error line naming the
    file, nothing left after an error, events conserved after a merge."""
    if codec == "gzip":
        data = gzip.compress(data, 1, mtime=0)
    elif codec == "zstd":
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)
    if codec and cut < 0.9:
        data = data[:max(8, int(len(data) * cut))]
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_case(tmp, CLASSES["truncated"], 1, 0, 50)
        with open(paths[target], "wb") as f:
            f.write(data)
        before = sorted(os.listdir(tmp))
        r = invoke(*command_args(command, paths, tmp))
        where = f"{command}: exit {r.exit_code}\n{r.stderr}"
        assert r.exit_code in (0, 2, 3, 4), where
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, where
        if r.exit_code:
            errors = [line for line in r.stderr.splitlines() if line.startswith("tracemerge: error: ")]
            assert len(errors) == 1, where
            assert sorted(os.listdir(tmp)) == before, where
        elif command == "json":
            merged = load(os.path.join(tmp, "merged.json"))
            ev = merged["tracemerge"]["events"]
            assert len(merged["traceEvents"]) == ev["out"]
            assert ev["in"] + ev["added"] == ev["out"] + ev["filtered"] + ev["dropped"]
