"""Issue 35, items 7, 10 and 11: negative times in .pftrace output, decompression bounded on
every path (measured: a child's peak RSS on generated bombs), and the nesting, lanes and
key averages n log n in a thread's spans (the methods checked against the quadratic
rules they replace, over generated spans; hang guards on the shapes of the issue —
timings live in benchmarks/hostile_shapes.py)."""

import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import cli
from support.gen_shapes import write_shape
from support.paths import ROOT
from support.pftrace import read_pftrace

ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


# ---- item 7: negative times in .pftrace -----------------------------------------------------

@pytest.mark.parametrize("core", ["native", "python"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.integers(-2**40, -1), gap=st.integers(0, 10**6))
def test_item7_negative_times_encode_shifted_and_whole(tmp_path_factory, monkeypatch, core, first, gap):
    """A file without a base whose events start before 0 ("varint of a negative number",
    both cores): every slice is in the .pftrace, times shifted alike, and a warning says by
    how much."""
    monkeypatch.setenv("TRACEMERGE_CORE", core)
    where = tmp_path_factory.mktemp("neg")
    src, out = str(where / "t.json"), str(where / "t.pftrace")
    events = [{"ph": "X", "name": "a", "cat": "cpu_op", "ts": first, "dur": 5, "pid": 1, "tid": 1},
              {"ph": "X", "name": "b", "cat": "cpu_op", "ts": first + gap + 10, "dur": 5, "pid": 1, "tid": 1}]
    with open(src, "w") as f:
        json.dump({"traceEvents": events}, f)
    r = cli.invoke("combine", src, "-o", out, "-j", "1")
    assert r.exit_code == 0, r.output
    slices = {s["name"]: s for s in read_pftrace(out)["slices"]}
    assert set(slices) == {"a", "b"}
    assert slices["b"]["ts"] - slices["a"]["ts"] == (gap + 10) * 1000   # planted
    assert slices["a"]["end"] - slices["a"]["ts"] == 5000
    shift = slices["a"]["ts"] - first * 1000
    assert shift > 0 and f"{shift} ns later" in r.output


# ---- item 10: bombs ---------------------------------------------------------------------------

PREFIX = b'{"tracemerge": {"x": "'


def gzip_bomb(path, gib):
    """One gzip member of PREFIX then ``gib`` GiB of zeros (~1 MB per GiB): a deflate stream
    of zeros after a full flush repeats its bytes, so one 16 MiB piece is made and copied."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(PREFIX) + c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(b"\0" * (16 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.flush(zlib.Z_FINISH)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + head)
        for _ in range(64 * gib):
            f.write(piece)
        f.write(tail + b"\0" * 8)  # CRC and size never reached: the bound stops the reader first


def zstd_bomb(path, gib):
    zstandard = pytest.importorskip("zstandard")
    c = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = b"\0" * (16 << 20)
    with open(path, "wb") as f:
        f.write(c.compress(PREFIX))
        for _ in range(64 * gib):
            f.write(c.compress(zeros))
        f.write(c.flush())


MEASURE = """
import resource, subprocess, sys
p = subprocess.run([sys.executable, "-m", "tracemerge"] + sys.argv[1:], capture_output=True, text=True)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
print(p.stderr.strip())
"""


def peak(args, env=None):
    """(exit code, peak RSS MB of the command and its workers, stderr)."""
    p = subprocess.run([sys.executable, "-c", MEASURE] + args, capture_output=True, text=True, timeout=300,
                       env=env or ENV)
    head, _, stderr = p.stdout.partition("\n")
    code, mb = map(int, head.split())
    return code, mb, stderr.strip()


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    where = tmp_path_factory.mktemp("bombs")
    made = {"gzip": str(where / "bomb.json.gz"), "zstd": str(where / "bomb.json.zst")}
    gzip_bomb(made["gzip"], 1)
    zstd_bomb(made["zstd"], 1)
    return made


@pytest.mark.parametrize("codec,command", [("zstd", "info"), ("zstd", "report"), ("zstd", "offsets"), ("zstd", "diff"),
                                           ("gzip", "info"), ("gzip", "diff")])
def test_item10_bombs_are_bounded_on_every_path(bombs, codec, command):
    """A GiB of zeros in ~1 MB (gzip) or ~40 KB (zstd): the head reader inflated a MB of
    input at once (a GB), without the bound the full reader keeps. With the bound at 16M
    every command stops at it, with the documented error, its peak well under 300 MB."""
    bomb = bombs[codec]
    args = [command, bomb] + ([bomb] if command == "diff" else [])
    code, mb, stderr = peak(args, dict(ENV, TRACEMERGE_MAX_INFLATE="16M"))
    assert code == 3, stderr
    assert mb < 300, (mb, stderr)
    assert stderr.splitlines()[-1].startswith(f"tracemerge: error: {bomb}: the {codec} stream inflates to more than "
                                              "16 MiB"), stderr


def test_item10_default_bound_holds_for_info(bombs):
    """The default bound (64x, at least 256 MiB): `info` of a 1 GiB zstd bomb stays well under it
    twice (the head, then the full reader)."""
    code, mb, stderr = peak(["info", bombs["zstd"]])
    assert code == 3 and "inflates to more than 256 MiB" in stderr, stderr
    assert mb < 800, mb


# ---- item 11: n log n -------------------------------------------------------------------------

def quadratic_nest(start, end):
    """The rule Perfetto's lanes follow, as first written: scan every lane for each slice."""
    lanes, out = [], []
    for s, e in zip(start, end):
        for k, stack in enumerate(lanes):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                out.append(k)
                break
        else:
            lanes.append([e])
            out.append(len(lanes) - 1)
    return out


SPANS = st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0, 0, 1, 2, 3, 5, 8, 20, 60])), max_size=80)


