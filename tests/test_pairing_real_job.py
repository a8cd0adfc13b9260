"""Builtins paired across machines on a real job (issue 45, "Must show"): real TensorPipe on
loopback, two callers sending builtins (``rpc_sync`` and ``rpc_async`` in flight together)
to one callee with 8 server threads, busy with Python functions when the first builtin
(and so its admission, the clock reading) arrives; Python functions and an
``async_execution`` function besides. Captured once; the test then gives the files other
machines' clocks (every ``ts`` and ``_ns`` field moved: offsets 10 µs to 10 s, drift 0 and
±200 ppm, new boot ids).

Truth planted by the job: every builtin sends a tensor of its own size, and every rank
records input shapes, so the op that served a call is the one op of its function with its
size. With the shapes kept, every builtin must get that op on any clocks; with the shapes
taken out of the files (time and the callee's serve order left), no call may get another's
op and every call paired on the shared clock must be paired on the moved ones too.
"""

import glob
import os
import sys
import threading
import time

import numpy as np
import orjson
import pytest

torch = pytest.importorskip("torch")

import torch.distributed.rpc as rpc  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from support import cli, synth  # noqa: E402
from support.jobs import free_port, run_job  # noqa: E402
from support.ranks import load_output  # noqa: E402

from tracemerge import AlignRequest, Job  # noqa: E402
from tracemerge.clocks.clock import ClockModel  # noqa: E402
from tracemerge.files.codecs import codec_for  # noqa: E402
from tracemerge.inputs.chrome import read_bytes  # noqa: E402

WORLD = 3
JOB_TIMEOUT_S = 300
ROUNDS = 20


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def slow(seconds):
    time.sleep(seconds)
    return seconds


def py_add(x, k):
    return x + k


@rpc.functions.async_execution
def async_later(x):
    fut = torch.futures.Future()
    threading.Timer(0.005, fut.set_result, args=(x + 1,)).start()
    return fut


def _calls(rank):
    rng = np.random.default_rng(rank)
    sizes = iter(range(8 + rank, 10**6, 3))  # each builtin of each caller (0, 2) its own tensor size
    # every server thread of the callee busy when the first builtin (and its admission) comes
    busy = [rpc.rpc_async("worker1", slow, args=(0.15,)) for _ in range(8)]
    x = torch.ones(16)
    rpc.rpc_sync("worker1", torch.add, args=(torch.ones(next(sizes)), 1))
    for k in range(ROUNDS):
        # in flight together: three builtins of their own functions beside the rpc_sync
        futs = [rpc.rpc_async("worker1", fn, args=(torch.ones(next(sizes)), 2)) for fn in (torch.mul, torch.sub, torch.div)]
        rpc.rpc_sync("worker1", torch.add, args=(torch.ones(next(sizes)), 1))
        torch.futures.wait_all(futs)
        if k % 5 == 0:
            rpc.rpc_sync("worker1", py_add, args=(x, k))
        if k % 10 == 0:
            rpc.rpc_async("worker1", async_later, args=(x,)).wait()
        time.sleep(float(rng.uniform(0, 0.002)))
    torch.futures.wait_all(busy)


def _worker(rank, port, out, wrapped):
    from tracemerge.capture import profile
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with profile(out, record_shapes=True, wrap_builtins=wrapped):
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=WORLD,
                     rpc_backend_options=rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=60))
        if rank != 1:
            _calls(rank)
        rpc.shutdown()  # graceful: every worker records until all are done


if __name__ == "__main__":
    # benchmarks/pairing_across_machines.py captures it wrapped too (argv[2] "wrapped")
    mp.spawn(_worker, args=(free_port(), sys.argv[1], sys.argv[2:] == ["wrapped"]), nprocs=WORLD)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """(the rank files' documents, the planted truth {rpc_id: (op's thread, its start)} of
    every builtin, the pairs found on the shared clock without shapes)."""
    out = tmp_path_factory.mktemp("job")
    run_job([__file__, out], JOB_TIMEOUT_S)
    return _read(out, tmp_path_factory.mktemp("shared"))


def _read(out, where):
    paths = sorted(glob.glob(str(out / "rank*.json.gz")))
    assert len(paths) == WORLD, os.listdir(out)
    docs = [orjson.loads(read_bytes(p)) for p in paths]
    ops = [op for doc in docs for op in doc["tracemerge"].get("served_ops", [])]
    truth, builtins = {}, 0
    for doc in docs:
        for r in doc["tracemerge"]["rpcs"]:
            if r["role"] == "caller" and r.get("native"):
                builtins += 1
                served = [op for op in ops if op["name"] == r["func"] and op["shapes"][0] == r["shapes"][0]]
                assert len(served) <= 1, (r, served)
                if served:
                    truth[r["rpc_id"]] = (served[0]["tid"], served[0]["start_ns"])
    # under load Kineto may miss a served op (seen in one run of three): such
    # a call has no op to get, and is said
    assert builtins == 2 * (1 + 4 * ROUNDS) and len(truth) >= builtins - 2, (len(truth), builtins)
    shared = _pairs(Job.open(_written(_without_shapes(docs), where)))
    return docs, truth, shared


def builtins_of(docs):
    return sum(r["role"] == "caller" and bool(r.get("native")) for doc in docs for r in doc["tracemerge"]["rpcs"])


def _pairs(job):
    return {r["rpc_id"]: (r["tid"], r["op_start_ns"]) for info in job.infos for r in info.remote_rpcs
            if r.get("source") == "paired"}


