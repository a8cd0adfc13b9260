"""``--comm-kernel REGEX`` reaches every GPU section: ``combine --report`` and ``export --gpu``
count the kernels it names as communication, as ``report`` does. One real rank of PARAM's
DLRM job with its NCCL kernels renamed (tests/test_nccl_align.py's RENAMED): the expected
times are the unions of the renamed kernels' spans, from the raw JSON."""

import json

import nccl_corpus as corpus
import pytest
from support.cli import invoke
from test_nccl_align import RENAMED, union_ns


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    doc = corpus.load(corpus.DLRM[0])
    for n, k in enumerate(corpus.nccl_kernels(doc)):
        k["name"] = RENAMED[n % 3]
    path = tmp_path_factory.mktemp("renamed") / "rank0.json"
    path.write_text(json.dumps(doc))
    span = lambda e: (e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000)  # noqa: E731
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    known = [span(e) for e in kernels if e["name"] in RENAMED[:2]]
    custom = [span(e) for e in kernels if e["name"] == RENAMED[2]]
    assert known and custom
    return str(path), union_ns(known) / 1000, union_ns(known + custom) / 1000


def test_combine_report_takes_comm_kernel(renamed, tmp_path):
    path, known_us, told_us = renamed
    for extra, want in (((), known_us), (("--comm-kernel", "ring_allgather"), told_us)):
        report = tmp_path / f"r{len(extra)}.json"
        result = invoke("combine", path, "-o", str(tmp_path / f"m{len(extra)}.json"), "-q",
                                           f"--report={report}", *extra)
        assert result.exit_code == 0, result.output
        assert json.loads(report.read_text())["gpu"][0]["communication_us"] == pytest.approx(want, abs=1e-3)
    alone = invoke("combine", path, "-o", str(tmp_path / "x.json"), "--comm-kernel", "a")
    assert alone.exit_code == 2 and "--report" in alone.output
    assert not (tmp_path / "x.json").exists()


def test_export_gpu_takes_comm_kernel(renamed, tmp_path):
    import pyarrow.parquet as pq

    path, known_us, told_us = renamed
    for extra, want in (((), known_us), (("--comm-kernel", "ring_allgather"), told_us)):
        out = tmp_path / f"t{len(extra)}"
        result = invoke("export", path, "-o", str(out), "-q", "--gpu", "--jobs", "1", *extra)
        assert result.exit_code == 0, result.output
        assert pq.read_table(out / "gpu.parquet").column("communication_us").to_pylist() == [pytest.approx(want, abs=1e-3)]
    alone = invoke("export", path, "-o", str(tmp_path / "y"), "--comm-kernel", "a")
    assert alone.exit_code == 2 and "--gpu" in alone.output
    bad = invoke("export", path, "-o", str(tmp_path / "z"), "--gpu", "--comm-kernel", "(")
    assert bad.exit_code == 2 and "--comm-kernel" in bad.output
