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
"""

import json
from typing import Any, Dict, List, Optional

import numpy as np

from tracemerge.model import RankTrace

PARAM_COMMS = "record_param_comms"
# record_param_comms ops that are no collective of their own (waiting on a work handle)
NOT_COLLECTIVES = frozenset(("wait",))
DTYPE_BYTES = {"float": 4, "float32": 4, "int": 4, "int32": 4, "half": 2, "float16": 2, "bfloat16": 2,
               "double": 8, "float64": 8, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1,
               "char": 1, "bool": 1, "uint8": 1, "int8": 1}


def collectives(trace: RankTrace) -> List[Dict[str, Any]]:
    """[record] in the rank-file shape (op, group, group_ranks, seq, bytes, start_ns, end_ns);
    records without a sequence number get their per-group order instead (:func:`_inferred`)."""
    codes = [i for i, n in enumerate(trace.names) if isinstance(n, str) and (n == PARAM_COMMS or "nccl" in n.lower())]
    if not codes:
        return []
    hits = np.flatnonzero(np.isin(trace.name, codes) & trace.timed & (trace.dur >= 0))
    kernel = trace.code_of("kernel")
    on_gpu = trace.cat[hits] == kernel if kernel is not None else np.zeros(len(hits), bool)
    found: Dict[bool, List[Dict[str, Any]]] = {True: [], False: []}
    for i, gpu, args in zip(hits.tolist(), on_gpu.tolist(), trace.args.dicts(hits.tolist())):
        rec = _record(args, int(trace.ts[i]), int(trace.dur[i]))
        if rec is not None:
            found[gpu].append(rec)
    recs = found[True] or found[False]
    numbered = [r for r in recs if r["seq"] is not None]
    if numbered or not recs:
        return [_without_order_keys(r) for r in numbered]
    return _inferred(recs)


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
    if group is None or args.get("Collective name") in NOT_COLLECTIVES:
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
