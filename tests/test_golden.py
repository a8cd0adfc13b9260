"""Every output kind, byte for byte: sha256 of what the commands write for three sample
sets (JSON, .json.gz decompressed, .pftrace with and without a selection, the report in
each format and as HTML, the offsets), as the code before the package layout wrote them
(commit 1aff0ac). A change of output on purpose updates its digest here, in the same
commit, saying why."""

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
    "kineto_rpc json": "64318764ef219cdb863f74140bf05db64313c3b49ac2fc04bb0822248e597a03",
    "kineto_rpc json.gz": "64318764ef219cdb863f74140bf05db64313c3b49ac2fc04bb0822248e597a03",
    "kineto_rpc offsets.json": "6bc7eabfe58ee2c7afcd7a2298d210117cd3237f55c58b0cd7843d853cdd421c",
    "kineto_rpc pftrace": "610bafd44af3c3b67894d68e6787de659be6c78049aac01a4013f273d83318ac",
    "kineto_rpc report.csv": "3d32a9eb203c70fc947f5fe3b7c9c06334a383334fed4e2a9faacf78597ace40",
    "kineto_rpc report.html": "81138d7a2ff989d2f305ae1248ab1c476bcb7c8aba50f19ee8def210a993b4f6",
    "kineto_rpc report.json": "601ae8229134fe3a807f8637a6e6157250f27523f31de35d2072acb546f2abba",
    "kineto_rpc report.markdown": "8a7d7ad1db8f3248664c19e57598c5a17c8b88b0d78d60ce52aa1ff1de535874",
    "kineto_rpc report.table": "ef75925f675e4aa9a4354fcb9a79acb266b98a3fa152022043d797177609e13a",
    "kineto_rpc selected.pftrace": "c5c76ca109087ff89293e8a41fb21db160e8f0287e1ddc758481411055b0093f",
    "parameter_server json": "83f05caf2e88c85bbe3be6fed022d56c18d12b91a38db496a43a1a095265583b",
    "parameter_server json.gz": "83f05caf2e88c85bbe3be6fed022d56c18d12b91a38db496a43a1a095265583b",
    "parameter_server offsets.json": "a723f4dbb77420d05d0d2bc7527fc1d0602f2d952af922398752c990f593595b",
    "parameter_server pftrace": "15770a1a136ee5f1f37dca59085c65b7d5ad65fab31f577215e2bb7c284cf396",
    "parameter_server report.csv": "3e51fc0b473fdcf43906ac80277ee66feb6ed9a477eb52fe2f3dbbf1aa4c239e",
    "parameter_server report.html": "22887859e1c2f8934afdf9f41b7fb63938412468460eadad9de94f9fef2911e2",
    "parameter_server report.json": "f82c6436783936dddb562dfa85a534fd15306576720a42e1431a994dd589e96c",
    "parameter_server report.markdown": "1e6a59da4fad5f7a01eaca9e91d770285cc96310bfd602b09181e3072119c7a0",
    "parameter_server report.table": "12f75cbae95d8be8a1b2fbf4e5af71b201e78d78ec3dd9954d801029ebdfda68",
    "parameter_server selected.pftrace": "257b3b0998860b9b18f552b457ae6287d4a177422415d65006ef83c4b29c2b9b",
    "rpc_profiling json": "7d93a60e0c1a525722e0bdf297e7365c873363224fbde67288ca292ac957f8b4",
    "rpc_profiling json.gz": "7d93a60e0c1a525722e0bdf297e7365c873363224fbde67288ca292ac957f8b4",
    "rpc_profiling offsets.json": "306336eb55c0ff1d02041186787955474bb5ba2b9ff8191f6fc0bab8f1aae790",
    "rpc_profiling pftrace": "0ad38bc7cff392bd766f6a8fe7d6cc18f046b6255baa557e8c201eb6fdda13c0",
    "rpc_profiling report.csv": "4b23fbbe8356b1ae184dd2096d119f8e3027070007ae902c5927fddda7bed3e0",
    "rpc_profiling report.html": "dc586770ae9e9ce445db340e24ed5de8bb887caac823cf3b9355f6a7cef0b079",
    "rpc_profiling report.json": "7be59f421acaed2c39f7876d99bb83c512a56702f30d5f9d63880c4908632a5c",
    "rpc_profiling report.markdown": "4f4769442f3507e4de93f605fe74cfdeaa0d6f6978282c3c893a795e3641643c",
    "rpc_profiling report.table": "4f9489d3f8840ba44166c0d116f9e0f88c988a9b21de7c04ac0b127591bf6284",
    "rpc_profiling selected.pftrace": "6ed23fe825f66a84cb734142e650a3188b496abc00b752fedb7f4880b8bdb65a"
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
