"""A ring of machines joined only by builtins sent as themselves: rank r (its own machine,
boot id and clock, off by a planted offset of up to ±5 s, rank 0 exact) sends ``calls``
``torch.add`` calls, one after another, to rank r + 1, which serves each on one of four pool
threads. The callers' admission readings of their callees (and samples at the second call,
every 50th and the last) are in ``native_callees``; nothing else relates the clocks. The
truth: each rank's offset and, per call, the start of the op that served it on the callee's
clock. The shape has no hub and a path as long as the ring: every link is paired and fitted
on its own (``benchmarks/pairing_scale.py`` times it to a thousand ranks)."""

import os
import random
from typing import Dict, List, Tuple

from .ranks import BASE, rank_file, write, x

US = 1000
T0 = BASE + 10**8           # true time of the first call
GAP_NS = 5_000 * US         # between one caller's calls
SERVER_THREADS = (11, 12, 13, 14)


def write_ring(out_dir: str, ranks: int, calls: int, seed: int = 3) -> Tuple[List[str], Dict[int, int], Dict[str, int]]:
    """(paths, {rank: offset_ns}, {rpc_id: the serving op's start on the callee's clock})."""
    rng = random.Random(seed)
    off = {r: 0 if r == 0 else rng.randint(-5_000_000_000, 5_000_000_000) for r in range(ranks)}
    sent: Dict[int, List[dict]] = {r: [] for r in range(ranks)}
    served: Dict[int, List[dict]] = {r: [] for r in range(ranks)}
    readings: Dict[int, List[dict]] = {r: [] for r in range(ranks)}
    truth: Dict[str, int] = {}
    for r in range(ranks):
        callee = (r + 1) % ranks
        for k in range(calls):
            t = T0 + k * GAP_NS + r * 7 * US
            queued = rng.randint(100, 400) * US  # request on the wire and in the callee's queue
            rpc_id = f"{r}:{k}"
            sent[r].append({"rpc_id": rpc_id, "role": "caller", "kind": "rpc_async", "func": "aten::add",
                            "name": f"rpc_async#aten::add(worker{r} -> worker{callee})", "caller": r,
                            "callee": callee, "caller_name": f"worker{r}", "callee_name": f"worker{callee}",
                            "status": "ok", "native": True, "send_ns": t + off[r],
                            "complete_ns": t + queued + 300 * US + off[r]})
            start = t + queued + off[callee]
            served[callee].append({"name": "aten::add", "tid": SERVER_THREADS[k % len(SERVER_THREADS)],
                                   "start_ns": start, "end_ns": start + 150 * US})
            truth[rpc_id] = start
            if k in (0, 1) or k % 50 == 0 or k == calls - 1:
                asked = t + 2_000 * US
                rtt = rng.randint(80, 300) * US
                read = asked + rtt // 2 + rng.randint(-30, 30) * US  # true time the callee read its clock
                readings[r].append({"callee": callee, "asked_ns": asked + off[r], "answered_ns": asked + rtt + off[r],
                                    "answer": {"clock_rank": callee, "boot_id": f"boot-{callee}",
                                               "read_ns": read + off[callee]}, **({"sample": True} if k else {})})
    paths = []
    for r in range(ranks):
        base = BASE + off[r]  # the rank's events on its own clock
        pid = 4000 + r
        events = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": f"thread {t} (pt_thread_pool)"}}
                  for t in SERVER_THREADS]
        ops = sorted(served[r], key=lambda o: o["start_ns"])
        events += [x(o["name"], (o["start_ns"] - base) / US, (o["end_ns"] - o["start_ns"]) / US, pid=pid, tid=o["tid"])
                   for o in ops]
        events += [x(c["name"], (c["send_ns"] - base) / US, (c["complete_ns"] - c["send_ns"]) / US, pid=pid, tid=7,
                     cat="user_annotation", rpc_id=c["rpc_id"], role="caller") for c in sent[r]]
        doc = rank_file(events, r, base=base, rpcs=sent[r], boot_id=f"boot-{r}", hostname=f"host{r}",
                        world_size=ranks, served_ops=ops, native_callees=readings[r], start_ns=base + 5 * 10**7)
        doc["tracemerge"]["profile_stop_ns"] = base + 2 * 10**8 + calls * GAP_NS
        paths.append(write(os.path.join(out_dir, f"rank{r}.json.gz"), doc))
    return paths, off, truth
