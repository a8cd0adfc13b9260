"""Ground truth for alignment: synthetic multi-rank jobs with known clocks, and a skew
transform of real rank files.

A rank's true clock is a :class:`~tracemerge.clocks.clock.ClockModel` against true time
(``local = true + offset_ns + drift_ppm*1e-6*(true - anchor_ns)``). Network delays are
asymmetric and heavy-tailed (a floor plus a Pareto tail, with different scales per
direction), so the minimum-δ sample is rare and midpoint estimates are biased — as on
real networks.
"""

import os
from dataclasses import dataclass, field

import numpy as np
import orjson

from tracemerge.clocks.clock import ClockModel
from tracemerge.files.codecs import codec_for

from .ranks import rpc_records

T0_NS = 1_700_000_000_000_000_000  # true time at the job's start (Unix epoch ns)
BASE_FLOOR_NS = 7_889_238_000_000_000  # Kineto floors baseTimeNanoseconds to this


@dataclass
class Job:
    """A synthetic job: per-rank documents (rank files) and the true clocks that wrote them."""

    truth: dict                      # {rank: ClockModel against true time}
    docs: dict                       # {rank: rank-file document}
    span_true: tuple                 # (first, last) true ns
    pairs: list = field(default_factory=list)

    def write(self, directory, kineto=False):
        """Write ``rank{R}.json.gz`` per rank; ``kineto`` drops the tracemerge block (plain traces)."""
        os.makedirs(directory, exist_ok=True)
        paths = []
        for rank, doc in sorted(self.docs.items()):
            if kineto:
                doc = {k: v for k, v in doc.items() if k != "tracemerge"}
            path = os.path.join(directory, f"rank{rank}.json.gz")
            with open(path, "wb") as f:
                f.write(codec_for(path).compress(orjson.dumps(doc)))
            paths.append(path)
        return paths


def true_error(clocks, truth, reference, span_true, points=257):
    """{rank: max |estimated - true| reference-clock ns} over ``span_true`` for estimated ``clocks``."""
    t = np.linspace(span_true[0], span_true[1], points).astype(np.int64)
    ref_local = truth[reference].to_local(t)
    return {r: int(np.max(np.abs(np.asarray(clocks[r].to_reference(truth[r].to_local(t))) - ref_local)))
            for r in clocks}


def true_relative(truth, rank, reference, span_true):
    """The truth of ``rank`` against ``reference`` as a ClockModel (what alignment should find)."""
    t = np.array(span_true, dtype=np.int64)
    ref_local, local = truth[reference].to_local(t), truth[rank].to_local(t)
    offset = local - ref_local
    drift = (offset[1] - offset[0]) / (ref_local[1] - ref_local[0]) * 1e6
    return ClockModel(rank=rank, method="truth", offset_ns=int(offset[0]), drift_ppm=float(drift),
                      anchor_ns=int(ref_local[0]))


def delays(rng, n, floor_ns, scale_ns, alpha=1.5):
    """Heavy-tailed one-way delays: floor plus a Pareto(alpha) tail."""
    return (floor_ns + scale_ns * (rng.pareto(alpha, n))).astype(np.int64)


