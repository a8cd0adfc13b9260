"""Sweep kinds made from the rank documents of a bundled sample (issue 48): each maker
takes the sweep's random source, a directory, the documents (decoded, its own copies), the
hostile values and the sweep's writer, and returns the files to give, written there, plus
the options the case adds.

  served   the callee's ``served_ops`` and a caller's builtins sent as themselves, one
           value of a served op, of an admission or of a native call made hostile
"""

import os
import random
from typing import Any, Callable, Dict, List, Tuple

Maker = Callable[[random.Random, str, List[Any], List[Any], Callable[..., str]], Tuple[List[str], List[str]]]


def _place(rng: random.Random, value: Any, prefix: tuple = ()) -> tuple:
    """A random place in a JSON value (a list's items by its first and last)."""
    places = [prefix]
    stack = [(value, prefix)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                places.append(at + (k,))
                stack.append((x, at + (k,)))
        elif isinstance(v, list) and v:
            for i in {0, len(v) - 1}:
                places.append(at + (i,))
                stack.append((v[i], at + (i,)))
    return rng.choice(places[1:] or [prefix])


def _set(doc: Any, at: tuple, value: Any) -> None:
    for key in at[:-1]:
        doc = doc[key]
    doc[at[-1]] = value


def served(rng: random.Random, tmp: str, docs: List[Any], hostile: List[Any], write: Callable[..., str]):
    """Rank 0's calls to rank 1 made builtins sent as themselves: rank 1's block keeps the
    ops that may have served them (served_ops), rank 0's the admission (native_callees)."""
    caller, callee = docs[0]["tracemerge"], docs[1]["tracemerge"]
    ops, calls = [], []
    for rec in callee.get("rpcs", []):
        if rec.get("role") == "callee" and "end_ns" in rec:
            ops.append({"name": rec.get("func") or "aten::add", "tid": rng.choice([7, "7", 8]),
                        "start_ns": rec["start_ns"], "end_ns": rec["end_ns"]})
    callee["rpcs"] = [r for r in callee.get("rpcs", []) if r.get("role") != "callee"]
    for rec in caller.get("rpcs", []):
        if rec.get("role") == "caller" and rec.get("callee") == 1:
            rec["native"] = True
            calls.append(rec)
    caller["remote_sides"] = []
    callee["served_ops"] = ops
    start = caller.get("profile_start_ns", 0)
    caller["native_callees"] = [{"callee": 1, "asked_ns": start, "answered_ns": start + 1000,
                                 "answer": {"clock_rank": 1, "boot_id": callee.get("boot_id", ""), "read_ns": start + 500}}]
    target = rng.choice([("served_ops", callee), ("native_callees", caller), ("rpcs", caller)])
    if target[1].get(target[0]):
        _set(target[1], (target[0],) + _place(rng, target[1][target[0]]), rng.choice(hostile))
    return [write(os.path.join(tmp, f"rank{r}"), d, rng) for r, d in enumerate(docs)], []


MAKERS: Dict[str, Maker] = {"served": served}
