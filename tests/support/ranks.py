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


def rpc_records(rpc_id, caller, callee, t1, t2, t3, t4, kind="rpc_async", func="f", worker="w", names=False):
    """One call's two records, (caller's, callee's): sent by rank ``caller`` at ``t1`` and
    completed at ``t4`` on its clock, run by ``callee`` from ``t2`` to ``t3`` on its own (ns).
    The call is named ``KIND#FUNC(WORKER<caller> -> WORKER<callee>)``; ``names`` adds the
    workers' names (``caller_name``, ``callee_name``) as capture writes them."""
    common = {"rpc_id": rpc_id, "kind": kind, "func": func, "name": f"{kind}#{func}({worker}{caller} -> {worker}{callee})",
              "caller": caller, "callee": callee}
    if names:
        common.update(caller_name=f"worker{caller}", callee_name=f"worker{callee}")
    common["status"] = "ok"
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


US = 1000  # ns a µs


def ns(us):
    """µs after BASE as a record's wall-clock ns."""
    return BASE + int(us * US)


class Ranks:
    """Events and records per rank, written as rank files; times in µs after BASE."""

    def __init__(self, world):
        self.world = world
        self.events = {r: [] for r in range(world)}
        self.rpcs = {r: [] for r in range(world)}
        self.colls = {r: [] for r in range(world)}
        self.seq = {r: 0 for r in range(world)}
        self.served = {r: [] for r in range(world)}

    def _next_id(self, caller):
        self.seq[caller] += 1
        return f"{caller}:{self.seq[caller] - 1}"

    @staticmethod
    def _records(rpc_id, caller, callee, func, kind, t1, t2, t3, t4):
        return rpc_records(rpc_id, caller, callee, ns(t1), ns(t2), ns(t3), ns(t4), kind=kind, func=func,
                           worker="worker", names=True)

    def op(self, rank, name, start, end, tid=1, cat="cpu_op"):
        self.events[rank].append(x(name, start, end - start, pid=100 + rank, tid=tid, cat=cat))

    def rpc(self, caller, callee, func, t1, t2, t3, t4, caller_tid=1, callee_tid=7, kind="rpc_sync"):
        rpc_id = self._next_id(caller)
        sent, served = self._records(rpc_id, caller, callee, func, kind, t1, t2, t3, t4)
        name = sent["name"]
        self.rpcs[caller].append(sent)
        self.rpcs[callee].append(served)
        self.events[caller].append(x(name, t1, t4 - t1, pid=100 + caller, tid=caller_tid, cat="user_annotation",
                                     rpc_id=rpc_id, role="caller"))
        self.events[callee].append(x(name + "#remote", t2, t3 - t2, pid=100 + callee, tid=callee_tid,
                                     cat="user_annotation", rpc_id=rpc_id, role="callee"))
        return name

    def builtin(self, caller, callee, func, t1, t2, t3, t4, caller_tid=1, callee_tid=7, kind="rpc_async"):
        """A builtin sent as itself: the caller's record and span; on the callee only the op
        that served it (its event and its ``served_ops`` entry), which the job pairs."""
        rpc_id = self._next_id(caller)
        sent, _ = self._records(rpc_id, caller, callee, func, kind, t1, t2, t3, t4)
        name = sent["name"]
        self.rpcs[caller].append({**sent, "native": True})
        self.events[caller].append(x(name, t1, t4 - t1, pid=100 + caller, tid=caller_tid, cat="user_annotation",
                                     rpc_id=rpc_id, role="caller"))
        self.op(callee, func, t2, t3, tid=callee_tid)
        self.served[callee].append({"name": func, "tid": callee_tid, "start_ns": ns(t2), "end_ns": ns(t3)})
        return name

    def collective(self, seq, arrive, end, op="all_reduce"):
        for rank, (a, e) in enumerate(zip(arrive, end)):
            self.colls[rank].append({"op": op, "group": "0", "group_ranks": list(range(self.world)), "seq": seq,
                                     "bytes": 4096, "start_ns": ns(a), "end_ns": ns(e)})

    def job(self, tmp_path):
        """The job as the analyses see it: the rank files written in ``tmp_path``, read by
        the real Session, aligned by wall clock (one clock: the records are planted on it)."""
        # builtins sent as themselves are paired on one machine's clock
        extra = {r: {"served_ops": self.served[r], "boot_id": "one-machine"} if any(self.served.values()) else {}
                 for r in range(self.world)}
        paths = [write(tmp_path / f"rank{r}.json", rank_file(self.events[r], r, rpcs=self.rpcs[r],
                                                              collectives=self.colls[r], world_size=self.world,
                                                              **extra[r]))
                 for r in range(self.world)]
        from tracemerge.analysis.job_timeline import job_timeline
        from tracemerge.job import Session
        from tracemerge.runtime.engine import LocalEngine

        session = Session.open(paths)
        return job_timeline(session, session.align("wall"), LocalEngine(1))


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
