"""Collective records from plain Kineto GPU/NCCL traces (no tracemerge block needed).

Kineto writes the c10d metadata — ``Process Group Name``, ``Seq`` (``seq_num`` in some
versions), ``Collective name``, ``In msg nelems``, ``dtype``, ``Process Group Ranks`` — on
``record_param_comms`` CPU ops and on the NCCL kernels. (group, seq) names the same
collective on every rank. Kernels are preferred: a kernel ends when the collective
completed, while the CPU op of an asynchronous NCCL call ends when it was enqueued.

NCCL traces of torch up to at least 2.3 carry no sequence number. NCCL runs the
collectives of one process group in the order every rank issued them (a rank that issued
them in another order would hang the job), so the k-th collective of a group on one rank
is the k-th on every other: such records get that k as their ``seq``, with
``seq_inferred`` set and their ``dtype`` and ``nelems`` kept, so the join
(:func:`tracemerge.correlate.match.match_collectives`) can check that the k-th agree
across ranks in op, size and dtype, and stop matching that group where they do not.

Traces of torch before 2.2 name no group at all: their NCCL kernels are known by name
(``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``,
``ncclAllReduceRingLLKernel_sum_f32``), and their CPU side by ``nccl:all_reduce``-style
annotations, ``c10d::`` ops and ``record_param_comms``. A kernel reaches the CPU ops it was
launched from through its runtime launch (the same ``correlation``), which lies inside
them on the launching thread; what the kernel does not say itself (group, sequence
number, op, size, dtype) it takes from them. Kernels that still name no group are one
group, :data:`DEFAULT_GROUP` (the default process group of the files given), split by
the stream they ran on — a communicator has its own stream — numbered by first use on the
rank, since stream ids need not agree across ranks. Point-to-point kernels (send, recv, a
SendRecv kernel that no op names otherwise) are no collective of the group: a pair's. A
send or receive kernel whose launching ops name the peer (``Dst Rank`` / ``Src Rank``, which
``record_param_comms`` carries since torch 2.3) is a :func:`point_to_point` record instead;
one that names no peer, or no direction, is left out. Kernel records carry ``kernel: True``:
their end is the collective's completion on the GPU, which the ``nccl-kernel`` alignment
reads (:mod:`tracemerge.clocks.nccl_kernel`).
"""

import json
import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from tracemerge.model import RankTrace

PARAM_COMMS = "record_param_comms"
# record_param_comms ops that are no collective of their own (waiting on a work handle)
NOT_COLLECTIVES = frozenset(("wait",))
DTYPE_BYTES = {"float": 4, "float32": 4, "int": 4, "int32": 4, "half": 2, "float16": 2, "bfloat16": 2,
               "double": 8, "float64": 8, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1,
               "char": 1, "bool": 1, "uint8": 1, "int8": 1}
# the group of collectives whose trace names none: the default process group of the files given
DEFAULT_GROUP = "default"
# what an NCCL/RCCL kernel does, from its name (every NCCL generation's spelling)
KERNEL_KIND = re.compile(r"nccl(?:Dev)?(?:Kernel_)?(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|"
                         r"Send|Recv|AllToAll)", re.IGNORECASE)
# point-to-point operations (and SendRecv kernels nothing names otherwise): never a group's collective
POINT_TO_POINT = frozenset(("send", "recv", "isend", "irecv", "sendrecv"))
# CPU ops a collective is issued from: their args and names say what a kernel does not
CPU_PREFIXES = ("nccl:", "c10d::")
C10D_KEYS = ("Process Group Name", "Process Group ID", "Seq", "seq_num", "seq", "Collective name",
             "In msg nelems", "dtype", "Process Group Ranks", "Dst Rank", "Src Rank")
# a point-to-point op's direction, and the field that names its peer
P2P_DIRECTION = {"send": ("send", "Dst Rank"), "isend": ("send", "Dst Rank"),
                 "recv": ("recv", "Src Rank"), "irecv": ("recv", "Src Rank")}


