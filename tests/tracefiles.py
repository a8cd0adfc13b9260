"""Hand-made trace documents with known clocks, for tests."""

import gzip
import json
import os
import signal
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
BASE = 1_790_000_000_000_000_000  # a Kineto-style baseTimeNanoseconds


def x(name, ts, dur, pid=100, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kineto(events, base=BASE, rank=None, world_size=2, profiler_start=None, **top):
    """A Kineto-shaped document; ``profiler_start`` (µs) adds the 'PyTorch Profiler (0)' span."""
    doc = {"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms"}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world_size}
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    spans = []
    if profiler_start is not None:
        spans.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                      "tid": "PyTorch Profiler", "ts": profiler_start, "dur": 10_000, "args": {"Op count": 0}})
    doc.update(top)
    doc["traceEvents"] = spans + list(events)
    return doc


def rank_file(events, rank, worker_name=None, base=BASE, rpcs=(), collectives=(), start_ns=None, **block):
    """A tracemerge rank file document (the 'tracemerge' block first, as capture writes it)."""
    meta = {"version": 1, "job_id": "job-1", "rank": rank, "world_size": block.pop("world_size", 2),
            "worker_name": worker_name or f"worker{rank}", "hostname": block.pop("hostname", "hostA"),
            "pid": 4000 + rank, "cycle": None,
            "profile_start_ns": start_ns if start_ns is not None else base, "profile_stop_ns": base + 10**9,
            "rpcs": list(rpcs), "collectives": list(collectives)}
    meta.update(block)
    doc = {"tracemerge": meta}
    doc.update(kineto(events, base=base))
    return doc


def write(path, doc, gz=None):
    """Write ``doc`` as JSON to ``path``; gzip when the name ends in .gz (or ``gz`` says so)."""
    data = json.dumps(doc).encode()
    if gz if gz is not None else str(path).endswith(".gz"):
        data = gzip.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def load_output(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.load(f)


def cli(*args, timeout=120, code=None):
    """The command as a process run from the repository root; ``code`` runs instead of
    ``python -m tracemerge``."""
    head = ["-c", code] if code else ["-m", "tracemerge"]
    return subprocess.run([sys.executable, *head, *map(str, args)], capture_output=True, timeout=timeout, cwd=ROOT)


def sigint_default():
    """``preexec_fn`` for a command the test interrupts: SIGINT back to its default, so
    Python installs its KeyboardInterrupt handler even when the test run itself was started
    with SIGINT ignored (a background job, nohup), which children would inherit."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port():
    """A free TCP port on loopback (a job's MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(args, timeout, cwd=None):
    """Run a multi-process job (``python`` with ``args``) in a session of its own and return
    its log; on timeout the whole session is killed, torch's spawned workers with it (a
    plain timeout would leave them running), and the test fails with the log's tail, as it
    does when the job fails. The job agrees a job id of its own, as a real run does, even
    when the test run sets ``TRACEMERGE_JOB_ID``."""
    import pytest

    env = {k: v for k, v in os.environ.items() if k != "TRACEMERGE_JOB_ID"}
    proc = subprocess.Popen([sys.executable, *map(str, args)], cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail("job timed out:\n" + log[-5000:])
    assert proc.returncode == 0, log[-5000:]
    return log