def generate(ranks=4, pairs="star", duration_s=60.0, calls=200, max_offset_ns=10_000_000_000,
             max_drift_ppm=200.0, collectives=0, seed=0, offsets=None, drifts=None):
    """A synthetic job with known clocks.

    Offsets and drifts are drawn per rank against true time, so two ranks differ by up to
    ``max_offset_ns`` and ``max_drift_ppm``. ``pairs``: "star" (rank 0 calls everyone), "chain" (r calls r+1), "none", or a list of
    (caller, callee). ``calls`` RPCs per pair, spread uniformly over the job, each direction
    with its own delay floor and tail; ``collectives`` all_reduces over every rank.
    """
    rng = np.random.default_rng(seed)
    if pairs == "star":
        pairs = [(0, r) for r in range(1, ranks)]
    elif pairs == "chain":
        pairs = [(r, r + 1) for r in range(ranks - 1)]
    elif pairs == "none":
        pairs = []
    duration = int(duration_s * 1e9)
    truth = {}
    for r in range(ranks):
        off = offsets[r] if offsets else int(rng.uniform(-max_offset_ns, max_offset_ns) / 2)
        dr = drifts[r] if drifts else float(rng.uniform(-max_drift_ppm, max_drift_ppm) / 2)
        truth[r] = ClockModel(rank=r, method="truth", offset_ns=off, drift_ppm=dr, anchor_ns=T0_NS)
    rpcs = {r: [] for r in range(ranks)}
    spans = {r: [] for r in range(ranks)}
    seq = {r: 0 for r in range(ranks)}
    for caller, callee in pairs:
        t1 = T0_NS + np.sort(rng.integers(duration // 100, duration - duration // 100, calls))
        fwd = delays(rng, calls, rng.uniform(20e3, 80e3), rng.uniform(10e3, 300e3))
        back = delays(rng, calls, rng.uniform(20e3, 80e3), rng.uniform(10e3, 300e3))
        work = rng.integers(5_000, 500_000, calls)
        t2 = t1 + fwd
        t3 = t2 + work
        t4 = t3 + back
        l1, l4 = truth[caller].to_local(t1), truth[caller].to_local(t4)
        l2, l3 = truth[callee].to_local(t2), truth[callee].to_local(t3)
        for i in range(calls):
            rpc_id = f"{caller}:{seq[caller]}"
            seq[caller] += 1
            sent, served = rpc_records(rpc_id, caller, callee, int(l1[i]), int(l2[i]), int(l3[i]), int(l4[i]),
                                       func="udf", worker="worker", names=True)
            name = sent["name"]
            rpcs[caller].append(sent)
            rpcs[callee].append(served)
            spans[caller].append((name, int(l1[i]), int(l4[i]), {"rpc_id": rpc_id, "role": "caller"}, "python_function", 1))
            spans[callee].append((name + "#remote", int(l2[i]), int(l3[i]), {"rpc_id": rpc_id, "role": "callee"}, "user_annotation", 2))
    colls = {r: [] for r in range(ranks)}
    if collectives:
        t = T0_NS + np.linspace(duration // 50, duration - duration // 50, collectives).astype(np.int64)
        for k, tk in enumerate(t):
            arrive = tk + rng.exponential(2e6, ranks).astype(np.int64)
            done = arrive.max() + 30_000
            leave = done + delays(rng, ranks, 5_000, 20_000)
            for r in range(ranks):
                start, end = int(truth[r].to_local(int(arrive[r]))), int(truth[r].to_local(int(leave[r])))
                colls[r].append({"op": "all_reduce", "group": "0", "group_ranks": list(range(ranks)), "seq": k,
                                 "bytes": 4096, "start_ns": start, "end_ns": end})
                spans[r].append(("ncclDevKernel_AllReduce_Sum_f32_RING_LL", start, end,
                                 {"Collective name": "allreduce", "Process Group Name": "0",
                                  "Process Group Ranks": str(list(range(ranks))), "Seq": k,
                                  "In msg nelems": 1024, "dtype": "Float"}, "kernel", 3))
    span_true = (T0_NS, T0_NS + duration)
    docs = {r: _document(r, ranks, truth[r], span_true, rpcs[r], colls[r], spans[r]) for r in range(ranks)}
    return Job(truth=truth, docs=docs, span_true=span_true, pairs=list(pairs))


def _document(rank, world, clock, span_true, rpcs, colls, spans):
    start, stop = (int(x) for x in clock.to_local(np.array(span_true, dtype=np.int64)))
    base = start - start % BASE_FLOOR_NS
    events = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": _us(start - base), "dur": _us(stop - start), "args": {}},
        {"ph": "M", "name": "process_name", "pid": 100 + rank, "tid": 0, "args": {"name": f"python {rank}"}},
    ]
    for name, t0, t1, args, cat, tid in spans:
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 100 + rank, "tid": tid,
                       "ts": _us(t0 - base), "dur": _us(t1 - t0), "args": args})
    block = {"version": 1, "job_id": "synthetic", "rank": rank, "world_size": world, "worker_name": f"worker{rank}",
             "hostname": f"host{rank}", "pid": 100 + rank, "cycle": None, "profile_start_ns": start,
             "profile_stop_ns": stop, "rpcs": rpcs, "collectives": colls}
    return {"tracemerge": block, "schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world},
            "baseTimeNanoseconds": base, "traceEvents": events}


def _us(ns):
    return int(ns) / 1000


def skew(doc, offset_ns, drift_ppm=0.0, anchor_ns=None, others=None):
    """A copy of a rank-file document as if its clock read ``offset_ns`` more at ``anchor_ns``
    and gained ``drift_ppm``: every event ``ts`` (and ``dur``) and every ``*_ns`` field —
    but those inside a ``"clock_rank": R`` object (docs/rank-file-format.md) are on rank
    R's clock, moved by ``others[R]`` (a ClockModel; kept where ``others`` has no R).

    ``baseTimeNanoseconds`` is kept, so event times move inside ``ts``, computed in ns.
    ``anchor_ns`` defaults to the first event (the floored base is months earlier, where
    drift would have added up to minutes).
    """
    base = doc.get("baseTimeNanoseconds") or 0
    if anchor_ns is None:
        anchor_ns = base + min((round(e["ts"] * 1000) for e in doc["traceEvents"]
                                if isinstance(e.get("ts"), (int, float))), default=0)
    clock = ClockModel(rank=-1, method="skew", offset_ns=int(offset_ns), drift_ppm=float(drift_ppm),
                       anchor_ns=int(anchor_ns))
    out = _skew_events(doc, clock)
    if isinstance(doc.get("tracemerge"), dict):
        out["tracemerge"] = _skew_ns(doc["tracemerge"], clock, others)
    return out


