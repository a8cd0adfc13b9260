"""Collective records from plain Kineto GPU/NCCL traces (no tracemerge block needed).

Kineto writes the c10d metadata — ``Process Group Name``, ``Seq`` (``seq_num`` in some
versions), ``Collective name``, ``In msg nelems``, ``dtype``, ``Process Group Ranks`` — on
``record_param_comms`` CPU ops and on the NCCL kernels. (group, seq) names the same
collective on every rank. Kernels are preferred: a kernel ends when the collective
completed, while the CPU op of an asynchronous NCCL call ends when it was enqueued.
"""

import json

import numpy as np

PARAM_COMMS = "record_param_comms"
DTYPE_BYTES = {"float": 4, "float32": 4, "int": 4, "int32": 4, "half": 2, "float16": 2, "bfloat16": 2,
               "double": 8, "float64": 8, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1,
               "char": 1, "bool": 1, "uint8": 1, "int8": 1}


def collectives(trace):
    """[record] in the rank-file shape (op, group, group_ranks, seq, bytes, start_ns, end_ns)."""
    codes = [i for i, n in enumerate(trace.names) if isinstance(n, str) and (n == PARAM_COMMS or "nccl" in n.lower())]
    if not codes:
        return []
    hits = np.flatnonzero(np.isin(trace.name, codes) & trace.timed & (trace.dur >= 0))
    kernel = trace.code_of("kernel")
    on_gpu = trace.cat[hits] == kernel if kernel is not None else np.zeros(len(hits), bool)
    found = {True: [], False: []}
    for i, gpu in zip(hits.tolist(), on_gpu.tolist()):
        rec = _record(trace.args[i], int(trace.ts[i]), int(trace.dur[i]))
        if rec is not None:
            found[gpu].append(rec)
    return found[True] or found[False]


def _record(args, ts, dur):
    if not isinstance(args, dict):
        return None
    group = args.get("Process Group Name")
    seq = next((args[k] for k in ("Seq", "seq_num", "seq") if k in args), None)
    if group is None or not isinstance(seq, int) or isinstance(seq, bool):
        return None
    nelems = args.get("In msg nelems")
    size = DTYPE_BYTES.get(str(args.get("dtype", "")).lower(), 0)
    return {"op": str(args.get("Collective name", "")), "group": str(group),
            "group_ranks": _ranks(args.get("Process Group Ranks")), "seq": seq,
            "bytes": nelems * size if isinstance(nelems, int) else 0, "start_ns": ts, "end_ns": ts + dur}


def _ranks(value):
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [int(r) for r in value if isinstance(r, int)] if isinstance(value, list) else []
