"""Failures of the command as a process: output refusal and atomicity, write errors,
broken pipes, Ctrl-C. Each ends in one line, a documented exit code, and no output file."""

import os
import signal
import subprocess
import time

import pytest
from support import cli
from support.jobs import sigint_default
from support.ranks import kineto, load_output, write, x


def big_trace(tmp_path, n=60_000):
    return write(tmp_path / "rank0.json", kineto([x(f"op{i % 50}", i * 2.0, 1.0, tid=i % 4) for i in range(n)]))


def error_lines(stderr):
    lines = stderr.decode().splitlines()
    assert not any("Traceback" in line for line in lines), stderr
    return [line for line in lines if line.startswith("tracemerge: error: ")]


def test_output_rules(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    out = tmp_path / "o.json"
    r = cli.run("combine", good, "-o", good, "--force")
    assert r.error_line(5) == f"tracemerge: error: {good}: the output is also an input; choose another -o"
    out.write_text("keep me")
    r = cli.run("combine", good, "-o", out)
    assert "exists; pass --force" in r.error_line(5) and out.read_text() == "keep me"
    assert cli.run("combine", good, "-o", out, "--force").exit_code == 0
    assert load_output(out)["tracemerge"]["events"]["in"] == 1
    r = cli.run("combine", good, "-o", tmp_path / "no" / "such" / "dir.json")
    assert "does not exist" in r.error_line(5)


def test_directory_output_says_so_without_asking_for_force(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    (tmp_path / "d").mkdir()
    r = cli.run("combine", good, "-o", tmp_path / "d")
    assert r.error_line(5) == f"tracemerge: error: {tmp_path / 'd'}: is a directory"


def test_failed_run_leaves_no_output_or_temporary_file(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    bad = tmp_path / "rank1.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "late"}]}')
    before = sorted(os.listdir(tmp_path))
    r = cli.run("combine", good, bad, "-o", tmp_path / "o.json")
    assert r.error_line(3) == f"tracemerge: error: {bad}: event 0: 'ts' is not a number: 'late'"
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_disk_full_on_stdout(tmp_path):
    with open("/dev/full", "wb") as full:
        r = subprocess.run(cli.argv("combine", big_trace(tmp_path, 2000), "-o", "-"), stdout=full,
                           stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 5 and "No space left on device" in error_lines(r.stderr)[0]


def test_broken_pipe_is_one_line(tmp_path):
    trace = big_trace(tmp_path, 20_000)
    proc = subprocess.Popen(cli.argv("combine", trace, "-o", "-"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=sigint_default)
    proc.stdout.read(100)
    proc.stdout.close()  # the reader goes away, as `| head -c 100` does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 5
    assert error_lines(err) == ["tracemerge: error: the output pipe was closed before everything was written"]


def writing(pid, directory):
    """Whether process ``pid`` has a file open in ``directory``: the temporary output has
    no name there (O_TMPFILE), but its descriptor's link shows where it lives."""
    if os.listdir(directory):
        return True
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(directory) + "/"):
                return True
        except OSError:
            continue
    return False


def test_ctrl_c_exits_130_and_leaves_nothing(tmp_path):
    trace = big_trace(tmp_path, 400_000)
    out = tmp_path / "out" / "o.json"
    out.parent.mkdir()
    # the reference core: the compiled one may finish before the interrupt lands
    proc = subprocess.Popen(cli.argv("combine", trace, "-o", out, "-j", "1"), stderr=subprocess.PIPE,
                            preexec_fn=sigint_default, env=dict(os.environ, TRACEMERGE_CORE="python"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not writing(proc.pid, out.parent) and proc.poll() is None:
        time.sleep(0.01)  # interrupt once writing has begun: shards or the temporary output exist
    if proc.poll() is not None:   # never signal a finished process (its pid may be another's by now)
        raise AssertionError(f"combine ended (exit {proc.returncode}) before it could be interrupted: "
                             "make the trace bigger")
    assert writing(proc.pid, out.parent), "combine did not begin writing in 60 s"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert error_lines(err) == ["tracemerge: error: interrupted; no output was written"]
    assert os.listdir(out.parent) == []


def test_missing_output_directory_is_refused_before_any_work(tmp_path):
    good = write(tmp_path / "rank0.json", kineto([x("a", 1, 1)]))
    missing = tmp_path / "nope"
    for args, target in ((["-o", missing / "t.json"], missing / "t.json"),
                         (["-o", tmp_path / "t.json", f"--report={missing / 'r.txt'}"], missing / "r.txt")):
        r = cli.run("combine", good, *args)
        assert r.error_line(5) == f"tracemerge: error: {target}: the directory {missing} does not exist"
    assert sorted(os.listdir(tmp_path)) == ["rank0.json"]  # the trace was not written before the report failed


# processes, signals and limits, not what a core reads: CI runs these once (the compiled core)
pytestmark = pytest.mark.processes