def skew_job(docs, truth):
    """Copies of a job's rank-file documents ({rank: doc}) as if rank R's clock read
    ``truth[R].to_local(t)`` at true time t (a ClockModel): every event ``ts``/``dur`` by its
    rank's clock, every ``*_ns`` field by the clock_rank rule (docs/rank-file-format.md:
    inside an object with ``clock_rank: R`` by R's clock, elsewhere by the file's rank's)."""
    out = {}
    for rank, doc in docs.items():
        out[rank] = _skew_events(doc, truth[rank])
        if isinstance(doc.get("tracemerge"), dict):
            out[rank]["tracemerge"] = _skew_ns(doc["tracemerge"], truth[rank], truth)
    return out


def on_machines(docs, skews, anchor_ns):
    """Copies of one machine's rank-file documents ({rank: doc}) as if each rank had run on a
    machine of its own, whose clock read ``skews[R] = (offset_ns, drift_ppm)`` more than the
    shared one at ``anchor_ns`` (a rank not in ``skews`` keeps it): every time moved by
    :func:`skew_job`, and a boot id per machine, ``machine-R`` (inside a ``"clock_rank": R``
    object, R's: what a rank read from a peer came from the peer's machine). Returns the
    documents and {rank: the ClockModel its times were moved by}."""
    clocks = {r: ClockModel(rank=r, method="skew", offset_ns=int(skews.get(r, (0, 0.0))[0]),
                            drift_ppm=float(skews.get(r, (0, 0.0))[1]), anchor_ns=int(anchor_ns)) for r in docs}
    moved = skew_job(docs, clocks)
    for rank, doc in moved.items():
        doc["tracemerge"] = _own_machine(doc["tracemerge"], rank)
    return moved, clocks


def _own_machine(value, rank):
    if isinstance(value, dict):
        if isinstance(value.get("clock_rank"), int):
            rank = value["clock_rank"]
        return {k: (f"machine-{rank}" if k == "boot_id" else _own_machine(v, rank)) for k, v in value.items()}
    if isinstance(value, list):
        return [_own_machine(v, rank) for v in value]
    return value


def write_docs(docs, out_dir):
    """Write each document of {rank: doc} to ``out_dir/rank{R}.json.gz``; their paths, by rank."""
    paths = []
    for rank, doc in sorted(docs.items()):
        path = os.path.join(str(out_dir), f"rank{rank}.json.gz")
        _write(path, orjson.dumps(doc))
        paths.append(path)
    return paths


def _write(path, data):
    codec = codec_for(path)
    with open(path, "wb") as f:
        f.write(codec.compress(data) if codec else data)


def _skew_events(doc, clock):
    """A copy of ``doc`` with every event's ``ts`` (and ``dur``) read on ``clock``."""
    base = doc.get("baseTimeNanoseconds") or 0
    out = dict(doc)
    out["traceEvents"] = [dict(e) for e in doc["traceEvents"]]
    timed = [e for e in out["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    ts = np.array([round(e["ts"] * 1000) for e in timed], dtype=np.int64) + base
    new = clock.to_local(ts)
    with_dur = [i for i, e in enumerate(timed) if isinstance(e.get("dur"), (int, float))]
    ends = clock.to_local(ts[with_dur] + np.array([round(timed[i]["dur"] * 1000) for i in with_dur], dtype=np.int64))
    for e, t in zip(timed, (new - base).tolist()):
        e["ts"] = t / 1000
    for i, end in zip(with_dur, ends.tolist()):
        timed[i]["dur"] = (end - int(new[i])) / 1000
    return out


def _skew_ns(value, clock, others=None):
    if isinstance(value, dict):
        if others is not None and isinstance(value.get("clock_rank"), int):
            clock = others.get(value["clock_rank"])
            if clock is None:
                return value
        return {k: (clock.to_local(v) if k.endswith("_ns") and isinstance(v, int) and not isinstance(v, bool)
                    else _skew_ns(v, clock, others)) for k, v in value.items()}
    if isinstance(value, list):
        return [_skew_ns(v, clock, others) for v in value]
    return value


def skew_file(src, dst, offset_ns, drift_ppm=0.0, anchor_ns=None):
    """Write the skewed copy of rank file ``src`` to ``dst`` (compressed when its name ends in
    .gz or .zst)."""
    from tracemerge.inputs.chrome import read_bytes
    doc = orjson.loads(read_bytes(src))
    _write(dst, orjson.dumps(skew(doc, offset_ns, drift_ppm, anchor_ns)))
    return dst
