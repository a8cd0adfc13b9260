"""``tracemerge open`` serves the file once to a real HTTP client, with the UI's CORS headers."""

import concurrent.futures
import subprocess
import urllib.parse
import urllib.request

from support import cli
from support.jobs import sigint_default

from tracemerge.commands.serve import UI_ORIGIN


def readline(stream, timeout=30):
    """The next line of ``stream``, failing after ``timeout`` s instead of waiting forever
    for a server that never prints its link."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(stream.readline).result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"no line in {timeout} s") from None
    finally:
        pool.shutdown(wait=False)   # a thread still reading ends when the process is killed


def start(path, *extra):
    proc = subprocess.Popen(preexec_fn=sigint_default, args=cli.argv("open", path, "--port", "0", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        link = readline(proc.stdout).strip()
    except AssertionError:
        proc.kill()   # unblocks the reading thread too
        proc.wait()
        raise
    assert link.startswith(f"{UI_ORIGIN}/#!/?url=http://127.0.0.1:"), link
    return proc, link.split("?url=", 1)[1]


def test_serves_the_bytes_with_cors_and_exits(tmp_path):
    trace = tmp_path / "my trace.pftrace"
    data = bytes(range(256)) * 5000
    trace.write_bytes(data)
    proc, url = start(trace)
    try:
        assert urllib.parse.unquote(url.rsplit("/", 1)[1]) == "my trace.pftrace"
        pre = urllib.request.Request(url, method="OPTIONS", headers={"Origin": UI_ORIGIN})
        with urllib.request.urlopen(pre, timeout=10) as r:
            assert r.headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        missing = url.rsplit("/", 1)[0] + "/other"
        try:
            urllib.request.urlopen(missing, timeout=10)
            raise AssertionError("served a path other than the trace")
        except urllib.error.HTTPError as e:
            assert e.code == 404
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Origin": UI_ORIGIN}), timeout=10) as r:
            assert r.headers["Access-Control-Allow-Origin"] == UI_ORIGIN
            assert r.read() == data
        assert proc.wait(timeout=10) == 0
        assert "sent" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_missing_file_is_a_one_line_error(tmp_path):
    r = cli.run("open", tmp_path / "nope.pftrace", "--port", "0", timeout=60)
    assert r.exit_code == 3 and r.stderr.count("\n") == 1 and "nope.pftrace: no such file" in r.stderr
