"""The sweep's newer input kinds (issue 48): journals, cycle sets, merged summaries read
back, served ops. Each maker takes the sweep's random source, a directory and the rank
documents of one bundled sample (decoded, its own copies) and returns the files to give,
written there, plus the options the case adds (``--cycle N``).

  journal  one rank left as its journal (meta, a line per record, alive flushes), one value
           of a record, of the meta or of a line made hostile, or the journal cut in a line
  cycles   one rank's file split into cycle files (its events and records by window), with
           its journal beside them, a cycle given twice, or a whole-run file beside them;
           sometimes ``--cycle N``
  summary  a merged trace of the ranks, one value of its summary made hostile
  served   the callee's ``served_ops`` and a caller's builtins sent as themselves, one
           value of a served op or an admission made hostile
"""

import json
import os
import random
import subprocess
import sys
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


def _journal_lines(doc: Any) -> List[Any]:
    block = doc["tracemerge"]
    meta = {k: v for k, v in block.items() if not isinstance(v, list) and k != "cycle"}
    lines: List[Any] = [{"tracemerge_journal": 1, "meta": meta}]
    lines += [{"rpc": r} for r in block.get("rpcs", [])] + [{"collective": c} for c in block.get("collectives", [])]
    lines.append({"alive_ns": block.get("profile_stop_ns", 0)})
    return lines


def journal(rng: random.Random, tmp: str, docs: List[Any], hostile: List[Any], write: Callable[..., str]):
    victim = rng.randrange(len(docs))
    lines = _journal_lines(docs[victim])
    cut = rng.random() < 0.15
    if not cut:
        line = rng.randrange(len(lines))
        _set(lines, (line,) + _place(rng, lines[line]), rng.choice(hostile))
    text = "".join(json.dumps(x, allow_nan=True) + "\n" for x in lines)
    if cut:
        text = text[:rng.randrange(1, len(text))]
    path = os.path.join(tmp, f"rank{victim}.journal")
    with open(path, "w") as f:
        f.write(text)
    files = [write(os.path.join(tmp, f"rank{r}"), d, rng) for r, d in enumerate(docs) if r != victim]
    if rng.random() < 0.3:  # its rank file beside it too: the file wins
        files.append(write(os.path.join(tmp, f"rank{victim}"), docs[victim], rng))
    files.insert(rng.randrange(len(files) + 1), path)
    return files, []


def _cycles_of(doc: Any, n: int) -> List[Any]:
    """``doc`` split into ``n`` cycle documents by the time of its events and records."""
    block = doc["tracemerge"]
    start, stop = block["profile_start_ns"], block["profile_stop_ns"]
    edges = [start + (stop - start) * k // n for k in range(n + 1)]
    base = doc.get("baseTimeNanoseconds", 0)
    out = []
    for k in range(n):
        lo, hi = edges[k], edges[k + 1]
        part = {**doc, "traceEvents": [e for e in doc["traceEvents"] if "ts" not in e or not isinstance(e["ts"], (int, float))
                                       or k == n - 1 and base + e["ts"] * 1000 >= lo
                                       or lo <= base + e["ts"] * 1000 < hi]}
        part["tracemerge"] = {**block, "cycle": k, "profile_start_ns": lo, "profile_stop_ns": hi,
                              "rpcs": [r for r in block.get("rpcs", [])
                                       if lo <= r.get("send_ns", r.get("start_ns", lo)) < hi or k == n - 1],
                              "collectives": []}
        out.append(part)
    return out


def cycles(rng: random.Random, tmp: str, docs: List[Any], hostile: List[Any], write: Callable[..., str]):
    victim = rng.randrange(len(docs))
    n = rng.choice([2, 3])
    parts = _cycles_of(docs[victim], n)
    files = [write(os.path.join(tmp, f"rank{r}"), d, rng) for r, d in enumerate(docs) if r != victim]
    shape = rng.choice(["plain", "journal", "twice", "whole", "hostile"])
    if shape == "hostile":
        part = rng.choice(parts)
        _set(part, ("tracemerge",) + _place(rng, part["tracemerge"]), rng.choice(hostile))
    given = parts[:-1] if shape == "journal" else parts
    for k, part in enumerate(given):
        files.append(write(os.path.join(tmp, f"rank{victim}.cycle{k}"), part, rng))
    if shape == "journal":
        path = os.path.join(tmp, f"rank{victim}.journal")
        with open(path, "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in _journal_lines(docs[victim])))
        files.append(path)
    elif shape == "twice":
        files.append(write(os.path.join(tmp, f"rank{victim}.cycle{n}"), rng.choice(parts), rng))
    elif shape == "whole":
        files.append(write(os.path.join(tmp, f"rank{victim}"), docs[victim], rng))
    rng.shuffle(files)
    return files, (["--cycle", str(rng.randrange(n + 1))] if rng.random() < 0.4 else [])


def summary(rng: random.Random, tmp: str, docs: List[Any], hostile: List[Any], write: Callable[..., str]):
    files = [write(os.path.join(tmp, f"rank{r}"), d, rng) for r, d in enumerate(docs)]
    merged = os.path.join(tmp, "merged.json")
    subprocess.run([sys.executable, "-m", "tracemerge", "combine", *files, "-o", merged, "-q"],
                   capture_output=True, timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(merged) as f:
        doc = json.load(f)
    _set(doc, ("tracemerge",) + _place(rng, doc["tracemerge"]), rng.choice(hostile))
    with open(merged, "w") as f:
        json.dump(doc, f, allow_nan=True)
    return ([merged] if rng.random() < 0.7 else [merged, merged]), []


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


MAKERS: Dict[str, Maker] = {"journal": journal, "cycles": cycles, "summary": summary, "served": served}
