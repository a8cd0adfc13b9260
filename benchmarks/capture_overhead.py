"""Per-RPC cost of tracemerge.capture on loopback, side by side with plain torch.

Two processes. For each mode both enter the same context, then worker0 times RPCs to
worker1:

- ``none``: no profiler;
- ``torch``: ``torch.profiler.profile`` with the configuration capture uses (CPU,
  all threads), which records nothing about the RPCs themselves;
- ``capture``: ``tracemerge.capture.profile`` on both sides (RPC spans and records);
- ``capture_off``: ``profile(trace=False)`` on both sides: no torch profiler, the RPC
  records only (the lighter mode).

Cases: ``rpc_sync`` of ``torch.add`` and of a Python function, ``rpc_async`` of
``torch.add`` awaited one at a time, 50 ``rpc_async`` in flight then awaited
(throughput), ``remote(torch.add)`` then ``to_here()``, an RRef proxy call
(``rref.rpc_sync().incr()``) and an ``async_execution`` function. Modes alternate within
every round; the table gives the median µs per RPC over rounds, the medians of each
round's ratios capture/torch and capture_off/none, and the spread (min-max) of the
``none`` column, which no mode touches: the machine's noise.

``--steps`` times instead, alone and in one process, each step of the capture's own work
for one call on either side (µs per call, profiler running as under capture).

``--paired trace|off`` runs one capture on both workers and alternates, per case, blocks
of calls through capture's wrappers and through the torch functions inside them: the
ratio is capture/torch.profiler (``off``: capture without profiler/none), each pair
measured seconds apart.

``--paired journal`` runs one capture (``profile(out)``, the default) on both workers and
alternates, per case, blocks of the same traced calls with the journal writing and with
its flusher paused on both workers (``Journal.pause``/``resume``, switched between blocks,
untimed), in rounds of four blocks off-on-on-off (then on-off-off-on): the ratio is
journal on / journal off, free of a steady drift. The journal flushes every 0.5 s, so a
block lasts two flush periods and a little more (``--block-s``, default 1.02 s: two
flushes, of its own calls' records) rather than a number of calls; ``--calls`` does not
apply. The captures end without writing their files (not needed). Default settings:
7 cases x 2 rounds x 4 blocks, about 80 s in all on a 16-core machine.

    python benchmarks/capture_overhead.py [--calls 300] [--rounds 3] [--steps | --paired trace|off]
    python benchmarks/capture_overhead.py --paired journal [--rounds 2] [--block-s 1.02]
"""

import argparse
import os
import queue
import socket
import statistics
import sys
import tempfile
import threading
import time
from contextlib import nullcontext

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from tracemerge.capture import profile
from tracemerge.capture.journal import PERIOD_S

MODES = ("none", "torch", "capture", "capture_off")
IN_FLIGHT = 50
# --paired journal: a block holds two flushes of the journal (one every PERIOD_S), the
# second one late enough to fall inside it, of the records of its own calls
BLOCK_S = 2 * PERIOD_S + 0.02

_commands = queue.Queue()
_entered = threading.Event()
_held = {}  # worker1's capture while it serves a mode (its journal is switched by _journal_switch)


def py_add(a, b):
    return a + b


class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


@rpc.functions.async_execution
def async_add(a, b):
    fut = torch.futures.Future()
    fut.set_result(a + b)
    return fut


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


def _case_remote_builtin(x, n):
    for _ in range(n):
        rpc.remote("worker1", torch.add, args=(x, 1)).to_here()


def _case_rref_proxy(x, n):
    counter = rpc.remote("worker1", Counter)
    for _ in range(n):
        counter.rpc_sync().incr()


def _case_async_execution(x, n):
    for _ in range(n):
        rpc.rpc_sync("worker1", async_add, args=(x, 1))


CASES = {
    "rpc_sync(torch.add)": _case_sync_builtin,
    "rpc_sync(python fn)": _case_sync_python,
    "rpc_async(torch.add).wait()": _case_async_one_by_one,
    f"rpc_async x{IN_FLIGHT} in flight": _case_async_in_flight,
    "remote(torch.add).to_here()": _case_remote_builtin,
    "rref.rpc_sync().incr()": _case_rref_proxy,
    "rpc_sync(async_execution fn)": _case_async_execution,
}


