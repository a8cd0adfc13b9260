"""Compressed outputs and inputs (tracemerge/files/codecs.py): gzip and zstd pieces that join into
one stream, `combine -o x.json.zst` through the shard path, cut and corrupt zstd inputs, and
the error when the optional zstandard module is missing."""

import gzip
import io
import json
import os
import shutil
import subprocess
import sys

import orjson
import pytest
from support import cli
from support.ranks import kineto, write, x

from tracemerge.errors import OutputError, TraceError
from tracemerge.files.codecs import CODECS, ZSTD_MAGIC, codec_for, decompress, plain_name
from tracemerge.inputs import read_trace

zstandard = pytest.importorskip("zstandard")  # the test extra installs it


NO_ZSTANDARD = "import sys; sys.modules['zstandard'] = None; from tracemerge.cli import main; main()"




def combined(files, out, *args):
    """The bytes ``combine FILES -o OUT ARGS`` writes, which must succeed."""
    r = cli.run("combine", *files, "-o", out, *args)
    assert r.exit_code == 0, r.stderr
    return out.read_bytes()


def frames(data):
    """The zstd frames of ``data``, each decoded on its own."""
    out = []
    while data:
        d = zstandard.ZstdDecompressor().decompressobj()
        out.append(d.decompress(data))
        assert d.eof
        data = d.unused_data
    return out


def doc_bytes(n=20_000):
    return orjson.dumps(kineto([x(f"op{i}", i * 2.0, 1.0, tid=i % 3) for i in range(n)], rank=0))


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_pieces_made_apart_are_one_stream(suffix):
    codec = codec_for("t.json" + suffix)
    pieces = [b"head,", b"x" * 300_000 + b"y" * 1000, b"", b",tail"]
    out = io.BytesIO()
    out.write(codec.compress(pieces[0]))
    for piece in pieces[1:3]:
        with codec.writer(out) as w:
            w.write(piece[:1000])
            w.write(piece[1000:])
    out.write(codec.compress(pieces[3]))
    data = out.getvalue()
    assert decompress("p", data) == (b"".join(pieces), "")
    assert decompress("p", data[:-7])[1] == codec.name  # ends inside the last piece
    assert not out.closed  # the writer ends its piece, not the file


def test_zstd_frames_are_read_by_other_readers():
    z = CODECS[".zst"]
    out = io.BytesIO()
    with z.writer(out) as w:
        w.write(b"a" * 100_000)
    data = z.compress(b"<") + out.getvalue() + z.compress(b">")
    whole = b"<" + b"a" * 100_000 + b">"
    assert b"".join(frames(data)) == whole
    assert zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(data) == whole
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True).read() == whole
    if shutil.which("zstd"):
        assert subprocess.run(["zstd", "-dc"], input=data, capture_output=True, check=True).stdout == whole


def test_gzip_codec_keeps_the_bytes_it_always_wrote():
    data = doc_bytes()
    assert CODECS[".gz"].compress(data) == gzip.compress(data, 1, mtime=0)
    out, before = io.BytesIO(), io.BytesIO()
    with CODECS[".gz"].writer(out) as w:
        w.write(data)
    with gzip.GzipFile(filename="", fileobj=before, mode="wb", compresslevel=1, mtime=0) as w:
        w.write(data)
    assert out.getvalue() == before.getvalue()


def test_names():
    assert codec_for("-") is None and codec_for("t.json") is None and codec_for("t.zstd") is None
    assert codec_for("t.json.gz").name == "gzip" and codec_for("t.pftrace.zst").name == "zstd"
    assert plain_name("t.pftrace.zst") == "t.pftrace" and plain_name("t.json.gz") == "t.json"
    assert plain_name("t.json") == "t.json"


def test_combine_zstd_output_is_the_plain_output_for_any_jobs(rank_files, tmp_path):
    plain = combined(rank_files, tmp_path / "t.json", "-j", 1)
    outs = [combined(rank_files, tmp_path / f"j{jobs}.json.zst", "-j", jobs) for jobs in (1, 2)]
    assert outs[0] == outs[1] and outs[0][:4] == ZSTD_MAGIC
    # the header, a frame per rank and the separators between them, the summary
    assert len(frames(outs[0])) == 2 * len(rank_files) + 1
    assert b"".join(frames(outs[0])) == plain
    assert len(outs[0]) < len(plain) / 5
    trace = read_trace(tmp_path / "j1.json.zst")
    assert len(trace) == len(read_trace(tmp_path / "t.json")) and not trace.truncated
    r = cli.run("info", "--rank-from", "order", tmp_path / "j1.json.zst")
    assert r.exit_code == 0 and f"{len(trace)} events" in r.stdout
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


