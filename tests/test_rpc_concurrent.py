"""Concurrent RPCs in a real job: 16 ``rpc_async`` calls in flight together on one thread.

One job (2 processes, tensorpipe RPC with 8 server threads and a gloo group, on loopback
with free ports) is captured with ``tracemerge.capture.profile``; each worker also saves
torch's own ``key_averages()`` of the same profile. The tests merge and report the rank
files with the command line and compare: caller spans that overlap on their thread must
all be in the merged JSON with their flow arrows, no two X events on a thread may partly
overlap, and the report's rows must equal torch's (count, CPU total, self CPU).
"""

import json
import os
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from support import cli  # noqa: E402
from support.jobs import free_port, run_job  # noqa: E402
from support.ranks import load_output  # noqa: E402

from tracemerge.capture import profile  # noqa: E402

WORLD = 2
CONCURRENT = 16
JOB_TIMEOUT_S = 120


# ---------------------------------------------------------------- served functions

pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def slow_udf(k):
    x = torch.randn(64, 64)
    for _ in range(20 + k):
        x = torch.tanh(x @ x.t() / 64)
    return float(x.sum())


class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


@rpc.functions.async_execution
def async_later(x):
    """Completes its future from a timer thread: the callee span ends on another thread."""
    fut = torch.futures.Future()
    threading.Timer(0.02, fut.set_result, args=(x + 1,)).start()
    return fut


@rpc.functions.async_execution
def async_now(x):
    """Returns a completed future: the callee span ends on its own thread (not async)."""
    fut = torch.futures.Future()
    fut.set_result(x + 2)
    return fut


_arrived = threading.Semaphore(0)
_released = threading.Event()


def _arrive():
    _arrived.release()


def _release():
    _released.set()


# ---------------------------------------------------------------- the job

def _caller():
    futs = [rpc.rpc_async("worker1", slow_udf, args=(k % 4,)) for k in range(CONCURRENT)]
    x = torch.randn(128, 128)
    for _ in range(10):     # local ops while the calls are in flight
        x = torch.relu(x @ x)
    results = [f.wait() for f in futs]
    counter = rpc.remote("worker1", Counter)
    counter.rpc_sync().incr()
    later = [rpc.rpc_async("worker1", async_later, args=(k,)) for k in range(3)]
    now = rpc.rpc_sync("worker1", async_now, args=(1,))
    return len(results), [f.wait() for f in later], now