def collectives(trace: RankTrace) -> List[Dict[str, Any]]:
    """[record] in the rank-file shape (op, group, group_ranks, seq, bytes, start_ns, end_ns);
    records without a sequence number get their per-group order instead (:func:`_inferred`).
    NCCL kernels are preferred (``kernel: True``), each completed with what its CPU ops say."""
    return communication(trace)[0]


def point_to_point(trace: RankTrace) -> List[Dict[str, Any]]:
    """[{op: "send" | "recv", peer, start_ns, end_ns, bytes, span}]: the rank's send and receive
    kernels that name their peer, in time order (``span``: the kernel, :func:`span_of`). Their times are the GPU's: a receive
    kernel cannot end before its send kernel started (CPU ops of asynchronous NCCL calls
    end when enqueued, which bounds nothing, so only kernels count)."""
    return communication(trace)[1]


def communication(trace: RankTrace) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(:func:`collectives`, :func:`point_to_point`) of ``trace`` from one pass over its
    communication events."""
    codes = [i for i, n in enumerate(trace.names) if isinstance(n, str)
             and (n == PARAM_COMMS or "nccl" in n.lower() or n.startswith(CPU_PREFIXES))]
    if not codes:
        return [], []
    hits = np.flatnonzero(np.isin(trace.name, codes) & trace.timed & (trace.dur >= 0))
    kernel = trace.code_of("kernel")
    on_gpu = trace.cat[hits] == kernel if kernel is not None else np.zeros(len(hits), bool)
    kernels, cpu = hits[on_gpu], hits[~on_gpu]
    recs, p2p = _kernel_records(trace, kernels, cpu) if len(kernels) else ([], [])
    if not recs:
        for i, args in zip(cpu.tolist(), trace.args.dicts(cpu.tolist())):
            rec = _record(args, int(trace.ts[i]), int(trace.dur[i]))
            if rec is not None:
                recs.append(rec)
    numbered = [r for r in recs if r["seq"] is not None]
    if numbered or not recs:
        return [_without_order_keys(r) for r in numbered], p2p
    return _inferred(recs), p2p


def _kernel_records(trace: RankTrace, kernels: np.ndarray,
                    cpu: np.ndarray) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(collective records, point-to-point records) of the NCCL kernels ``kernels``: their
    own c10d fields, else those of the CPU ops (``cpu``) around their launch; a kernel of no
    group is :data:`DEFAULT_GROUP`'s, split by its stream's order of first use."""
    kernel_args = trace.args.dicts(kernels.tolist())
    around = _launching_ops(trace, kernel_args, cpu)
    order = np.argsort(trace.ts[kernels], kind="stable")
    streams: Dict[Any, int] = {}
    unnamed: List[Tuple[int, Dict[str, Any]]] = []
    recs: List[Dict[str, Any]] = []
    p2p: List[Dict[str, Any]] = []
    for k in order.tolist():
        i = int(kernels[k])
        name = trace.names[int(trace.name[i])]
        kind = KERNEL_KIND.search(name)
        args = dict(kernel_args[k] or {})
        ops = around.get(k, [])
        for _, op_args in ops:           # the innermost op's fields first
            for key in C10D_KEYS:
                if key not in args and isinstance(op_args, dict) and key in op_args:
                    args[key] = op_args[key]
        if kind is None and "Collective name" not in args:
            continue
        own = _p2p_record(args, ops, int(trace.ts[i]), int(trace.dur[i]))
        if own is not None:
            own["span"] = span_of(trace, i)
            p2p.append(own)
            continue
        named = args.get("Process Group Name", args.get("Process Group ID")) is not None
        if not named:
            args["Process Group Name"] = DEFAULT_GROUP
        rec = _record(args, int(trace.ts[i]), int(trace.dur[i]))
        if rec is None:
            continue
        rec["kernel"] = True
        rec["kind"] = kind.group(1).lower() if kind else ""
        if not rec["op"]:
            op = _cpu_op(ops)
            # a batch (nccl:coalesced) is whatever its kernel runs
            rec["op"] = rec["kind"] if op in ("", "coalesced") else op
        if rec["op"].lower().replace("_", "") in POINT_TO_POINT:
            continue   # one pair's, in an order of their own: not a collective of the group
        if rec["nelems"] is None:
            rec["nelems"], rec["dtype"] = _cpu_size(ops)
            rec["bytes"] = (rec["nelems"] or 0) * DTYPE_BYTES.get(rec["dtype"].lower(), 0)
        if not named:
            unnamed.append((len(recs), rec))
            streams.setdefault(trace.tids[int(trace.tid[i])], len(streams))
            rec["stream"] = streams[trace.tids[int(trace.tid[i])]]
        recs.append(rec)
    if len(streams) > 1:   # one communicator per stream: each is a group of its own order
        for _, rec in unnamed:
            rec["group"] = f"{DEFAULT_GROUP}/stream{rec['stream']}"
    for _, rec in unnamed:
        rec.pop("stream", None)
    return recs, p2p


