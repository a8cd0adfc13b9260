"""Per-RPC cost of tracemerge.capture on loopback, side by side with plain torch.

Two processes. For each mode both enter the same context, then worker0 times RPCs to
worker1:

- ``none``: no profiler;
- ``torch``: ``torch.profiler.profile`` with the configuration capture uses (CPU,
  all threads), which records nothing about the RPCs themselves;
- ``capture``: ``tracemerge.capture.profile`` on both sides (RPC spans and records).

Cases: ``rpc_sync`` of ``torch.add`` and of a Python function, ``rpc_async`` of
``torch.add`` awaited one at a time, and 50 ``rpc_async`` in flight then awaited
(throughput). Modes are interleaved over several rounds; the table gives the median µs
per RPC over rounds and the ratios capture/torch and capture/none.

    python benchmarks/capture_overhead.py [--calls 300] [--rounds 3]
"""

import argparse
import os
import queue
import socket
import statistics
import tempfile
import threading
import time
from contextlib import nullcontext

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from tracemerge.capture import profile

MODES = ("none", "torch", "capture")
IN_FLIGHT = 50

_commands = queue.Queue()
_entered = threading.Event()


def py_add(a, b):
    return a + b


def _case_sync_builtin(x, n):
    for _ in range(n):
        rpc.rpc_sync("worker1", torch.add, args=(x, 1))


def _case_sync_python(x, n):
    for _ in range(n):
        rpc.rpc_sync("worker1", py_add, args=(x, 1))


def _case_async_one_by_one(x, n):
    for _ in range(n):
        rpc.rpc_async("worker1", torch.add, args=(x, 1)).wait()


def _case_async_in_flight(x, n):
    for _ in range(n // IN_FLIGHT):
        torch.futures.wait_all([rpc.rpc_async("worker1", torch.add, args=(x, 1))
                                for _ in range(IN_FLIGHT)])


CASES = {
    "rpc_sync(torch.add)": _case_sync_builtin,
    "rpc_sync(python fn)": _case_sync_python,
    "rpc_async(torch.add).wait()": _case_async_one_by_one,
    f"rpc_async x{IN_FLIGHT} in flight": _case_async_in_flight,
}


def _context(mode, out_dir):
    if mode == "none":
        return nullcontext()
    if mode == "torch":
        return torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            experimental_config=torch._C._profiler._ExperimentalConfig(profile_all_threads=True))
    return profile(out_dir)


def _command(cmd):
    """Served by worker1: queue a command for its main thread; wait until it is in the context."""
    _entered.clear()
    _commands.put(cmd)
    if cmd is not None and cmd[0] == "enter":
        _entered.wait()


def _worker(rank, port, calls, rounds, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
    if rank == 1:
        _serve_modes(out_dir)
    else:
        _drive(calls, rounds, out_dir)
    rpc.shutdown()


def _serve_modes(out_dir):
    while (cmd := _commands.get()) is not None:
        with _context(cmd[1], os.path.join(out_dir, "w1")):
            _entered.set()
            assert _commands.get() == ("exit",)


def _drive(calls, rounds, out_dir):
    x = torch.ones(16)
    _case_sync_builtin(x, 200)  # warm up connections and code paths
    us = {(case, mode): [] for case in CASES for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            rpc.rpc_sync("worker1", _command, args=(("enter", mode),))
            with _context(mode, os.path.join(out_dir, "w0")):
                for case, run in CASES.items():
                    t0 = time.perf_counter_ns()
                    run(x, calls)
                    us[(case, mode)].append((time.perf_counter_ns() - t0) / calls / 1000)
            rpc.rpc_sync("worker1", _command, args=(("exit",),))
    rpc.rpc_sync("worker1", _command, args=(None,))
    _print_table(us, calls, rounds)


def _print_table(us, calls, rounds):
    print(f"µs per RPC, median of {rounds} rounds x {calls} calls, loopback, "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("| case | none | torch profiler | tracemerge capture | capture/torch | capture/none |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in CASES:
        none, prof, cap = (statistics.median(us[(case, m)]) for m in MODES)
        print(f"| {case} | {none:.0f} | {prof:.0f} | {cap:.0f} | {cap / prof:.2f} | {cap / none:.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_worker, args=(port, args.calls, args.rounds, out_dir), nprocs=2)


if __name__ == "__main__":
    main()
