"""Every option value is checked when the command line is parsed, before any input is read:
the values at the edges of each option's space (issue 48, class 5) end in exit 2 with a
line naming the option, its value and the bound, never an internal error (exit 1), a
prediction no replay could make, or a 30 s wait. Run as a user runs the command: a real
process per case, inputs made here."""

import os
import socket
import time

import pytest
from support import cli, ranks


def run(args, env=None, timeout=60):
    """(exit code, stderr, seconds) of ``python -m tracemerge ARGS``."""
    start = time.monotonic()
    done = cli.run(*args, timeout=timeout, env={**os.environ, **(env or {})})
    return done.exit_code, done.stderr, time.monotonic() - start


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Two ranks, each one step with an aten::add of 1 ms."""
    d = tmp_path_factory.mktemp("job")
    paths = []
    for r in (0, 1):
        events = [ranks.x("ProfilerStep#1", 0, 5000, cat="user_annotation"), ranks.x("aten::add", 100, 1000),
                  ranks.x("aten::mul", 1200, 2000)]
        paths.append(ranks.write(d / f"rank{r}.json.gz", ranks.rank_file(events, r)))
    return paths


def one_line_usage(code, err, *named):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in named:
        assert word in err, (word, err)


@pytest.mark.parametrize("rx", ["a{4294967296}", "(" * 1000 + "x" + ")" * 1000])
def test_comm_kernel_past_the_regex_engine(job, tmp_path, rx):
    code, err, _ = run(["report", *job, "--comm-kernel", rx, "-o", str(tmp_path / "r.txt")])
    one_line_usage(code, err, "--comm-kernel", rx[:20])
    assert not (tmp_path / "r.txt").exists()


@pytest.mark.parametrize("k", ["5e-324", "1e-320", "1e-15", "1e-300"])
def test_whatif_k_beyond_the_replay(job, tmp_path, k):
    out = tmp_path / "w.json"
    code, err, _ = run(["whatif", *job, "--speedup", f"aten::add={k}", "--format", "json", "-o", str(out)])
    one_line_usage(code, err, "--speedup", k, "0.001")
    assert not out.exists()


def test_whatif_slowdown_within_the_bound(job, tmp_path):
    """K = 0.5 makes the 1 ms aten::add take 2 ms: the step predicted 1 ms longer."""
    import json

    out = tmp_path / "w.json"
    code, err, _ = run(["whatif", *job, "--speedup", "aten::add=0.5", "--format", "json", "-o", str(out), "-q"])
    assert code == 0, err
    window = json.loads(out.read_text())["windows"][0]
    assert window["predicted_ns"] - window["measured_ns"] == 1_000_000


@pytest.mark.parametrize("pair", [("aten::add=2", "aten::add@1=0"), ("aten::add=2", "aten::add=3"),
                                  ("aten::add@1=2", "aten::add@1=4")])
def test_whatif_two_speedups_of_one_span(job, pair):
    args = ["whatif", *job]
    for s in pair:
        args += ["--speedup", s]
    code, err, _ = run(args)
    one_line_usage(code, err, "--speedup", pair[0], pair[1], "one speed-up per span")


def test_whatif_speedups_of_different_ranks(job):
    code, err, _ = run(["whatif", *job, "--speedup", "aten::add@0=2", "--speedup", "aten::add@1=4", "-q"])
    assert code == 0, err


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # nothing listens there once closed


@pytest.mark.parametrize("address", ["garbage", "tcp://", "tls://10.0.0.1:8786", "tcp://127.0.0.1:70000",
                                     "tcp://127.0.0.1:0", "udp://127.0.0.1:8786"])
def test_scheduler_parsed(job, tmp_path, address):
    code, err, seconds = run(["combine", *job, "-o", str(tmp_path / "m.json"), "--engine", "dask",
                              "--scheduler", address])
    one_line_usage(code, err, "--scheduler", repr(address))
    assert seconds < 20


def test_scheduler_without_the_dask_engine(job, tmp_path):
    code, err, _ = run(["combine", *job, "-o", str(tmp_path / "m.json"), "--scheduler", "tcp://127.0.0.1:8786"])
    one_line_usage(code, err, "--scheduler needs --engine dask")


def test_scheduler_where_nothing_listens_fails_fast(job, tmp_path):
    address = f"tcp://127.0.0.1:{_closed_port()}"
    code, err, seconds = run(["combine", *job, "-o", str(tmp_path / "m.json"), "--engine", "dask",
                              "--scheduler", address])
    assert code == 3 and address in err and "cannot connect" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert seconds < 20  # distributed alone waits its 30 s timeout
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("size", ["inf", "1e30", "9" * 40 + "G"])
def test_max_inflate_beyond_the_bound(job, tmp_path, size):
    code, err, _ = run(["combine", *job, "-o", str(tmp_path / "m.json"), "--max-inflate", size])
    one_line_usage(code, err, "--max-inflate", "2**50")
    code, err, _ = run(["info", *job], env={"TRACEMERGE_MAX_INFLATE": size})
    one_line_usage(code, err, "TRACEMERGE_MAX_INFLATE", "2**50")
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("wait", ["inf", "1e300", "x", "-1", "nan"])
def test_pipe_wait_refused_by_name(job, wait):
    code, err, _ = run(["info", *job], env={"TRACEMERGE_PIPE_WAIT": wait})
    one_line_usage(code, err, "TRACEMERGE_PIPE_WAIT", repr(wait))
    # a pipe given: the same refusal before it is read
    code, err, _ = run(["info", "/dev/stdin"], env={"TRACEMERGE_PIPE_WAIT": wait})
    one_line_usage(code, err, "TRACEMERGE_PIPE_WAIT")


def test_pipe_wait_in_range_is_used(job):
    code, err, _ = run(["info", *job, "-q"], env={"TRACEMERGE_PIPE_WAIT": "0.5"})
    assert code == 0, err