def span_of(trace: RankTrace, i: int) -> Dict[str, Any]:
    """The span a point-to-point record was read from, as its ``span`` names it: name,
    ts_ns, dur_ns (the rank's clock) and cat, what the size controls select by: the flow
    arrow's end goes on it (``place.arrows.P2pFlows``)."""
    code = int(trace.cat[i])
    cat = trace.names[code] if code >= 0 else ""
    return {"name": trace.names[int(trace.name[i])], "ts_ns": int(trace.ts[i]), "dur_ns": int(trace.dur[i]),
            "cat": cat if isinstance(cat, str) else ""}


def _p2p_record(args: Dict[str, Any], ops: List[Tuple[str, Optional[dict]]], ts: int,
                dur: int) -> Optional[Dict[str, Any]]:
    """The point-to-point record of a kernel whose fields (``args``, its launching ops'
    merged in) say a send or a receive and name the peer, else None."""
    name = args.get("Collective name") or _cpu_op(ops)
    direction = P2P_DIRECTION.get(str(name).lower().replace("_", ""))
    if direction is None:
        return None
    peer = args.get(direction[1])
    if not isinstance(peer, int) or isinstance(peer, bool) or peer < 0:
        return None
    nelems = args.get("In msg nelems")
    size = DTYPE_BYTES.get(str(args.get("dtype", "")).lower(), 0)
    return {"op": direction[0], "peer": peer, "start_ns": ts, "end_ns": ts + dur,
            "bytes": nelems * size if isinstance(nelems, int) and not isinstance(nelems, bool) else 0}


def _launching_ops(trace: RankTrace, kernel_args: List[Optional[dict]],
                   cpu: np.ndarray) -> Dict[int, List[Tuple[str, Optional[dict]]]]:
    """{kernel position: [(name, args)] of the CPU ops (``cpu``) its launch lies in, innermost
    first}: the launch is the runtime or driver event of the kernel's ``correlation``."""
    wanted = {a.get("correlation"): k for k, a in enumerate(kernel_args) if isinstance(a, dict)}
    wanted.pop(None, None)
    # NCCL launches through the runtime (cudaLaunchKernel) or, since CUDA 12, the driver (cuLaunchKernelEx)
    runtime = [c for c in (trace.code_of("cuda_runtime"), trace.code_of("cuda_driver")) if c is not None]
    if not wanted or not runtime or not len(cpu):
        return {}
    launches = np.flatnonzero(np.isin(trace.cat, runtime) & trace.timed)
    # only the launches inside some communication op can be one: their args alone are decoded
    # (a rank's runtime calls are most of its events)
    order = np.argsort(trace.ts[cpu], kind="stable")
    starts = trace.ts[cpu][order]
    reach = np.maximum.accumulate(trace.ts[cpu][order] + trace.dur[cpu][order])
    at = np.searchsorted(starts, trace.ts[launches], side="right") - 1
    launches = launches[(at >= 0) & (reach[np.maximum(at, 0)] >= trace.ts[launches])]
    found: Dict[int, int] = {}
    for i, args in zip(launches.tolist(), trace.args.chunked_dicts(launches.tolist())):
        if isinstance(args, dict) and args.get("correlation") in wanted:
            found[wanted[args["correlation"]]] = i
    if not found:
        return {}
    cpu_args = trace.args.dicts(cpu.tolist())
    keys = trace.thread_keys(cpu)
    start, end = trace.ts[cpu], trace.ts[cpu] + trace.dur[cpu]
    out: Dict[int, List[Tuple[str, Optional[dict]]]] = {}
    for k, i in found.items():
        t, key = int(trace.ts[i]), int(trace.thread_keys(np.array([i]))[0])
        inside = np.flatnonzero((keys == key) & (start <= t) & (end >= t))
        inside = inside[np.argsort(end[inside] - start[inside], kind="stable")]  # innermost first
        out[k] = [(trace.names[int(trace.name[int(cpu[j])])], cpu_args[j]) for j in inside.tolist()]
    return out


