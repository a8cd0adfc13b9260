"""Lanes, as a property: arbitrary spans on a few threads, overlapping however they like,
some of them RPC caller spans (``rpc_async`` and ``remote`` calls in flight together, with
``args.async`` true, false or absent as captures old and new write it), with the callee's
side in a second rank file. After ``combine`` to JSON, under either core:

- no two X events of one output thread partly overlap (Perfetto's JSON import would drop
  or move one);
- every input span is there exactly once, with its name, time, duration and args;
- a thread whose spans already nest (no crossing, nothing starting inside an asynchronous
  span) keeps every span: lanes only take what cannot nest;
- each lane is named by a ``thread_name`` event whose ``lane_of`` is the thread it left;
- every RPC flow arrow starts and ends inside a span of its thread;
- key averages of the merged trace are those of the rank files: counts and CPU totals
  as counted here from the generated spans, self CPU as the rank files' report says.
"""

import json
import os
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.cli import invoke
from support.ranks import BASE, rank_file, write

THREADS = (1, 2, 3)
KINDS = ("rpc_async", "remote")
ABSENT = object()   # a caller span without args.async, as files of older captures have it


@st.composite
def jobs(draw):
    """(rank 0's spans, rank 1's spans, rpc records): spans are (tid, name, ts µs, dur µs, args)."""
    spans, callee, records = [], [], []
    for n in range(draw(st.integers(1, 14))):
        tid = draw(st.sampled_from(THREADS))
        ts = draw(st.integers(0, 400))
        dur = draw(st.integers(0, 200))
        kind = draw(st.sampled_from(["op", "op", "call"]))
        if kind == "op":
            # a name of its own: torch merges an only child into a same-named parent, which
            # the counts below would have to redo
            spans.append((tid, f"op{n}", ts, dur, {"n": n}))
            continue
        rid = f"0:{n}"
        kind = draw(st.sampled_from(KINDS))
        # a function of its own per call, as for the ops: a synchronous call (async false)
        # can be the only child of a same-named one, which torch would merge into it
        call = f"{kind}#f{n}(worker0 -> worker1)"
        # args.async as the capture writes it: true when the future completed on an agent
        # thread, false when the span ended on its own thread, absent in older files (then
        # the span is taken as asynchronous, docs/rank-file-format.md)
        flag = draw(st.sampled_from([True, True, False, ABSENT]))
        args = {"rpc_id": rid, "role": "caller"}
        if flag is not ABSENT:
            args["async"] = flag
        spans.append((tid, call, ts, dur, args))
        # the callee served it inside the call, on its own clock (the same machine here)
        inner = draw(st.integers(0, max(0, dur - 1)))
        served = draw(st.integers(0, dur - inner)) if dur else 0
        # each served on a server thread of its own (one thread serves one call at a time)
        callee.append((100 + n, call + "#remote", ts + inner, served, {"rpc_id": rid, "role": "callee"}))
        common = {"rpc_id": rid, "kind": kind, "func": f"f{n}", "name": call, "caller": 0, "callee": 1,
                  "caller_name": "worker0", "callee_name": "worker1", "status": "ok"}
        records.append(dict(common, role="caller", send_ns=BASE + ts * 1000, complete_ns=BASE + (ts + dur) * 1000))
        records.append(dict(common, role="callee", start_ns=BASE + (ts + inner) * 1000,
                            end_ns=BASE + (ts + inner + served) * 1000))
    return spans, callee, records


def _asynchronous(name, args):
    """Whether a generated span is asynchronous, by the rule of docs/rank-file-format.md."""
    if "async" in args:
        return args["async"]
    return args.get("role") == "caller" and name.startswith(tuple(k + "#" for k in KINDS))


def _already_nests(thread_spans):
    """True when a thread's spans need no lane by any reading: every two are disjoint or one
    contains the other, and no other span starts inside an asynchronous one (torch never
    makes it a parent). Conservative: ties at an asynchronous span's start are left out."""
    for i, (_, n1, s1, d1, a1) in enumerate(thread_spans):
        e1 = s1 + d1
        for j, (_, _, s2, d2, _) in enumerate(thread_spans):
            if i == j:
                continue
            e2 = s2 + d2
            if not (s2 >= e1 or s1 >= e2 or (s1 <= s2 and e2 <= e1) or (s2 <= s1 and e1 <= e2)):
                return False
            if _asynchronous(n1, a1) and s1 <= s2 < e1:
                return False
    return True