@settings(max_examples=150, deadline=None)
@given(spans=SPANS)
def test_item11_nest_is_the_lane_scan(spans):
    from tracemerge.formats.perfetto.slices import nest

    spans = sorted(((s, s + d) for s, d in spans), key=lambda p: (p[0], -p[1]))
    start, end = [s for s, _ in spans], [e for _, e in spans]
    want = quadratic_nest(start, end)
    assert nest(start, end) == want
    try:
        from tracemerge.native import _proto
    except ImportError:
        return
    got = np.frombuffer(_proto.nest(np.array(start, np.int64), np.array(end, np.int64)), np.int64).tolist()
    assert got == want


@settings(max_examples=150, deadline=None)
@given(spans=SPANS)
def test_item11_first_fit_is_the_lane_scan(spans):
    from tracemerge.algorithms.nesting import first_fit

    spans = sorted((s, s + d) for s, d in spans)
    ends, want = [], []
    for s, e in spans:
        lane = next((n for n, last in enumerate(ends) if last <= s), len(ends))
        if lane == len(ends):
            ends.append(0)
        ends[lane] = e
        want.append(lane)
    assert first_fit([s for s, _ in spans], [e for _, e in spans]) == want


@settings(max_examples=150, deadline=None)
@given(tree=st.lists(st.tuples(st.integers(0, 10**6), st.booleans()), max_size=60))
def test_item11_nearest_ancestor_is_the_climb(tree):
    from tracemerge.report.keyavg import nearest_ancestor

    parent = np.array([p % k - 1 if k else -1 for k, (p, _) in enumerate(tree)], np.int64)  # a parent comes first
    stop = np.array([b for _, b in tree], bool)
    eff = parent.copy()
    while True:  # the climb it replaces (one step up per pass)
        up = (eff >= 0) & ~stop[np.maximum(eff, 0)]
        if not up.any():
            break
        eff[up] = parent[eff[up]]
    assert nearest_ancestor(parent, stop).tolist() == eff.tolist()


@pytest.mark.parametrize("kind,command", [("open", ["combine", "-o", "{out}.json"]), ("same", ["report"])])
def test_item11_hang_guard(tmp_path, kind, command):
    """100k spans of the shapes of item 11: quadratic, they took minutes (combine 20k
    crossing spans: 42 s; report 40k identical spans: 12.6 s); seconds now. A generous
    limit: a hang guard, not a timing (benchmarks/hostile_shapes.py times them)."""
    src = str(tmp_path / "t.json")
    write_shape(src, kind, 100_000)
    args = [a.replace("{out}", str(tmp_path / "out")) for a in command]
    p = cli.run(args[0], src, *args[1:], timeout=60, env=ENV)
    assert p.exit_code == 0, p.stderr


# processes, signals and limits, not what a core reads: CI runs these once (the compiled core)
pytestmark = pytest.mark.processes