def _context(mode, out_dir):
    if mode == "none":
        return nullcontext()
    if mode == "torch":
        return torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            experimental_config=torch._C._profiler._ExperimentalConfig(profile_all_threads=True))
    return profile(out_dir, trace=(mode == "capture"))


def _command(cmd):
    """Served by worker1: queue a command for its main thread; wait until it is in the context."""
    _entered.clear()
    _commands.put(cmd)
    if cmd is not None and cmd[0] == "enter":
        _entered.wait()


def _worker(rank, port, calls, rounds, out_dir, cases, paired=None, block_s=BLOCK_S):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
    if rank == 1:
        _serve_modes(out_dir)
    elif paired == "journal":
        _paired_journal(rounds, out_dir, block_s)
    elif paired is not None:
        _paired(calls, rounds, out_dir, paired == "trace", cases)
    else:
        _drive(calls, rounds, out_dir, cases)
    rpc.shutdown()


def _serve_modes(out_dir):
    while (cmd := _commands.get()) is not None:
        with _context(cmd[1], os.path.join(out_dir, "w1")) as held:
            _held["capture"] = held
            _entered.set()
            assert _commands.get() == ("exit",)
            del _held["capture"]


def _drive(calls, rounds, out_dir, cases):
    x = torch.ones(16)
    _case_sync_builtin(x, 200)  # warm up connections and code paths
    us = {(case, mode): [] for case in cases for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            rpc.rpc_sync("worker1", _command, args=(("enter", mode),))
            with _context(mode, os.path.join(out_dir, "w0")):
                for case in cases:
                    run = CASES[case]
                    t0 = time.perf_counter_ns()
                    run(x, calls)
                    us[(case, mode)].append((time.perf_counter_ns() - t0) / calls / 1000)
            rpc.rpc_sync("worker1", _command, args=(("exit",),))
    rpc.rpc_sync("worker1", _command, args=(None,))
    _print_table(us, calls, rounds, cases)


def _print_table(us, calls, rounds, cases):
    """Medians over rounds; the ratios are medians of each round's own ratio (the modes of
    one round ran back to back, so a ratio cancels most of what the machine did)."""
    print(f"µs per RPC, median of {rounds} rounds x {calls} calls, loopback, "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("| case | none (min-max) | torch profiler | capture | capture/torch | capture, trace=False | "
          "trace=False/none |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        none, prof, cap, off = (us[(case, m)] for m in MODES)
        cap_torch = statistics.median(c / t for c, t in zip(cap, prof))
        off_none = statistics.median(o / n for o, n in zip(off, none))
        print(f"| {case} | {statistics.median(none):.0f} ({min(none):.0f}-{max(none):.0f}) | "
              f"{statistics.median(prof):.0f} | {statistics.median(cap):.0f} | {cap_torch:.2f} | "
              f"{statistics.median(off):.0f} | {off_none:.2f} |")


def _untraced(api):
    """The torch function inside a wrapper that capture swaps: a call without capture's
    instrumentation, while the capture (and its profiler) runs."""
    return getattr(api, "__wrapped__")


def _paired_cases(x):
    """case -> (traced call, the same call untraced), for --paired."""
    from torch.distributed.rpc import rref_proxy
    from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT

    sync, async_, remote = _untraced(rpc.rpc_sync), _untraced(rpc.rpc_async), _untraced(rpc.remote)
    counter = rpc.remote("worker1", Counter)
    counter.rpc_sync().incr()  # the proxy's type, fetched once

    def in_flight(api):
        return lambda: torch.futures.wait_all([api("worker1", torch.add, args=(x, 1)) for _ in range(IN_FLIGHT)])

    return {
        "rpc_sync(torch.add)": (lambda: rpc.rpc_sync("worker1", torch.add, args=(x, 1)),
                                lambda: sync("worker1", torch.add, args=(x, 1))),
        "rpc_sync(python fn)": (lambda: rpc.rpc_sync("worker1", py_add, args=(x, 1)),
                                lambda: sync("worker1", py_add, args=(x, 1))),
        "rpc_async(torch.add).wait()": (lambda: rpc.rpc_async("worker1", torch.add, args=(x, 1)).wait(),
                                        lambda: async_("worker1", torch.add, args=(x, 1)).wait()),
        f"rpc_async x{IN_FLIGHT} in flight (per batch)": (in_flight(rpc.rpc_async), in_flight(async_)),
        "remote(torch.add).to_here()": (lambda: rpc.remote("worker1", torch.add, args=(x, 1)).to_here(),
                                        lambda: remote("worker1", torch.add, args=(x, 1)).to_here()),
        # what rref.rpc_sync() builds (a proxy whose method fetches the type, then sends
        # _local_invoke by the api it holds), holding the untraced api
        "rref.rpc_sync().incr()": (lambda: counter.rpc_sync().incr(),
                                   lambda: rref_proxy.RRefProxy(counter, sync, UNSET_RPC_TIMEOUT).incr()),
        "rpc_sync(async_execution fn)": (lambda: rpc.rpc_sync("worker1", async_add, args=(x, 1)),
                                         lambda: sync("worker1", async_add, args=(x, 1))),
    }


def _paired(calls, rounds, out_dir, trace, cases=tuple(CASES)):
    """Inside one capture on both workers, each case alternates blocks of ``calls`` calls
    traced and untraced (the torch function inside capture's wrapper: the same profiler,
    without capture's work), ``rounds`` times: traced/untraced of each pair is
    capture/torch.profiler (``trace=False``: capture without profiler / none), measured
    close together, which survives a loaded machine far better than separate jobs."""
    rpc.rpc_sync("worker1", _command, args=(("enter", "capture" if trace else "capture_off"),))
    x = torch.ones(16)
    rows = []
    with _context("capture" if trace else "capture_off", os.path.join(out_dir, "w0")):
        rpc.rpc_sync("worker1", torch.add, args=(x, 1))  # asks worker1 whether builtins may go natively
        for case, (traced, untraced) in _paired_cases(x).items():
            if not any(case.startswith(wanted) for wanted in cases):  # --case: only these
                continue
            n = max(1, calls // IN_FLIGHT) if "in flight" in case else calls
            ratios, plain = [], []
            for i in range(rounds):
                got = {}
                # which goes first alternates: a block that follows another starts warm
                for fn in (traced, untraced) if i % 2 else (untraced, traced):
                    t0 = time.perf_counter_ns()
                    for _ in range(n):
                        fn()
                    got[fn] = (time.perf_counter_ns() - t0) / n / 1000
                ratios.append(got[traced] / got[untraced])
                plain.append(got[untraced])
            rows.append((case, statistics.median(plain), min(plain), max(plain), statistics.median(ratios),
                         min(ratios), max(ratios)))
    rpc.rpc_sync("worker1", _command, args=(("exit",),))
    rpc.rpc_sync("worker1", _command, args=(None,))
    what = "capture / torch.profiler" if trace else "capture(trace=False) / no profiler"
    print(f"{what}, paired blocks of {calls} calls x {rounds}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("| case | untraced µs (min-max) | ratio, median (min-max) |")
    print("|---|---:|---:|")
    for case, med, lo, hi, ratio, rlo, rhi in rows:
        print(f"| {case} | {med:.0f} ({lo:.0f}-{hi:.0f}) | {ratio:.2f} ({rlo:.2f}-{rhi:.2f}) |")


def _switch(capture, on):
    """The journal of ``capture`` (a running ``profile``) writing (what waited flushed first)
    or paused: the capture as it is, and the capture without its journal."""
    if on:
        capture._journal.resume()
    else:
        capture._journal.pause()


def _journal_switch(on):
    """Served by worker1: its capture's journal on or off (``_switch``), before it answers."""
    _switch(_held["capture"], on)


def _block(fn, seconds):
    """µs per call of ``fn``, called until ``seconds`` have passed."""
    n, t0 = 0, time.perf_counter_ns()
    end = t0 + int(seconds * 1e9)
    while True:
        fn()
        n += 1
        t = time.perf_counter_ns()
        if t >= end:
            return (t - t0) / n / 1000


def _paired_journal(rounds, out_dir, block_s):
    """Inside one capture (trace=True) on both workers, each case runs ``rounds`` rounds of
    four blocks of ``block_s`` seconds of traced calls, with the journal writing on both
    workers (on) and paused on both (off), in the order off-on-on-off, then on-off-off-on
    and so on: a round's ratio (its two "on" blocks' time over its two "off" blocks') is
    free of a steady drift of the call's time (under the profiler calls slow down as its
    buffers grow). A journal resumed just before its block flushes every period after,
    as a running capture does: a block of two periods and a little more holds two
    flushes, of the records of its own calls."""
    rpc.rpc_sync("worker1", _command, args=(("enter", "capture"),))
    x = torch.ones(16)
    rows = []
    with _context("capture", os.path.join(out_dir, "w0")) as capture:
        rpc.rpc_sync("worker1", torch.add, args=(x, 1))  # asks worker1 whether builtins may go natively
        for case, (traced, _) in _paired_cases(x).items():
            ratios, off = [], []
            for i in range(rounds):
                got = {True: 0.0, False: 0.0}
                for on in (True, False, False, True) if i % 2 else (False, True, True, False):
                    rpc.rpc_sync("worker1", _journal_switch, args=(on,))
                    _switch(capture, on)
                    got[on] += _block(traced, block_s)
                ratios.append(got[True] / got[False])
                off.append(got[False] / 2)
            rows.append((case, statistics.median(off), min(off), max(off), statistics.median(ratios),
                         min(ratios), max(ratios)))
        print(f"capture with its journal / without (paused on both workers), {rounds} rounds of 4 blocks of "
              f"{block_s:g} s (off-on-on-off, on-off-off-on, ...), torch {torch.__version__}, {os.cpu_count()} CPUs")
        print("| case | journal off µs (min-max) | journal on / off, median (min-max) |")
        print("|---|---:|---:|")
        for case, med, lo, hi, ratio, rlo, rhi in rows:
            print(f"| {case} | {med:.0f} ({lo:.0f}-{hi:.0f}) | {ratio:.3f} ({rlo:.3f}-{rhi:.3f}) |")
        print(f"| median of the cases | | {statistics.median(r[4] for r in rows):.3f} |", flush=True)
        # the captures' files are not needed: both workers end here, without exporting the
        # events of a minute of calls (that export would take longer than the blocks did)
        rpc.rpc_sync("worker1", _leave)
        os._exit(0)


def _leave():
    """Served by worker1: end the process once this call has answered."""
    sys.stdout.flush()
    threading.Timer(0.2, os._exit, args=(0,)).start()


def _timed(fn, n=20_000):
    """µs per call of ``fn()``, best of 5 runs of ``n`` (the least disturbed), in this
    thread's CPU time: everything runs on it, and time the machine gave other work while
    this thread waited is not counted (on a shared machine, most of the noise)."""
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time_ns() - t0) / n / 1000)
    return best


def _steps():
    """Each step of the capture's own work for one RPC, timed alone (one process, RPC to
    itself, the profiler running as under capture); the RPC itself is a stub."""
    from torch.distributed.rpc.internal import PythonUDF, _internal_rpc_pickler

    from tracemerge.capture import recorder
    from tracemerge.capture import rpc as crpc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    rpc.init_rpc("worker0", rank=0, world_size=1)
    x = torch.ones(16)
    rows = []
    # this release's process state (recorder.Process), or the previous release's module globals
    state = getattr(recorder, "process", recorder)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                experimental_config=torch._C._profiler._ExperimentalConfig(profile_all_threads=True)):
        rec = recorder.Recorder(traced=True)  # as under capture with its profiler
        try:  # asked: builtins to worker0 go natively once it answers
            state.peers.route(0)
        except TypeError:  # the previous release's Peers (run side by side with this one)
            state.peers.route(0, [])
        state.peers.answer(0, "bench")

        def stub(to, func, args, kwargs, timeout):
            return None

        def stub_async(to, func, args, kwargs, timeout):
            return torch.futures.Future()

        def async_call():
            traced_async("worker0", torch.add, (x, 1)).set_result(None)

        # through the wrapper capture puts inside rpc_sync (traced: what a call runs)
        traced = crpc._traced_api("rpc_sync", stub)
        traced_async = crpc._traced_api("rpc_async", stub_async)
        state.activate(rec)
        try:
            rows.append(("caller: builtin sent natively (the traced rpc_sync, all of it)",
                         _timed(lambda: traced("worker0", torch.add, (x, 1)))))
            rows.append(("caller: Python function, wrapped (the traced rpc_sync, all of it)",
                         _timed(lambda: traced("worker0", py_add, (x, 1)))))
            rows.append(("caller: rpc_async of a builtin sent natively, its future completed after "
                         "(the traced rpc_async, all of it)",
                         _timed(async_call, 5_000) - _timed(lambda: torch.futures.Future().set_result(None))))
        finally:
            state.deactivate()
        header = ("0:1", "rpc_sync", "py_add", "rpc_sync#py_add(worker0 -> worker1)", 0, 1, "worker0", "worker1")
        plain = _timed(lambda: py_add(x, 1))
        state.activate(rec)
        try:
            rows.append(("callee: _serve around the function, capturing",
                         _timed(lambda: crpc._serve(header, py_add, (x, 1), {})) - plain))
        finally:
            state.deactivate()
        rows.append(("callee: _serve around the function, not capturing (side note only)",
                     _timed(lambda: crpc._serve(header, py_add, (x, 1), {})) - plain))
        ser = _internal_rpc_pickler.serialize
        rows.append(("both: pickling the wrapper and header (more than the function alone)",
                     _timed(lambda: ser(PythonUDF(crpc._serve, (header, py_add, (x, 1), {}), {})))
                     - _timed(lambda: ser(PythonUDF(py_add, (x, 1), {})))))
        wrapped, bare = ser(PythonUDF(crpc._serve, (header, py_add, (x, 1), {}), {})), ser(PythonUDF(py_add, (x, 1), {}))
        rows.append(("callee: unpickling the wrapper and header (more than the function alone)",
                     _timed(lambda: _internal_rpc_pickler.deserialize(*wrapped))
                     - _timed(lambda: _internal_rpc_pickler.deserialize(*bare))))
        rows.append(("  of which: span open+close (_record_function_with_args_*)",
                     _timed(lambda: crpc._span_exit(crpc._span_enter("rpc_sync#x(worker0 -> worker1)")))))
        rows.append(("  for comparison: record_function open+close (before)",
                     _timed(lambda: _record_function_once())))
    rpc.shutdown()
    print("| step (one call, timed alone) | µs |")
    print("|---|---:|")
    for label, us in rows:
        print(f"| {label} | {us:.2f} |")


def _record_function_once():
    with torch.autograd.profiler.record_function("rpc_sync#x(worker0 -> worker1)"):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, help="default 3; --paired journal: 2 (of 4 blocks each)")
    parser.add_argument("--steps", action="store_true", help="time each step of one call's bookkeeping alone")
    parser.add_argument("--case", action="append", choices=list(CASES), help="only these cases (repeatable)")
    parser.add_argument("--paired", choices=["trace", "off", "journal"],
                        help="one capture (trace=True, or trace=False) on both workers, traced and untraced "
                             "calls in alternating blocks: capture/torch.profiler (or /no profiler) per case; "
                             "journal: one capture, blocks with its journal writing and paused: on/off per case")
    parser.add_argument("--block-s", type=float, default=BLOCK_S,
                        help="--paired journal: seconds per block (two journal flush periods and a little more: "
                             "two flushes; default %(default)s)")
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = 2 if args.paired == "journal" else 3
    if args.steps:
        _steps()
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_worker, args=(port, args.calls, args.rounds, out_dir, args.case or list(CASES), args.paired,
                                args.block_s), nprocs=2)


if __name__ == "__main__":
    main()
