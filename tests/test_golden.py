"""Every output kind, byte for byte: sha256 of what the commands write for three sample
sets (JSON, .json.gz decompressed, .pftrace with and without a selection, the report in
each format and as HTML, the offsets), as the code before the package layout wrote them
(commit 1aff0ac; since then the summary's rpc_sides gained drawn and spans_missing, its
causality counts the drawn span pairs, and the tables show 0 as the CPU total % of
asynchronous rows, as torch does). A change of
output on purpose updates its digest here, in the same commit, saying why."""

import gzip
import hashlib
import os

import pytest
from click.testing import CliRunner
from tracefiles import ROOT

from tracemerge.cli import main

CASES = {
    "json": ["combine", "{files}", "-o", "{out}.json", "-j", "1"],
    "json.gz": ["combine", "{files}", "-o", "{out}.json.gz", "-j", "2"],
    "pftrace": ["combine", "{files}", "-o", "{out}.pftrace", "-j", "2"],
    "selected.pftrace": ["combine", "{files}", "-o", "{out}.pftrace", "--min-duration", "5", "--ranks", "0-1", "-j", "1"],
    "report.table": ["report", "{files}", "-o", "{out}.txt"],
    "report.csv": ["report", "{files}", "--format", "csv", "-o", "{out}.csv"],
    "report.json": ["report", "{files}", "--format", "json", "-o", "{out}.json"],
    "report.markdown": ["report", "{files}", "--format", "markdown", "--group-by", "name,rank", "--remote-ops",
                        "-o", "{out}.md"],
    "report.html": ["report", "{files}", "-o", "-", "--html", "{out}.html"],
    "offsets.json": ["offsets", "{files}", "--format", "json"],
}
SETS = ("rpc_profiling", "parameter_server", "kineto_rpc")
SHA256 = {
    "kineto_rpc json": "3e78b7591a9b26d81a93fd557134aeba7b1b943362e51f224b556a4f0abd324d",
    "kineto_rpc json.gz": "3e78b7591a9b26d81a93fd557134aeba7b1b943362e51f224b556a4f0abd324d",
    "kineto_rpc offsets.json": "87cfd51aba2dd610bcd18dd9cc91eb4ff595e1c745c4c5bc9306612fdfe2ed84",
    "kineto_rpc pftrace": "610bafd44af3c3b67894d68e6787de659be6c78049aac01a4013f273d83318ac",
    "kineto_rpc report.csv": "3d32a9eb203c70fc947f5fe3b7c9c06334a383334fed4e2a9faacf78597ace40",
    "kineto_rpc report.html": "81138d7a2ff989d2f305ae1248ab1c476bcb7c8aba50f19ee8def210a993b4f6",
    "kineto_rpc report.json": "601ae8229134fe3a807f8637a6e6157250f27523f31de35d2072acb546f2abba",
    "kineto_rpc report.markdown": "8a7d7ad1db8f3248664c19e57598c5a17c8b88b0d78d60ce52aa1ff1de535874",
    "kineto_rpc report.table": "ef75925f675e4aa9a4354fcb9a79acb266b98a3fa152022043d797177609e13a",
    "kineto_rpc selected.pftrace": "c5c76ca109087ff89293e8a41fb21db160e8f0287e1ddc758481411055b0093f",
    "parameter_server json": "bcf8af0d29d9d5f7b5e1e6986059780a9dabc70cd215cf290e73e5526be8cac2",
    "parameter_server json.gz": "bcf8af0d29d9d5f7b5e1e6986059780a9dabc70cd215cf290e73e5526be8cac2",
    "parameter_server offsets.json": "f88a59ec834c0f14d8928c21ed1ace2674e36e12b1ade795cd7c6de4b5b34c33",
    "parameter_server pftrace": "15770a1a136ee5f1f37dca59085c65b7d5ad65fab31f577215e2bb7c284cf396",
    "parameter_server report.csv": "3e51fc0b473fdcf43906ac80277ee66feb6ed9a477eb52fe2f3dbbf1aa4c239e",
    "parameter_server report.html": "e64ac163acec763bc094992c6765b2770e2eceea3f537c6e604ea4b83bb44140",
    "parameter_server report.json": "f82c6436783936dddb562dfa85a534fd15306576720a42e1431a994dd589e96c",
    "parameter_server report.markdown": "d5ddd8a51c6b63e5bf991b3ad273361ea0cf6efe391f5156738624173206804d",
    "parameter_server report.table": "6d288e5e139b555e151174489757377cfa6296bfc3497f47f41c37ab60b739a7",
    "parameter_server selected.pftrace": "257b3b0998860b9b18f552b457ae6287d4a177422415d65006ef83c4b29c2b9b",
    "rpc_profiling json": "4845f0897e24572f135fcac1bba132391476e9d9958eed4eb02b183fd3979e9c",
    "rpc_profiling json.gz": "4845f0897e24572f135fcac1bba132391476e9d9958eed4eb02b183fd3979e9c",
    "rpc_profiling offsets.json": "c62e1055e7bccfceb7aa9b4a14d4f492669366eb58104fa809ba842583edbeca",
    "rpc_profiling pftrace": "3fa302b06ac3879f085cf96f9efad476e38edd0972bc32e0d880cda785f8372a",
    "rpc_profiling report.csv": "de295af2e60753fb0ea2498a1f79a8324cb48c5984aee384bd8c946d8d8a7c15",
    "rpc_profiling report.html": "0dab70e042a92ebec656c7f5b3b0f43802d85caf71cd922978a635c51d20332e",
    "rpc_profiling report.json": "e4e2e3b770aa11398e679e75357d7857d9ba02b0816b1a3fd6ed51fec25380a8",
    "rpc_profiling report.markdown": "127685e58049fac3c956ff525309797eebd4f2aa5f678b3ff72d3d6ca5dad2b9",
    "rpc_profiling report.table": "d2b26d7fc8c5fe9ca2ec4f3124ad3f286b805ab2ba6070618b3f8ac49de9c51f",
    "rpc_profiling selected.pftrace": "4cb25b768571ae93c1a72962fda898018b97f14636ac379ba7e0794ad776630b"
}


def _runner():
    try:
        return CliRunner(mix_stderr=False)   # click < 8.2 mixes stderr into stdout by default
    except TypeError:
        return CliRunner()


@pytest.mark.parametrize("sample", SETS)
def test_outputs_are_the_same_bytes(sample, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)   # input paths as the summaries name them: samples/...
    where = os.path.join("samples", sample)
    files = sorted(os.path.join(where, f) for f in os.listdir(where) if ".json" in f)
    for kind, argv in CASES.items():
        out = str(tmp_path / f"{sample}.{kind}")
        args = [a for arg in argv for a in (files if arg == "{files}" else [arg.replace("{out}", out)])]
        result = _runner().invoke(main, args)
        assert result.exit_code == 0, (kind, result.output)
        path = next((a for a in args if a.startswith(out)), None)
        data = result.stdout_bytes if path is None else open(path, "rb").read()
        if path and path.endswith(".gz"):
            data = gzip.decompress(data)
        assert hashlib.sha256(data.replace(str(tmp_path).encode(), b"TMP")).hexdigest() == SHA256[f"{sample} {kind}"], kind
