"""The real multi-rank NCCL job of tests/corpus/gpu (PARAM's DLRM, 8 ranks, 2023) as the
tests need it: with or without the c10d fields later torch versions write on NCCL kernels,
with one rank's clock moved by a planted amount, with one rank's NCCL kernels gone.
Everything here is read from the raw JSON, never by tracemerge."""

import glob
import gzip
import json
import os
from typing import Dict, List, Optional, Tuple

DLRM = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "corpus", "gpu", "param_dlrm", "*.json.gz")))
# the c10d fields of each torch generation: none before 2.2 (this job); group, ranks, op, size
# and dtype on the kernels in the HTA trace of 2024; the same on the record_param_comms op
# around the launch, none on the kernel, in torch 2.11 (seen on an H100, docs/alignment.md)
FIELDS = {"none": (), "c10d": ("group", "op", "size"), "c10d-on-ops": ("group", "op", "size", "on-ops")}


def load(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def rank_of(doc: dict) -> int:
    return int(doc["distributedInfo"]["rank"])


def nccl_kernels(doc: dict) -> List[dict]:
    """The rank's NCCL kernels in time order."""
    return sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "")),
                  key=lambda e: (e["ts"], e["ts"] + e["dur"]))


def launching_op(doc: dict, kernel: dict, prefix: str = "nccl:") -> dict:
    """The op named ``prefix``… around the kernel's launch (same correlation, same thread)."""
    corr = kernel["args"]["correlation"]
    launch = next(e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"
                  and e.get("args", {}).get("correlation") == corr)
    return next(e for e in doc["traceEvents"] if e.get("name", "").startswith(prefix) and e["tid"] == launch["tid"]
                and e["ts"] <= launch["ts"] <= e["ts"] + e["dur"])


def with_fields(doc: dict, fields: Tuple[str, ...]) -> dict:
    """``doc`` with the c10d ``fields`` written on its NCCL kernels as torch >= 2.2 writes them."""
    world = int(doc["distributedInfo"]["world_size"])
    for k in nccl_kernels(doc):
        ann = launching_op(doc, k)
        args = launching_op(doc, k, "record_param_comms")["args"] if "on-ops" in fields else k["args"]
        if "group" in fields:
            args.update({"Process Group Name": "0", "Process Group Ranks": str(list(range(world)))})
        if "op" in fields:
            args["Collective name"] = {"nccl:all_reduce": "allreduce", "nccl:all_to_all": "all_to_allv"}[ann["name"]]
        if "size" in fields:
            dims = ann["args"]["Input Dims"][0]
            n = 1
            for d in dims:
                n *= d
            args.update({"In msg nelems": n, "dtype": ann["args"]["Input type"][0]})
    return doc


def moved(doc: dict, shift_us: int) -> dict:
    """``doc`` with its clock moved by ``shift_us`` (its ts are whole epoch µs, no base)."""
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += shift_us
    return doc


def write_job(folder: str, fields: Tuple[str, ...] = (), shifts: Optional[Dict[int, int]] = None,
              without_kernels: Tuple[int, ...] = ()) -> List[str]:
    """The 8 ranks written to ``folder``: ``fields`` added, rank r moved by ``shifts[r]`` µs,
    the ranks ``without_kernels`` with no NCCL kernel left."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for path in DLRM:
        doc = load(path)
        r = rank_of(doc)
        with_fields(doc, fields)
        if r in without_kernels:
            doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("cat") == "kernel"
                                                                         and "nccl" in e.get("name", ""))]
        moved(doc, (shifts or {}).get(r, 0))
        out = os.path.join(folder, f"rank{r}.json")
        with open(out, "w") as f:
            json.dump(doc, f)
        paths.append(out)
    return paths


def true_spreads() -> List[int]:
    """Per collective (the k-th NCCL kernel of every rank), the spread of its kernel ends
    across ranks on the raw files (one host: one clock), in ns."""
    ends = [[(k["ts"] + k["dur"]) * 1000 for k in nccl_kernels(load(p))] for p in DLRM]
    return [max(col) - min(col) for col in zip(*ends)]
