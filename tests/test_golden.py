"""Every output kind against its golden file: what the commands write for three sample sets
(JSON, .json.gz decompressed, .pftrace with and without a selection, the report in each
format and as HTML, the offsets), compared with tests/golden/<set>/<file>. A difference
fails with a unified diff of the first differing lines.

The golden files are the outputs themselves, laid out to be read and diffed but losslessly
(tests/support/golden.py): equal golden text means equal output bytes. The merged JSON has
one event per line, a .pftrace one packet per line with its fields named; the .json.gz
output is compared with the JSON's golden file. They were made from the outputs whose
sha256 this module pinned before: those of commit 1aff0ac, with the summary's rpc_sides
gained drawn and spans_missing, its causality counting the drawn span pairs, and 0 as the
tables' CPU total % of asynchronous rows, as torch shows it (main at 7829fc8).

A change of output on purpose regenerates them, in the same commit, saying why::

    python -m pytest tests/test_golden.py --update-golden
"""

import gzip
import os

import pytest
from support import cli, golden
from support.paths import ROOT

GOLDEN = os.path.join(ROOT, "tests", "golden")
# kind: (command line, golden file in tests/golden/<set>/)
CASES = {
    "json": (["combine", "{files}", "-o", "{out}.json", "-j", "1"], "merged.json"),
    "json.gz": (["combine", "{files}", "-o", "{out}.json.gz", "-j", "2"], "merged.json"),
    "pftrace": (["combine", "{files}", "-o", "{out}.pftrace", "-j", "2"], "merged.pftrace.txt"),
    "selected.pftrace": (["combine", "{files}", "-o", "{out}.pftrace", "--min-duration", "5", "--ranks", "0-1",
                          "-j", "1"], "selected.pftrace.txt"),
    "report.table": (["report", "{files}", "-o", "{out}.txt"], "report.txt"),
    "report.csv": (["report", "{files}", "--format", "csv", "-o", "{out}.csv"], "report.csv"),
    "report.json": (["report", "{files}", "--format", "json", "-o", "{out}.json"], "report.json"),
    "report.markdown": (["report", "{files}", "--format", "markdown", "--group-by", "name,rank", "--remote-ops",
                         "-o", "{out}.md"], "report.md"),
    "report.html": (["report", "{files}", "-o", "-", "--html", "{out}.html"], "report.html"),
    "offsets.json": (["offsets", "{files}", "--format", "json"], "offsets.json"),
}
SETS = ("rpc_profiling", "parameter_server", "kineto_rpc")


def output_of(sample, kind, tmp_path):
    """The bytes the command of ``kind`` writes for a sample set (a .gz decompressed; the
    temporary directory's path, where an output names it, as TMP)."""
    files = sorted(os.path.join("samples", sample, f) for f in os.listdir(os.path.join(ROOT, "samples", sample))
                   if ".json" in f)
    out = str(tmp_path / f"{sample}.{kind}")
    args = [a for arg in CASES[kind][0] for a in (files if arg == "{files}" else [arg.replace("{out}", out)])]
    result = cli.invoke(*args)
    assert result.exit_code == 0, (kind, result.output, result.stderr)
    path = next((a for a in args if a.startswith(out)), None)   # None: the output is stdout
    data = result.stdout_bytes
    if path:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
    return data.replace(str(tmp_path).encode(), b"TMP")


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("sample", SETS)
def test_output_equals_golden_file(sample, kind, tmp_path, monkeypatch, request):
    monkeypatch.chdir(ROOT)   # input paths as the summaries name them: samples/...
    actual = golden.normalise(kind, output_of(sample, kind, tmp_path))
    path = os.path.join(GOLDEN, sample, CASES[kind][1])
    if request.config.getoption("update_golden"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(actual)
        return
    with open(path, encoding="utf-8", newline="") as f:
        expected = f.read()
    diff = golden.compare(expected, actual, os.path.relpath(path, ROOT))
    if diff:
        pytest.fail(f"{sample} {kind} differs from its golden file:\n{diff}\nIf the change is on purpose: "
                    "python -m pytest tests/test_golden.py --update-golden, and say why in the commit.",
                    pytrace=False)


@pytest.mark.parametrize("text", ['{"a":[1,{"b":"x\\"]\\n,"}],"c":{"d":[[],{}]}}', "[]",
                                  '{"traceEvents":[{"args":{\n  "k": 1\n}},{"args":{}}]}'])
def test_spread_json_is_lossless(text):
    """The merged JSON's golden layout gives the output's bytes back, also where the output
    holds newlines of its own (an input's pretty-printed args) deeper than the layout goes."""
    spread = golden.spread_json(text.encode())
    assert golden.unspread_json(spread) == text.encode()


def test_spread_json_refuses_whitespace_it_would_confuse():
    with pytest.raises(ValueError, match="whitespace"):
        golden.spread_json(b'{"a": 1}')


def test_pftrace_dump_shows_every_byte():
    """Two encodings of the same packet that a protobuf decoder would not tell apart (field
    order; an unknown field) give different dumps; bytes that do not re-encode are refused."""
    one = bytes([0x0A, 0x04, 0x40, 0x01, 0x50, 0x02])       # packet {timestamp=1 trusted_packet_sequence_id=2}
    swapped = bytes([0x0A, 0x04, 0x50, 0x02, 0x40, 0x01])
    unknown = bytes([0x0A, 0x06, 0x40, 0x01, 0xF8, 0xFF, 0x7F, 0x05])
    dumps = {golden.dump_pftrace(b) for b in (one, swapped, unknown)}
    assert len(dumps) == 3
    assert golden.dump_pftrace(one) == "timestamp=1 trusted_packet_sequence_id=2\n"
    with pytest.raises(ValueError):
        golden.dump_pftrace(bytes([0x0A, 0x03, 0x40, 0x81, 0x00]))   # an overlong varint


def test_diff_names_the_first_difference():
    expected = "".join(f"line {i}\n" for i in range(100)) + "x" * 500 + "A" + "y" * 500 + "\n"
    actual = expected.replace("line 50\n", "line fifty\n").replace("A", "B")
    diff = golden.compare(expected, actual, "f")
    assert "-line 50" in diff and "+line fifty" in diff
    assert golden.compare(expected, expected, "f") is None
    long_lines = golden.compare(expected.replace("line 50\n", ""), actual.replace("line fifty\n", ""), "f")
    assert max(len(ln) for ln in long_lines.splitlines()) < 200 and "A" in long_lines and "B" in long_lines