def test_perfetto_zstd_output(rank_files, tmp_path):
    packed = combined(rank_files, tmp_path / "t.pftrace.zst", "-j", 2)
    assert b"".join(frames(packed)) == combined(rank_files, tmp_path / "t.pftrace", "-j", 2)


def test_report_beside_a_zstd_trace_and_a_zstd_report(rank_files, tmp_path):
    combined(rank_files, tmp_path / "t.json.zst", "--report")
    assert (tmp_path / "t.report.txt").read_text().strip()
    assert cli.run("report", *rank_files, "--format", "json", "-o", tmp_path / "r.json.zst").exit_code == 0
    data, cut = decompress("r", (tmp_path / "r.json.zst").read_bytes())
    assert not cut and json.loads(data)


def test_cut_zstd_input_is_salvaged_with_the_warning(tmp_path):
    data = doc_bytes()
    path = tmp_path / "rank0.json.zst"
    packed = CODECS[".zst"].compress(data)
    path.write_bytes(packed[:len(packed) * 2 // 3])
    t = read_trace(path)
    full = json.loads(data)["traceEvents"]
    assert t.truncated and 0 < len(t) < len(full)
    assert [t.names[c] for c in t.name] == [e["name"] for e in full[:len(t)]]
    warning = f"truncated file (the zstd stream ends early): recovered {len(t)} complete events"
    assert t.warnings[0].startswith(warning)
    r = cli.run("combine", path, "-o", tmp_path / "o.json")
    assert r.exit_code == 0 and f"tracemerge: warning: {path}: {warning}" in r.stderr
    path.write_bytes(packed[:8])
    with pytest.raises(TraceError, match="truncated zstd with no data before the cut"):
        read_trace(path)


def test_zero_padding_after_the_frames_is_ignored(tmp_path):
    data = doc_bytes(50)
    path = tmp_path / "rank0.json.zst"
    path.write_bytes(CODECS[".zst"].compress(data) + bytes(4096))
    assert len(read_trace(path)) == 50 and not read_trace(path).warnings


def test_corrupt_zstd_input_is_one_line_exit_3(tmp_path):
    packed = bytearray(CODECS[".zst"].compress(doc_bytes()))
    packed[len(packed) // 2] ^= 0x5A
    bad = tmp_path / "rank1.json.zst"
    bad.write_bytes(bytes(packed))
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)], rank=0))
    r = cli.run("combine", good, bad, "-o", tmp_path / "o.json")
    assert r.error_line(3).startswith(f"tracemerge: error: {bad}: corrupt zstd: ")
    assert not (tmp_path / "o.json").exists()


def test_without_zstandard_zstd_is_refused_in_one_line(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)], rank=0))
    out = tmp_path / "o.json.zst"
    r = cli.run("combine", good, "-o", out, code=NO_ZSTANDARD)
    assert r.error_line(5) == f"tracemerge: error: {out}: zstd needs the zstandard module: pip install 'tracemerge[zstd]'"
    packed = tmp_path / "rank1.json.zst"
    packed.write_bytes(CODECS[".zst"].compress(doc_bytes(10)))
    r = cli.run("info", packed, code=NO_ZSTANDARD)
    assert r.error_line(3) == f"tracemerge: error: {packed}: zstd needs the zstandard module: pip install 'tracemerge[zstd]'"
    assert sorted(os.listdir(tmp_path)) == ["rank0.json", "rank1.json.zst"]
    # gzip and plain outputs do not need it
    assert cli.run("combine", good, "-o", tmp_path / "o.json.gz", code=NO_ZSTANDARD).exit_code == 0


def test_without_zstandard_in_process(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(OutputError, match=r"^t\.json\.zst: zstd needs the zstandard module"):
        codec_for("t.json.zst")
    with pytest.raises(TraceError, match=r"^r\.zst: zstd needs the zstandard module"):
        decompress("r.zst", ZSTD_MAGIC + b"rest")
