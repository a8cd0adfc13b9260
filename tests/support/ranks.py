"""Rank files built by the tests: Kineto-shaped events and documents with known clocks, the
tracemerge block capture writes (RPC records included), and the files written and read back.

Times: an event's ``ts``/``dur`` are µs after the document's ``baseTimeNanoseconds``
(``BASE`` unless given); a record's ``*_ns`` are nanoseconds on the rank's wall clock, so a
test plants a clock shift by moving one rank's records or its ``base``."""

import gzip
import json
import os

BASE = 1_790_000_000_000_000_000  # a Kineto-style baseTimeNanoseconds


def x(name, ts, dur, pid=100, tid=1, cat="cpu_op", **args):
    """One complete ("X") event; keyword arguments become its args."""
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


def rpc_records(rpc_id, caller, callee, t1, t2, t3, t4):
    """One rpc_async call's two records, (caller's, callee's): sent at ``t1`` and completed at
    ``t4`` on the caller's clock, run from ``t2`` to ``t3`` on the callee's (ns)."""
    common = {"rpc_id": rpc_id, "kind": "rpc_async", "func": "f", "name": f"rpc_async#f(w{caller} -> w{callee})",
              "caller": caller, "callee": callee, "status": "ok"}
    return ({**common, "role": "caller", "send_ns": t1, "complete_ns": t4},
            {**common, "role": "callee", "start_ns": t2, "end_ns": t3})


def calling_ranks(where, events0, events1, start_ns=BASE + 5 * 10**8, calls=3):
    """Two rank files written in ``where`` (rank{R}.json.gz), profiled from ``start_ns``, rank 0
    calling rank 1 ``calls`` times, one a ms, on one clock (sent, run, ended and answered
    100 µs apart); ``events0``/``events1`` are each rank's events (µs after BASE)."""
    pairs = [rpc_records(f"0:{k}", 0, 1, *(start_ns + k * 10**6 + d for d in (0, 100_000, 200_000, 300_000)))
             for k in range(calls)]
    docs = [rank_file(events0, 0, rpcs=[c for c, _ in pairs], start_ns=start_ns),
            rank_file(events1, 1, rpcs=[r for _, r in pairs], start_ns=start_ns)]
    return [write(os.path.join(where, f"rank{r}.json.gz"), d) for r, d in enumerate(docs)]


def write(path, doc, gz=None):
    """Write ``doc`` as JSON to ``path``; gzip when the name ends in .gz (or ``gz`` says so)."""
    data = json.dumps(doc).encode()
    if gz if gz is not None else str(path).endswith(".gz"):
        data = gzip.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def load_output(path):
    """A JSON output read back (gunzipped when its name ends in .gz)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.load(f)