def _events(spans):
    return [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}
            for tid, name, ts, dur, args in spans]


def _files(where, job):
    spans, callee, records = job
    boot = {"boot_id": "one-machine"}
    return [write(os.path.join(where, "rank0.json"),
                  rank_file(_events(spans), 0, rpcs=[r for r in records if r["role"] == "caller"], **boot)),
            write(os.path.join(where, "rank1.json"),
                  rank_file(_events(callee), 1, rpcs=[r for r in records if r["role"] == "callee"], **boot))]


def _ns(us):
    return round(us * 1000)


@pytest.mark.parametrize("core", ["native", "python"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=jobs())
def test_lanes_keep_every_span_and_nothing_partly_overlaps(tmp_path_factory, monkeypatch, core, job):
    monkeypatch.setenv("TRACEMERGE_CORE", core)
    where = str(tmp_path_factory.mktemp("lanes"))
    files = _files(where, job)
    out = os.path.join(where, "merged.json")
    invoke("combine", *files, "-o", out, "--force", "-j", "1").ok()
    with open(out) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    shift = doc["baseTimeNanoseconds"] - BASE  # one machine: every span at its recorded time
    pids = {rank: set(m.values()) for rank, m in doc["tracemerge"]["pids"].items()}
    spans, callee, _ = job

    # every input span exactly once, on its rank, with its name, time, duration and args
    for rank, given_spans in (("0", spans), ("1", callee)):
        want = Counter((name, ts * 1000, dur * 1000, json.dumps(args, sort_keys=True))
                       for _, name, ts, dur, args in given_spans)
        got = Counter((e["name"], _ns(e["ts"]) + shift, _ns(e["dur"]), json.dumps(e["args"], sort_keys=True))
                      for e in events if e["ph"] == "X" and e["pid"] in pids[rank])
        assert got == want

    # no partial overlap on any output thread
    by_thread = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for thread, found in by_thread.items():
        found.sort(key=lambda s: (s[0], -s[1]))
        for i, (s1, e1) in enumerate(found):
            for s2, e2 in found[i + 1:]:
                if s2 >= e1:
                    break
                assert e2 <= e1, f"{thread}: [{s1}, {e1}] and [{s2}, {e2}] partly overlap"

    # a thread whose spans already nest keeps them all (lanes only for what cannot nest)
    pid0 = min(pids["0"])
    for tid in THREADS:
        mine = [sp for sp in spans if sp[0] == tid]
        if _already_nests(mine):
            event("a thread that nests and has an rpc span" if any(len(sp[4]) > 1 for sp in mine) else "a thread that nests")
            assert len(by_thread.get((pid0, tid), ())) == len(mine), f"thread {tid} nests but lost spans to lanes"

    # each lane names the thread it left
    lane_threads = {t for t in by_thread if "(overlap" in str(t[1])}
    event(f"lanes: {min(len(lane_threads), 3)}")
    named = {(e["pid"], e["tid"]): e["args"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for pid, tid in lane_threads:
        origin, _, lane = tid.rpartition(" (overlap ")
        assert named[(pid, tid)]["lane_of"] == int(origin) and named[(pid, tid)]["name"].endswith(f"(overlap {lane}")

    # every flow point lies within a span of its thread
    for e in events:
        if e["ph"] in ("s", "f"):
            at = _ns(e["ts"])
            assert any(s <= at <= end for s, end in by_thread[(e["pid"], e["tid"])]), e

    # key averages: counts and totals as the spans give them, self CPU as the rank files' report
    merged = json.loads(invoke("report", out, "--format", "json").ok().stdout)
    ranks = json.loads(invoke("report", *files, "--format", "json").ok().stdout)
    rows = {r["key"]: r for r in merged["key_averages"]}
    for name in {s[1] for s in spans + callee}:
        durs = [dur for _, n, _, dur, _ in spans + callee if n == name]
        assert rows[name]["count"] == len(durs)
        assert rows[name]["cpu_time_total"] == pytest.approx(sum(durs))
    assert {r["key"]: (r["count"], round(r["self_cpu_time_total"], 3)) for r in ranks["key_averages"]} == \
        {k: (r["count"], round(r["self_cpu_time_total"], 3)) for k, r in rows.items()}


# both cores are parametrized here already: CI runs this module once
pytestmark = pytest.mark.processes