def _cpu_op(ops: List[Tuple[str, Optional[dict]]]) -> str:
    """The collective the ops around a launch issue: ``nccl:all_reduce`` gives ``all_reduce``,
    ``c10d::allreduce_`` ``allreduce``."""
    for name, _ in ops:
        if name.startswith("nccl:"):
            return name[len("nccl:"):]
    for name, _ in ops:
        if name.startswith("c10d::"):
            return name[len("c10d::"):].rstrip("_")
    return ""


def _cpu_size(ops: List[Tuple[str, Optional[dict]]]) -> Tuple[Optional[int], str]:
    """(elements, dtype) of the first tensor of the first op around a launch that records
    shapes (``Input Dims``, ``Input type``), else (None, "")."""
    for _, args in ops:
        if not isinstance(args, dict):
            continue
        dims, types = args.get("Input Dims"), args.get("Input type")
        if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] \
                and all(isinstance(d, int) and not isinstance(d, bool) for d in dims[0]) \
                and isinstance(types, list) and types and isinstance(types[0], str):
            return int(np.prod(dims[0])), types[0]
    return None, ""


def _inferred(recs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The records, in time order, each with its place among its group's as ``seq``."""
    recs = sorted(recs, key=lambda r: r["start_ns"])   # stable: file order breaks ties
    count: Dict[str, int] = {}
    for r in recs:
        r["seq"] = count.get(r["group"], 0)
        count[r["group"]] = r["seq"] + 1
        r["seq_inferred"] = True
    return recs


def _without_order_keys(rec: Dict[str, Any]) -> Dict[str, Any]:
    """A record that has its own sequence number, without the fields kept for checking an
    inferred order."""
    rec.pop("dtype", None)
    rec.pop("nelems", None)
    return rec


def _record(args: Optional[dict], ts: int, dur: int) -> Optional[Dict[str, Any]]:
    if not isinstance(args, dict):
        return None
    # torch 2.0-2.1 wrote the group as "Process Group ID" (its index, the same on every rank)
    group = args.get("Process Group Name", args.get("Process Group ID"))
    name = args.get("Collective name")
    if group is None or name in NOT_COLLECTIVES or str(name).lower().replace("_", "") in POINT_TO_POINT:
        return None
    seq = next((args[k] for k in ("Seq", "seq_num", "seq") if k in args), None)
    if not isinstance(seq, int) or isinstance(seq, bool):
        seq = None
    nelems = args.get("In msg nelems")
    dtype = str(args.get("dtype", ""))
    size = DTYPE_BYTES.get(dtype.lower(), 0)
    return {"op": str(args.get("Collective name", "")), "group": str(group),
            "group_ranks": _ranks(args.get("Process Group Ranks")), "seq": seq,
            "bytes": nelems * size if isinstance(nelems, int) else 0, "start_ns": ts, "end_ns": ts + dur,
            "dtype": dtype, "nelems": nelems if isinstance(nelems, int) and not isinstance(nelems, bool) else None}


def _ranks(value: Any) -> List[int]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [int(r) for r in value if isinstance(r, int)] if isinstance(value, list) else []
