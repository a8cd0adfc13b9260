"""What the journal (tracemerge/capture/journal.py) costs per recorded call: the CPU time of
its flushes, per record, in one process (no RPC: the records are made as the capture's
wrappers make them), next to the time one RPC takes on loopback.

The flusher reads the recorder's lists off the calls' path, so a call pays nothing on its
own path; what the journal costs the job is the CPU its thread takes (and the GIL it holds
meanwhile): flushes of N new records each (a call issued and ended between two flushes is
written once; one in flight at a flush twice). CPU time (``time.process_time``), min of
rounds, is steady on a loaded machine where wall-clock pairs of RPC runs are not.

    python benchmarks/journal_cost.py [--records 20000] [--rounds 5]
"""

import argparse
import tempfile
import threading
import time
from pathlib import Path

from tracemerge.capture import journal, recorder


def _call(n: int, done: bool) -> list:
    """An issued call as rpc._issue keeps it (recorder.C_* fields)."""
    header = (f"0:{n}", "rpc_sync", "udf", "rpc_sync#udf(worker0 -> worker1)", 0, 1, "worker0", "worker1")
    t = time.time_ns()
    return [header, False, t, threading.get_native_id(), t + 1000 if done else None, "ok" if done else "pending",
            None, False, None, None]


def _served(n: int) -> tuple:
    header = (f"1:{n}", "rpc_sync", "udf", "rpc_sync#udf(worker1 -> worker0)", 1, 0, "worker1", "worker0")
    t = time.time_ns()
    return header, {"rpc_id": header[0], "start_ns": t, "end_ns": t + 1000, "tid": 1, "status": "ok"}


def per_record_us(records: int, in_flight: float, rounds: int) -> float:
    """CPU µs per record of flushing ``records`` new ones (``in_flight``: the share still
    pending at their first flush, written again when they end)."""
    best = float("inf")
    with tempfile.TemporaryDirectory() as where:
        for _ in range(rounds):
            rec = recorder.Recorder()
            j = journal.Journal(Path(where) / "rank0.journal", lambda: {"rank": 0}, rec, period_s=3600)
            j.start()
            pending = int(records * in_flight)
            calls = [_call(n, done=n >= pending) for n in range(records // 2)]
            rec.calls.extend(calls)
            rec.served.extend(_served(n) for n in range(records - records // 2))
            t0 = time.process_time()
            j.flush()
            for call in calls[:pending]:  # they end: written again at the next flush
                call[recorder.C_COMPLETE], call[recorder.C_STATUS] = time.time_ns(), "ok"
            j.flush()
            best = min(best, (time.process_time() - t0) / records * 1e6)
            j.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for share in (0.0, 0.1, 1.0):
        us = per_record_us(args.records, share, args.rounds)
        print(f"| {share:.0%} in flight at their first flush | {us:.2f} µs CPU per record |")


if __name__ == "__main__":
    main()