def _without_shapes(docs):
    """The documents as a capture that records no shapes writes them."""
    out = []
    for doc in docs:
        block = dict(doc["tracemerge"])
        for key in ("rpcs", "served_ops"):
            block[key] = [{k: v for k, v in r.items() if k != "shapes"} for r in block.get(key, [])]
        out.append(dict(doc, tracemerge=block))
    return out


def _written(docs, where):
    paths = []
    for doc in docs:
        path = str(where / f"rank{doc['tracemerge']['rank']}.json.gz")
        with open(path, "wb") as f:
            f.write(codec_for(path).compress(orjson.dumps(doc)))
        paths.append(path)
    return paths


# (offset ns, drift ppm) of ranks 1 (the callee) and 2 (a caller); rank 0 is the reference
SKEWS = {
    "seconds": {1: (1_230_000_000, 0.0), 2: (-750_000_000, 0.0)},
    "drift": {1: (1_230_000_000, 200.0), 2: (-750_000_000, -200.0)},
    "far": {1: (10_000_000_000, -200.0), 2: (10_000, 200.0)},
    "near": {1: (10_000, 0.0), 2: (-3_000_000, 200.0)},
}


def _moved(docs, tmp_path, skews):
    """The job's files with the clocks of ``skews`` and a machine each; {rank: the clock
    moved by (ClockModel)}."""
    moved_docs, clocks = [], {}
    anchor = min(doc["tracemerge"]["profile_start_ns"] for doc in docs)
    for doc in docs:
        rank = doc["tracemerge"]["rank"]
        offset, drift = skews.get(rank, (0, 0.0))
        clocks[rank] = ClockModel(rank=rank, method="skew", offset_ns=offset, drift_ppm=drift, anchor_ns=anchor)
    for doc in docs:
        rank = doc["tracemerge"]["rank"]
        # the times of another rank's clock in this file move with that rank's
        moved = synth.skew(doc, clocks[rank].offset_ns, clocks[rank].drift_ppm, anchor_ns=anchor, others=clocks)
        moved["tracemerge"]["boot_id"] = f"machine-{rank}"
        for sample in moved["tracemerge"].get("native_callees", []):
            if isinstance(sample.get("answer"), dict):
                sample["answer"]["boot_id"] = f"machine-{sample['callee']}"
        moved_docs.append(moved)
    return _written(moved_docs, tmp_path), clocks


def _on(moved, truth):
    """``truth`` ({rpc_id: (tid, op start on the shared clock)}) on the callee's moved clock."""
    return {k: (tid, moved[1].to_local(start)) for k, (tid, start) in truth.items()}


@pytest.mark.parametrize("name", sorted(SKEWS))
def test_builtins_across_machines_get_their_ops_and_the_clocks_hold(captured, tmp_path, name):
    docs, truth, _ = captured
    paths, moved = _moved(docs, tmp_path, SKEWS[name])
    job = Job.open(paths, align=AlignRequest("auto"))
    # every builtin, none left open, each with the op the job planted for it
    assert _pairs(job) == _on(moved, truth)
    # every rank's clock within its error bound of the planted one
    clocks = job.alignment.clocks
    for r in (1, 2):
        model = clocks[r]
        assert model.error_bound_ns is not None, model
        t = np.linspace(job.info(0).start_ns, job.info(0).stop_ns, 33).astype(np.int64)  # rank 0's = true time
        error = np.abs(np.asarray(model.to_reference(moved[r].to_local(t))) - t).max()
        assert error <= model.error_bound_ns, (r, int(error), model)
    _no_call_backwards(job)


@pytest.mark.parametrize("name", sorted(SKEWS))
def test_without_shapes_no_builtin_gets_another_calls_op(captured, tmp_path, name):
    docs, truth, shared = captured
    # on the shared clock time and the pipes' serve order tell most calls apart, each rightly
    assert len(shared) >= 0.4 * len(truth), (len(shared), len(truth))
    assert all(truth[k] == v for k, v in shared.items())
    paths, moved = _moved(_without_shapes(docs), tmp_path, SKEWS[name])
    job = Job.open(paths, align=AlignRequest("auto"))
    got, expected = _pairs(job), _on(moved, truth)
    wrong = [k for k, v in got.items() if expected[k] != v]
    assert not wrong, f"{len(wrong)} builtins paired with another call's op"
    # across machines a call's window is wider by the clocks' bound (on two shared cores
    # ~0.6 ms, half the fastest round trip), so more calls of one function overlap: most of
    # what the shared clock pairs is still paired (measured: 42 of 70), the rest is said
    assert len(got) >= 0.5 * len(shared), (len(got), len(shared))
    said = sum(int(w.split()[0]) for w in job.warnings if "sent as themselves to rank 1" in w)
    assert said == builtins_of(docs) - len(got)
    _no_call_backwards(job)


def _no_call_backwards(job):
    # the calls and their drawn spans; a collective of rpc.init_rpc/shutdown can be out by
    # less than its ranks' bound where a rank is aligned through three collectives only
    # (the clock graph's path, not the pairing): enforce-causality takes it (below)
    violations = job.alignment.causality["violations_before"]
    assert violations["rpc"] == 0 and violations["spans"] == 0, job.alignment.causality


def test_combine_leaves_no_call_backwards(captured, tmp_path):
    docs, _, _ = captured
    paths, _ = _moved(_without_shapes(docs), tmp_path, SKEWS["drift"])
    for extra in ([], ["--enforce-causality"]):
        out = tmp_path / f"out{len(extra)}.json"
        res = cli.run("combine", *paths, "-o", out, *extra)
        assert res.exit_code == 0, res.stderr
        causality = load_output(out)["tracemerge"]["causality"]
        assert causality["violations_before"]["rpc"] == causality["violations_before"]["spans"] == 0, causality
        assert causality["violations_after"]["total"] == 0 or not extra, causality
