"""Signals and leftovers (issue 48, class 7): what a signal says is true at every stage
(after the output is in place it says the output was written), the Dask engine cleans up
on Ctrl-C as the local one does (a real LocalCluster, the signal sent to the whole process
group as a terminal does), and ``tracemerge open`` answers a reset connection in one line
and serves exactly the bytes of the file as it was opened. Real processes, real signals,
bounded waits."""

import glob
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.request

import pytest
from support import cli, jobs, ranks
from support.paths import ROOT
from test_open import start


def _big_rank(d, r, world_size=2):
    """Rank ``r``'s file of 450,000 events in ``d``."""
    events = [ranks.x("ProfilerStep#1", 0, 10_000_000, cat="user_annotation")]
    events += [ranks.x(f"aten::op{i % 50}", 10 + i * 20, 15, tid=1 + i % 4) for i in range(450_000)]
    return ranks.write(d / f"rank{r}.json.gz", ranks.rank_file(events, r, world_size=world_size))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Two ranks of 450,000 events each: long enough to be interrupted mid-work."""
    d = tmp_path_factory.mktemp("big")
    return [_big_rank(d, r) for r in (0, 1)]


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """Four such ranks: after two workers' first Parquet part lands, two ranks' work is still
    to come (with two ranks the rest of the export could end before a busy machine let the
    test send its signal: it then exits 0 with the output whole, as documented)."""
    d = tmp_path_factory.mktemp("four")
    return [_big_rank(d, r, world_size=4) for r in range(4)]


def launch(*args, group=False):
    return subprocess.Popen(cli.argv(*args), cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            preexec_fn=None if group else jobs.sigint_default, start_new_session=group)


def _reading(pid, paths):
    """Whether the process ``pid`` or one of its children has one of ``paths`` open."""
    import psutil

    wanted = {os.path.realpath(p) for p in paths}
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for p in procs:
        try:
            if any(f.path in wanted for f in p.open_files()):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


def wait_for(test, proc, limit=120):
    """Poll ``test()`` until true (True) or the process ended (False)."""
    deadline = time.monotonic() + limit
    while not test():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the stage never came"
        time.sleep(0.002)
    return True


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_after_the_output_is_in_place_says_so(big, tmp_path, sig, code, word):
    out, report = tmp_path / "m.json", tmp_path / "m.report.txt"
    proc = launch("combine", *big, "-o", str(out), "--report", "-q")
    try:
        landed = wait_for(out.exists, proc)
        proc.send_signal(sig)
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert landed, "the command ended before its output appeared"
    assert out.exists() and "no output was written" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    if report.exists():   # every output in place before the signal landed: nothing lost
        assert proc.returncode == 0 and str(out) in err, err
    else:
        assert proc.returncode == code and err.startswith(f"tracemerge: error: {word}; {out} was written"), err
        assert f"{report} was not" in err
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in (out, report) if p.exists())


def test_a_signal_before_the_output_leaves_nothing(big, tmp_path):
    out = tmp_path / "m.json"
    out.write_bytes(b"the old trace")
    proc = launch("combine", *big, "-o", str(out), "--force", "-q")
    try:
        # reading the inputs (a process of the job has one open), the output far from done; a
        # fixed wait was once enough, until the read grew fast enough to finish within it
        assert wait_for(lambda: _reading(proc.pid, big), proc), "the combine ended before it read"
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 143 and err == "tracemerge: error: terminated; no output was written\n", err
    assert out.read_bytes() == b"the old trace" and os.listdir(tmp_path) == ["m.json"]


def test_ctrl_c_during_dask_export_cleans_up(four, tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "tables"
    proc = launch("export", *four, "-o", str(out), "--engine", "dask", "--jobs", "2", "-q", group=True)
    try:
        # the workers are writing their Parquet parts into the temporary directory
        landed = wait_for(lambda: glob.glob(str(tmp_path / ".tables.tracemerge-*" / "events" / "*" / "*")), proc)
        os.killpg(proc.pid, signal.SIGINT)   # as a terminal's Ctrl-C: the workers get it too
        err = proc.communicate(timeout=60)[1]
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert landed, "the export ended before its workers wrote"
    assert proc.returncode == 130, err
    assert err == "tracemerge: error: interrupted; no output was written\n", err
    time.sleep(1.0)   # a worker that went on writing would have made its files by now
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def _get(port, name):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"GET /{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return s


def test_open_a_reset_connection_is_one_line(tmp_path):
    trace = tmp_path / "t.pftrace"
    data = os.urandom(1 << 20) * 48   # far more than the sockets' buffers hold
    trace.write_bytes(data)
    proc, url = start(trace)
    try:
        port = int(url.split(":")[2].split("/")[0])
        s = _get(port, "t.pftrace")
        got = 0
        while got < 1 << 20:
            got += len(s.recv(1 << 16))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # close as a reset (RST)
        s.close()
        time.sleep(1.0)
        with urllib.request.urlopen(url, timeout=30) as r:   # the next fetch gets the file whole
            assert r.read() == data
        assert proc.wait(timeout=30) == 0
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in err, err
    assert any("closed the connection" in line for line in err.splitlines()), err


@pytest.mark.parametrize("change", ["grow", "swap"])
def test_open_serves_the_file_as_opened(tmp_path, change):
    trace = tmp_path / "t.pftrace"
    data = os.urandom(300_000)
    trace.write_bytes(data)
    proc, url = start(trace)
    try:
        if change == "grow":
            with open(trace, "ab") as f:
                f.write(b"x" * 200_000)
        else:
            other = tmp_path / "other"
            other.write_bytes(b"y" * 500_000)
            os.replace(other, trace)
        with urllib.request.urlopen(url, timeout=30) as r:
            assert int(r.headers["Content-Length"]) == len(data)
            assert r.read() == data
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


# processes, signals and limits, not what a core reads: CI runs these once (the compiled core)
pytestmark = pytest.mark.processes
