"""Faults and concurrency (issue 16): the parent killed or terminated while its workers
run, two runs writing one output, and ``tracemerge open`` facing a foreign Host header,
an idle connection, a deleted file and Ctrl-C. Real processes, real sockets; every wait
has a timeout."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from support import cli
from support.jobs import sigint_default
from support.ranks import kineto, write, x


def ranks(tmp_path, n_ranks=2, events=250_000):
    """``n_ranks`` rank files big enough that their workers run for a few seconds."""
    paths = []
    for r in range(n_ranks):
        evs = [x(f"op{i % 50}", i * 2.0, 1.0, tid=i % 4) for i in range(events)]
        paths.append(write(tmp_path / f"rank{r}.json", kineto(evs, rank=r, world_size=n_ranks)))
    return paths


def children(pid):
    """Pids whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(cond, timeout=60.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def start_combine(paths, out, *extra):
    # the reference core: the compiled one merges these ranks before a signal can land
    env = dict(os.environ, TRACEMERGE_CORE="python")
    return subprocess.Popen(preexec_fn=sigint_default, args=cli.argv("combine", *paths, "-o", out, "-j", "2", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env)


def kill_all(procs):
    for p in procs:
        if alive(p):
            os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_their_parent_and_nothing_is_left(sig, tmp_path):
    paths = ranks(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = start_combine(paths, out_dir / "t.json")
    workers = []
    try:
        # the per-rank workers exist once the merge writes: wait for two children at work
        assert wait_for(lambda: len(children(proc.pid)) >= 2 or proc.poll() is not None), "no workers started"
        assert proc.poll() is None, "finished before the signal: make the ranks bigger"
        time.sleep(0.3)
        workers = children(proc.pid)
        proc.send_signal(sig)
        proc.wait(timeout=60)  # not communicate(): surviving workers would hold its pipes open
        survivors = [] if wait_for(lambda: not any(alive(w) for w in workers), timeout=15) else \
            [w for w in workers if alive(w)]
        kill_all(survivors)
        assert not survivors, f"workers {survivors} outlived their parent"
        err = proc.stderr.read().decode()
        if sig == signal.SIGTERM:
            assert proc.returncode in (143, 130), (proc.returncode, err)
            assert "Traceback" not in err
            assert [line for line in err.splitlines() if line.startswith("tracemerge: error: ")] == \
                ["tracemerge: error: terminated; no output was written"], err
        assert wait_for(lambda: os.listdir(out_dir) == [], timeout=15), os.listdir(out_dir)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        kill_all(workers)


def test_two_writers_of_one_new_output_one_is_refused(tmp_path):
    paths = ranks(tmp_path, events=120_000)
    out = tmp_path / "t.json"
    procs = [start_combine(paths, out) for _ in range(2)]
    try:
        results = [(p.wait(timeout=300), p.stderr.read().decode()) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    codes = sorted(code for code, _ in results)
    assert codes == [0, 5], results
    refused = next(err for code, err in results if code == 5)
    assert f"tracemerge: error: {out}: exists; pass --force to overwrite it" in refused.splitlines(), refused
    assert json.load(open(out))["tracemerge"]["events"]["in"] == 240_000
    assert sorted(os.listdir(tmp_path)) == ["rank0.json", "rank1.json", "t.json"]


def test_two_writers_with_force_both_succeed_and_the_output_is_whole(tmp_path):
    paths = ranks(tmp_path, events=60_000)
    out = tmp_path / "t.json"
    procs = [start_combine(paths, out, "--force") for _ in range(2)]
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    assert codes == [0, 0]
    assert json.load(open(out))["tracemerge"]["events"]["in"] == 120_000
    assert sorted(os.listdir(tmp_path)) == ["rank0.json", "rank1.json", "t.json"]


# ---- tracemerge open ---------------------------------------------------------------------

def start_open(path):
    proc = subprocess.Popen(preexec_fn=sigint_default, args=cli.argv("open", path, "--port", "0"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ready = []

    def read_link():
        ready.append(proc.stdout.readline().strip())

    import threading
    t = threading.Thread(target=read_link, daemon=True)
    t.start()
    t.join(timeout=60)
    assert ready and ready[0].startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:"), ready
    url = ready[0].split("?url=", 1)[1]
    port = int(url.split(":")[2].split("/")[0])
    return proc, port, "/" + url.rsplit("/", 1)[1]


def request(port, path, host=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_open_serves_only_requests_for_localhost(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"abc" * 1000)
    proc, port, path = start_open(trace)
    try:
        for host in ("evil.example", "evil.example:%d" % port, "127.0.0.1.evil.example", ""):
            status, body = request(port, path, host=host)
            assert status in (403, 421) and b"abc" not in body, (host, status)
        assert proc.poll() is None  # a refused request does not end the server
        status, body = request(port, path, host=f"localhost:{port}")
        assert status == 200 and body == b"abc" * 1000
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


def test_open_an_idle_connection_does_not_block_others(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"xyz" * 1000)
    proc, port, path = start_open(trace)
    idle = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        idle.sendall(b"GET ")  # a request begun and never finished
        status, body = request(port, path, host=f"127.0.0.1:{port}")
        assert status == 200 and body == b"xyz" * 1000
        assert proc.wait(timeout=30) == 0
    finally:
        idle.close()
        stop(proc)


def test_open_file_deleted_before_the_fetch(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"x" * 100)
    proc, port, path = start_open(trace)
    try:
        trace.unlink()
        status, _ = request(port, path, host=f"127.0.0.1:{port}")
        assert status in (404, 410)
        code = proc.wait(timeout=30)
        err = proc.stderr.read()
        assert code == 3 and "Traceback" not in err, err
        assert f"tracemerge: error: {trace}: " in err and "deleted" in err, err
    finally:
        stop(proc)


def test_open_ctrl_c_exits_130(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"x" * 100)
    proc, port, path = start_open(trace)
    try:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        err = proc.stderr.read()
        assert code == 130 and "Traceback" not in err, (code, err)
        assert "tracemerge: error: interrupted" in err
    finally:
        stop(proc)


# A child that runs the console script's entry exactly as ``tracemerge`` does, and sends
# itself SIG (TIMES times) the moment the module MODULE is imported.
SIGNAL_ON_IMPORT = """
import os, signal, sys
sig, times, module = signal.Signals(int(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
class SignalOnImport:
    def find_spec(self, name, path=None, target=None):
        # "orjson init": the first import orjson's module init makes
        if name == module or (module == "orjson init" and "orjson" in sys.modules and "orjson" not in name):
            sys.meta_path.remove(self)
            for _ in range(times):
                os.kill(os.getpid(), sig)
        return None
sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["tracemerge"] + sys.argv[4:]
from tracemerge.commands.entry import console
console()
"""


def signal_on_import(sig, times, module, *args, **run):
    return subprocess.run([sys.executable, "-c", SIGNAL_ON_IMPORT, str(int(sig)), str(times), module, *map(str, args)],
                          capture_output=True, text=True, timeout=60, **{"preexec_fn": sigint_default, **run})


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "terminated")])
@pytest.mark.parametrize("module, then", [
    # the CLI still loading (click: the moment a Ctrl-C right after Enter meets): one line
    ("click", ""),
    # the command begun, orjson initializing: its init does not check the imports it makes,
    # so an exception a signal's handler raised there crashed the process (SIGSEGV;
    # ijl/orjson#310); the command now holds the signal until orjson is in, then unwinds
    ("orjson init", "; no output was written")])
def test_a_signal_while_the_cli_loads_ends_with_one_line_and_its_exit_code(sig, code, said, module, then, tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    out = tmp_path / "out"
    out.mkdir()
    p = signal_on_import(sig, 1, module, "combine", good, "-o", out / "t.json")
    assert (p.returncode, p.stderr) == (code, f"tracemerge: error: {said}{then}\n")
    assert os.listdir(out) == []


def test_sigint_ignored_at_start_stays_ignored(tmp_path):
    """A job started in the background of a script (or under nohup) ignores Ctrl-C: the
    command then runs to its end through any number of them."""
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    out = tmp_path / "t.json"
    p = signal_on_import(signal.SIGINT, 3, "click", "combine", good, "-o", out,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["traceEvents"]


# processes, signals and limits, not what a core reads: CI runs these once (the compiled core)
pytestmark = pytest.mark.processes
