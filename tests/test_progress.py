"""Progress on stderr when it is a terminal, nothing when it is not; --quiet leaves only errors."""

import os
import pty
import select
import subprocess
import time

from support import cli
from support.ranks import kineto, write, x


def ranks(tmp_path, n=3, events=2000):
    return [write(tmp_path / f"rank{r}.json", kineto([x(f"op{i % 7}", i * 2.0, 1.0) for i in range(events)],
                                                     rank=r, world_size=n)) for r in range(n)]


def run_on_terminal(args, timeout=120):
    """(exit code, what the command wrote to its terminal stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cli.argv(*args), stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the command closed its end
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=max(1, deadline - time.monotonic())), out.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_progress_on_a_terminal(tmp_path):
    paths = ranks(tmp_path)
    code, err = run_on_terminal(["combine", *paths, "-o", tmp_path / "o.json", "-j", "2"])
    assert code == 0, err
    assert "ranks written 3/3" in err and "ranks written 1/3" in err and "ETA" in err and " MB" in err, err
    code, err = run_on_terminal(["info", *paths])
    assert code == 0 and "ranks read 3/3" in err, err


def test_no_progress_when_stderr_is_not_a_terminal(tmp_path):
    paths = ranks(tmp_path)
    r = cli.run("combine", *paths, "-o", tmp_path / "o.json", "-j", "2")
    assert r.exit_code == 0 and "ranks written" not in r.stderr and "\r" not in r.stderr, r.stderr


def test_quiet_prints_nothing_but_errors(tmp_path):
    paths = ranks(tmp_path)
    paths.append(write(tmp_path / "rank3.json", kineto([x("late", 10 * 3600 * 10**6, 1.0), x("a", 1, 1)],
                                                       rank=3, world_size=3)))  # warnings: rank >= world_size, jump
    loud = cli.run("combine", *paths, "-o", tmp_path / "a.json")
    assert loud.exit_code == 0 and "warning" in loud.stderr
    for args in (["combine", *paths, "-o", tmp_path / "b.json", "-q"], ["info", *paths, "--quiet"],
                 ["report", *paths, "-q"], ["offsets", *paths, "-q"]):
        r = cli.run(*args)
        assert r.exit_code == 0 and r.stderr == "", (args, r.stderr)
    code, err = run_on_terminal(["combine", *paths, "-o", tmp_path / "c.json", "-q"])
    assert code == 0 and err == "", err
    r = cli.run("combine", *paths, "-o", tmp_path / "c.json", "-q")
    assert r.exit_code == 5 and r.stderr.startswith("tracemerge: error: ")  # errors still show