def _worker(rank, rpc_port, pg_port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(rpc_port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{pg_port}", rank=rank, world_size=WORLD)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=WORLD,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=60))
    with profile(out) as p:
        t = torch.ones(4) * rank
        dist.all_reduce(t)
        dist.all_reduce(t, async_op=True).wait()
        if rank == 0:
            if not _arrived.acquire(timeout=JOB_TIMEOUT_S):
                raise TimeoutError("worker1 never started profiling")
            outcome = _caller()
            rpc.rpc_sync("worker1", _release)
        else:
            rpc.rpc_sync("worker0", _arrive)
            if not _released.wait(JOB_TIMEOUT_S):
                raise TimeoutError("worker0 never finished")
            outcome = None
    # torch's own numbers for the same profile, as the tests compare them
    averages = p.profiler.key_averages()
    averages.table(row_limit=-1)  # sets each row's shares as torch's table prints them
    rows = [{"key": e.key, "is_user_annotation": e.is_user_annotation, "count": e.count,
             "cpu_time_total": e.cpu_time_total, "self_cpu_time_total": e.self_cpu_time_total,
             "total_cpu_percent": str(e.total_cpu_percent)}
            for e in averages]
    (Path(out) / f"torch{rank}.json").write_text(json.dumps({"rows": rows, "outcome": outcome}))
    rpc.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(_worker, args=(free_port(), free_port(), sys.argv[1]), nprocs=WORLD)


# ---------------------------------------------------------------- fixtures and helpers

@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("concurrent_job")
    run_job([__file__, out], JOB_TIMEOUT_S)
    torch_rows = {r: json.loads((out / f"torch{r}.json").read_text()) for r in range(WORLD)}
    return out, [str(out / f"rank{r}.json.gz") for r in range(WORLD)], torch_rows


def _open_at_stop(paths):
    """{(name, rank)} of the spans a rank's profiler stopped inside (args.finished false):
    no row of tracemerge's key averages, while torch's count them with an end of its own.
    Whether the job leaves one open depends on when each worker's block ends (rank 1's can
    end while it still serves worker0's last call), so the tests compare around them."""
    found = set()
    for rank, path in enumerate(paths):
        for e in load_output(path)["traceEvents"]:
            if (e.get("args") or {}).get("finished") is False:
                found.add((e["name"], rank))
    return found


def _is_rpc_key(key):
    return "#" in key and ("->" in key or key.startswith("gloo:")) or key.startswith("gloo:")


@pytest.fixture(scope="module")
def merged_path(job, tmp_path_factory):
    _, paths, _ = job
    path = tmp_path_factory.mktemp("merged") / "trace.json"
    r = cli.run("combine", *paths, "-o", path)
    assert r.exit_code == 0, r.stderr
    return path


@pytest.fixture(scope="module")
def merged(merged_path):
    return load_output(merged_path)


# ---------------------------------------------------------------- tests

def test_the_job_ran_its_calls_concurrently(job):
    _, paths, torch_rows = job
    assert torch_rows[0]["outcome"] == [CONCURRENT, [1, 2, 3], 3]
    rank0 = load_output(paths[0])
    spans = [e for e in rank0["traceEvents"] if e.get("ph") == "X" and e.get("args", {}).get("role") == "caller"
             and e["name"].startswith("rpc_async#slow_udf")]
    assert len(spans) == CONCURRENT
    # the calls were in flight together: caller spans partly overlap on one thread
    spans.sort(key=lambda e: e["ts"])
    crossing = sum(1 for a, b in zip(spans, spans[1:]) if b["ts"] < a["ts"] + a["dur"] < b["ts"] + b["dur"])
    assert crossing > 0
    assert len({e["tid"] for e in spans}) == 1
    # the capture marks which RPC spans end on another thread (torch's "async")
    assert all(e["args"]["async"] is True for e in spans)
    callee = {e["name"]: e["args"]["async"] for e in load_output(paths[1])["traceEvents"]
              if e.get("args", {}).get("role") == "callee"}
    assert callee["rpc_sync#async_now(worker0 -> worker1)#remote"] is False
    assert callee["rpc_async#async_later(worker0 -> worker1)#remote"] is True
    assert callee["rpc_async#slow_udf(worker0 -> worker1)#remote"] is False


def test_no_partial_overlaps_on_any_thread(merged):
    by_thread = defaultdict(list)
    for e in merged["traceEvents"]:
        if e.get("ph") == "X":
            by_thread[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    assert by_thread
    for thread, spans in by_thread.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s, e, name in spans:
            while stack and s >= stack[-1][1]:
                stack.pop()
            assert not stack or e <= stack[-1][1], (thread, name, stack[-1])
            stack.append((s, e, name))


def _enclosing(spans, ts):
    """The innermost span containing ts, as Perfetto binds a v1 flow point (spans nest)."""
    inside = [s for s in spans if s["ts"] <= ts <= s["ts"] + s["dur"]]
    return min(inside, key=lambda s: s["dur"]) if inside else None


def test_every_caller_span_is_there_with_its_flows(job, merged):
    _, paths, _ = job
    records = [r for r in load_output(paths[0])["tracemerge"]["rpcs"] if r["role"] == "caller"]
    wanted = {r["rpc_id"]: r["name"] for r in records}
    assert sum(n.startswith("rpc_async#slow_udf") for n in wanted.values()) == CONCURRENT
    spans = defaultdict(list)
    by_id = {}
    for e in merged["traceEvents"]:
        if e.get("ph") == "X":
            spans[e["pid"], e["tid"]].append(e)
            a = e.get("args", {})
            if "rpc_id" in a:
                by_id[a["rpc_id"], a["role"]] = e
    flows = defaultdict(list)
    for e in merged["traceEvents"]:
        if e.get("cat") == "rpc" and e.get("ph") in ("s", "f"):
            flows[e["args"]["rpc_id"]].append(e)
    for rpc_id, name in wanted.items():
        caller, callee = by_id[rpc_id, "caller"], by_id[rpc_id, "callee"]
        assert caller["name"] == name and callee["name"] == name + "#remote"
        points = flows[rpc_id]
        assert sorted(p["ph"] for p in points) == ["f", "f", "s", "s"], rpc_id
        req = {p["ph"]: p for p in points if p["id"] == min(q["id"] for q in points)}
        resp = {p["ph"]: p for p in points if p["id"] == max(q["id"] for q in points)}
        # each point binds (Perfetto: the innermost slice of its thread at its ts) to the span
        for point, span in ((req["s"], caller), (req["f"], callee), (resp["s"], callee), (resp["f"], caller)):
            assert (point["pid"], point["tid"]) == (span["pid"], span["tid"]), rpc_id
            assert _enclosing(spans[span["pid"], span["tid"]], point["ts"]) is span, (rpc_id, point)


def test_report_rows_equal_torch_key_averages(job, tmp_path):
    _, paths, torch_rows = job
    r = cli.run("report", *paths, "--format", "json", "--group-by", "name,rank", "-o", tmp_path / "r.json")
    assert r.exit_code == 0, r.stderr
    got = {(row["key"], row["node_id"]): row for row in json.loads((tmp_path / "r.json").read_text())["key_averages"]}
    checked = 0
    still_open = _open_at_stop(paths)
    for rank, found in torch_rows.items():
        for row in found["rows"]:
            if not _is_rpc_key(row["key"]) or (row["key"], rank) in still_open:
                continue
            mine = got[row["key"], rank]
            assert mine["count"] == row["count"], row
            assert mine["cpu_time_total"] == pytest.approx(row["cpu_time_total"], rel=1e-6, abs=1e-3), row
            assert mine["self_cpu_time_total"] == pytest.approx(row["self_cpu_time_total"], rel=1e-6, abs=1e-3), row
            checked += 1
    keys = {row["key"] for found in torch_rows.values() for row in found["rows"]}
    assert "rpc_async#slow_udf(worker0 -> worker1)" in keys and any(k.startswith("gloo:") for k in keys)
    assert checked >= 8


@pytest.mark.parametrize("source", ["ranks", "merged"])
def test_every_report_row_equals_torch(job, merged_path, tmp_path, source):
    """Not only the RPC rows: taking the asynchronous spans out of the tree changes no
    other row either (the aten ops run while the calls are in flight); and the merged
    trace, whose concurrent spans went to lanes, reports the same."""
    _, paths, torch_rows = job
    files = paths if source == "ranks" else [merged_path]
    r = cli.run("report", *files, "--format", "json", "--group-by", "name,rank", "-o", tmp_path / "r.json")
    assert r.exit_code == 0, r.stderr
    got = {(row["key"], row["node_id"]): row for row in json.loads((tmp_path / "r.json").read_text())["key_averages"]}
    still_open = _open_at_stop(paths)
    for rank, found in torch_rows.items():
        expected = {(row["key"], rank): row for row in found["rows"] if (row["key"], rank) not in still_open}
        assert set(expected) == {k for k in got if k[1] == rank} - still_open
        for key, row in expected.items():
            # the trace has each event's times to 1 ns, torch to fractions of one: up to 1 ns per event
            slack = 1e-3 * row["count"]
            assert got[key]["count"] == row["count"], key
            assert got[key]["cpu_time_total"] == pytest.approx(row["cpu_time_total"], rel=1e-6, abs=slack), key
            assert got[key]["self_cpu_time_total"] == pytest.approx(row["self_cpu_time_total"], rel=1e-6, abs=slack), key


def test_cpu_total_share_of_asynchronous_rows_is_torchs_0(job, tmp_path):
    """torch's table prints 0 as the CPU total % of an asynchronous row (an rpc_async in
    flight, gloo work): its CPU total is wall time on no thread. The report's table does too."""
    _, paths, torch_rows = job
    r = cli.run("report", *paths, "--format", "markdown", "--group-by", "name,rank", "--row-limit", "0",
            "-o", tmp_path / "r.md")
    assert r.exit_code == 0, r.stderr
    share = {}
    for line in (tmp_path / "r.md").read_text().split("## ")[1].splitlines()[4:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) == 8:
            share[cells[0].strip("`"), int(cells[7])] = cells[3]
    zero = 0
    still_open = _open_at_stop(paths)
    for rank, found in torch_rows.items():
        for row in found["rows"]:
            if (row["key"], rank) in still_open:
                continue
            if row["total_cpu_percent"] == "0":
                assert share[row["key"], rank] == "0", row
                zero += 1
            else:
                assert share[row["key"], rank].endswith("%"), row
    assert zero >= 2  # the rpc_async calls in flight and the gloo work
