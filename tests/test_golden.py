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
    "kineto_rpc json": "962085423e1694089062103f6b7612d5b704ee0cefeddc3fc713c628a3e56fa5",
    "kineto_rpc json.gz": "962085423e1694089062103f6b7612d5b704ee0cefeddc3fc713c628a3e56fa5",
    "kineto_rpc offsets.json": "6bc7eabfe58ee2c7afcd7a2298d210117cd3237f55c58b0cd7843d853cdd421c",
    "kineto_rpc pftrace": "610bafd44af3c3b67894d68e6787de659be6c78049aac01a4013f273d83318ac",
    "kineto_rpc report.csv": "3d32a9eb203c70fc947f5fe3b7c9c06334a383334fed4e2a9faacf78597ace40",
    "kineto_rpc report.html": "81138d7a2ff989d2f305ae1248ab1c476bcb7c8aba50f19ee8def210a993b4f6",
    "kineto_rpc report.json": "601ae8229134fe3a807f8637a6e6157250f27523f31de35d2072acb546f2abba",
    "kineto_rpc report.markdown": "8a7d7ad1db8f3248664c19e57598c5a17c8b88b0d78d60ce52aa1ff1de535874",
    "kineto_rpc report.table": "ef75925f675e4aa9a4354fcb9a79acb266b98a3fa152022043d797177609e13a",
    "kineto_rpc selected.pftrace": "c5c76ca109087ff89293e8a41fb21db160e8f0287e1ddc758481411055b0093f",
    "parameter_server json": "48cb7658bbe5d096d4af27edba9741867c150a5c7e3da3c178ed3ce78c6f9566",
    "parameter_server json.gz": "48cb7658bbe5d096d4af27edba9741867c150a5c7e3da3c178ed3ce78c6f9566",
    "parameter_server offsets.json": "a723f4dbb77420d05d0d2bc7527fc1d0602f2d952af922398752c990f593595b",
    "parameter_server pftrace": "15770a1a136ee5f1f37dca59085c65b7d5ad65fab31f577215e2bb7c284cf396",
    "parameter_server report.csv": "800b638c6bfa5985250de78e5e5ae8cd7db7953c63d573f5e4081fcaf9676c4f",
    "parameter_server report.html": "4dccccf3b8419c7a594b99e117c701c352e47b8c513e8bc797dff32e00827f98",
    "parameter_server report.json": "911f1573e254b768c7e1d2fdaed275afb96e342e7db6b95c29dace1cd9a6c7a2",
    "parameter_server report.markdown": "53eac9786a8829f717ca1ecb7b807c41846718ad922a44076448bc6b2ea28bab",
    "parameter_server report.table": "2e83c7f3ce7d4807fc25c885467e8c251fc5fd99115fcd07df650e911a40b478",
    "parameter_server selected.pftrace": "257b3b0998860b9b18f552b457ae6287d4a177422415d65006ef83c4b29c2b9b",
    "rpc_profiling json": "8432afda656ee76cfa0385ddddaec05328c06a1a77073043a836c57e277b3635",
    "rpc_profiling json.gz": "8432afda656ee76cfa0385ddddaec05328c06a1a77073043a836c57e277b3635",
    "rpc_profiling offsets.json": "306336eb55c0ff1d02041186787955474bb5ba2b9ff8191f6fc0bab8f1aae790",
    "rpc_profiling pftrace": "0ad38bc7cff392bd766f6a8fe7d6cc18f046b6255baa557e8c201eb6fdda13c0",
    "rpc_profiling report.csv": "85283eddbf3a224e307f5660fcdb086ac450f116ab2028eb25783d6b91882365",
    "rpc_profiling report.html": "dca64196dfeabdefe2e075c09a8f7bf1298b77df22d99ac788b72a62fb7a53e2",
    "rpc_profiling report.json": "9ea56ceb64fb0e01d5769a25d2bfc9f836543f8ab187d5101895ad375e442045",
    "rpc_profiling report.markdown": "0042bfafc34a238871bf3b607b797ef492467e1a5d036555f6bb40505c7ae5d3",
    "rpc_profiling report.table": "1dcf1dbd9726d3c028c256ae624c24bec8bb562aa874a58071f2697572ca34d2",
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
