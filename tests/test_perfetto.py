"""The .pftrace writer, read back with Perfetto's own protos."""

import glob
import gzip
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from support.paths import SAMPLES
from support.pftrace import read_pftrace, thread_of
from support.ranks import kineto, load_output, write, x

from tracemerge.formats.perfetto.slices import nest
from tracemerge.job import Session
from tracemerge.merge.combine import combine


def merge(tmp_path, docs, name="out.pftrace", **kw):
    paths = [write(tmp_path / f"rank{r}.json", d) for r, d in enumerate(docs)]
    session = Session.open(paths)
    out = str(tmp_path / name)
    summary = combine(session, session.align("wall"), out, force=True, **kw)
    return out, summary


def test_every_slice_instant_and_counter_is_there_with_name_track_and_args(tmp_path):
    args = {"Input Dims": [[2, 3], []], "Input type": ["float", ""], "flag": True, "ratio": 0.5,
            "nested": {"a": 1, "b": "two"}, "big": 2 ** 70, "none": None}
    r0 = kineto([
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "thread 1 (python)"}},
        x("outer", 100.0, 50.0, pid=7, tid=1, **args),
        x("inner", 110.0, 10.0, pid=7, tid=1, cat="user_annotation"),
        x("sibling", 150.0, 5.0, pid=7, tid=1),          # starts where outer ends
        x("zero", 120.0, 0.0, pid=7, tid=1),             # zero-length, right after inner ends
        x("profiler", 90.0, 100.0, pid="Spans", tid="PyTorch Profiler", cat="Trace"),
        {"ph": "i", "name": "mark", "pid": 7, "tid": 1, "ts": 130.0, "s": "t", "args": {"k": 1}},
        {"ph": "C", "name": "mem", "pid": 7, "tid": 1, "ts": 140.0, "args": {"bytes": 4096, "frac": 0.25}},
    ], rank=0)
    r1 = kineto([x("other", 100.0, 1.0, pid=7, tid=1)], rank=1)
    out, summary = merge(tmp_path, [r0, r1])
    got = read_pftrace(out)
    pids = summary["pids"]

    slices = {(s["name"], thread_of(got["tracks"], s["track"])[0]): s for s in got["slices"]}
    assert len(got["slices"]) == 6
    outer = slices["outer", pids["0"]["7"]]
    # integers beyond 64 bits travel as their decimal text; empty lists and null as JSON text
    assert outer["args"] == {**args, "big": str(2 ** 70)}
    assert outer["cat"] == ["cpu_op"]
    assert outer["end"] - outer["ts"] == 50_000
    assert slices["inner", pids["0"]["7"]]["parent"] is outer
    assert slices["inner", pids["0"]["7"]]["cat"] == ["user_annotation"]
    assert "parent" not in slices["sibling", pids["0"]["7"]]
    assert slices["other", pids["1"]["7"]]["ts"] - outer["ts"] == 0    # same wall time on both ranks
    assert thread_of(got["tracks"], outer["track"]) == (pids["0"]["7"], 1, "thread 1 (python)")
    # a string tid gets a 32-bit tid of its own and keeps its name, as in Perfetto's JSON import
    pid, tid, name = thread_of(got["tracks"], slices["profiler", pids["0"]["Spans"]]["track"])
    assert name == "PyTorch Profiler" and 0 < tid < 2 ** 31
    processes = {t.process.pid: t.process.process_name for t in got["tracks"].values() if t.HasField("process")}
    assert processes[pids["0"]["7"]].startswith("rank 0 · rank0 · ")
    assert all(0 < p < 2 ** 31 for p in processes)

    (mark,) = got["instants"]
    assert (mark["name"], mark["args"], mark["track"]) == ("mark", {"k": 1}, outer["track"])
    counters = {got["tracks"][c["track"]].name: c["value"] for c in got["counters"]}
    assert counters == {"mem bytes": 4096, "mem frac": 0.25}
    assert all(got["tracks"][c["track"]].HasField("counter") for c in got["counters"])
    ev = summary["events"]
    assert ev["in"] == ev["out"] == 9 and ev["dropped"] == 0 and summary["format"] == "perfetto"


def test_overlapping_spans_go_to_an_overlap_track_and_are_counted(tmp_path):
    r0 = kineto([x("a", 100.0, 50.0), x("b", 120.0, 50.0), x("c", 125.0, 10.0), x("d", 130.0, 50.0),
                 x("e", 200.0, 5.0)], rank=0)
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)       # asserts nesting on every track
    by_name = {s["name"]: s for s in got["slices"]}
    assert sorted(by_name) == ["a", "b", "c", "d", "e"]
    main = by_name["a"]["track"]
    assert by_name["e"]["track"] == main and by_name["b"]["track"] != main
    assert by_name["c"]["parent"] is by_name["a"]    # the thread track is tried first
    assert by_name["d"]["track"] not in (main, by_name["b"]["track"])
    assert got["tracks"][by_name["b"]["track"]].name == "thread 1 (overlap 1)"
    assert summary["perfetto"] == {"overlapping_slices": 2, "overlap_tracks": 2, "flow_events": 0}
    assert summary["events"]["out"] == summary["events"]["in"] == 5


def test_nest_lanes():
    assert nest([0, 1, 2, 10], [10, 5, 3, 11]) == [0, 0, 0, 0]
    assert nest([0, 5, 6, 12], [10, 15, 7, 14]) == [0, 1, 0, 0]


def test_format_option_and_name(tmp_path):
    r0 = kineto([x("a", 100.0, 5.0)], rank=0)
    out, _ = merge(tmp_path, [r0], name="out.bin", fmt="perfetto")
    assert len(read_pftrace(out)["slices"]) == 1
    out, summary = merge(tmp_path, [r0], name="out.json")
    assert summary["format"] == "json" and load_output(out)["traceEvents"]


@pytest.mark.parametrize("sample", ["kineto_rpc/worker*.json.gz", "rpc_profiling/rank*.json.gz",
                                    "parameter_server/rank*.json.gz", "threads_8/rank*.json.gz",
                                    "rl_agent/rank*.json.gz", "threads_1/rank*.json.gz"])
def test_real_traces_keep_every_slice_with_its_time_process_and_args(tmp_path, sample):
    paths = sorted(glob.glob(os.path.join(SAMPLES, sample)))
    if not paths:
        pytest.skip(f"no {sample} samples")
    session = Session.open(paths)
    alignment = session.align("wall")
    out = str(tmp_path / "t.pftrace")
    summary = combine(session, alignment, out)
    got = read_pftrace(out)
    want = Counter()
    for rank, pid_of, events in input_ranks(session):
        for e in events:
            if e.get("ph") == "X":
                args = namespaced(rank, e.get("args") or {})
                want[e["name"], pid_of[e["pid"]], e["ts_ns"], e["dur_ns"], json.dumps(args, sort_keys=True)] += 1
    have = Counter((s["name"], thread_of(got["tracks"], s["track"])[0], s["ts"], s["end"] - s["ts"],
                    json.dumps(s["args"], sort_keys=True)) for s in got["slices"])
    # besides: the callee span combine draws for each builtin it paired with a served op
    # (the capture's native caller records; the callee's file holds only the op)
    builtins = {r["rpc_id"] for info in session.infos for r in info.rpcs if r["role"] == "caller" and r.get("native")}
    drawn = have - want
    assert sorted(json.loads(k[4])["rpc_id"] for k in drawn.elements()) == sorted(builtins)
    assert all(k[0].endswith("#remote") and json.loads(k[4])["role"] == "callee" for k in drawn)
    assert have - drawn == want and len(want) > 10
    ev = summary["events"]
    assert ev["dropped"] == 0 and ev["out"] == ev["in"] + ev["added"] and ev["added"] >= len(builtins)
    check_input_flows(session, got)


ARG_ID_KEYS = ("External id", "correlation", "Correlation ID", "External ID")


def namespaced(rank, args):
    """The args with their correlation ids made rank-unique as docs/perfetto.md says:
    ``(rank + 1) << 32 | id`` for ids below 2**32, else ``r<rank>:<id>``."""
    return {k: (((rank + 1) << 32 | v) if type(v) is int and 0 <= v < 1 << 32 else f"r{rank}:{v}")
            if k in ARG_ID_KEYS else v for k, v in args.items()}


def input_ranks(session):
    """(rank, {input pid: output pid}, events with ``ts_ns``/``dur_ns``) per rank, read from
    the input files with the standard library: a rank's ns are ``baseTimeNanoseconds`` plus
    its µs times, unchanged by ``--align wall``; ranks get blocks of pids in rank order, each
    ``1000 * (1 + most pids of a rank // 1000)`` wide, a rank's pids numbered in order of
    first appearance."""
    docs = {}
    for info in session.infos:
        with (gzip.open if info.path.endswith(".gz") else open)(info.path, "rb") as f:
            docs[info.rank] = json.load(f)
    pids = {r: list(dict.fromkeys(e.get("pid") for e in d["traceEvents"])) for r, d in docs.items()}
    stride = 1000 * (1 + max(map(len, pids.values())) // 1000)
    for n, rank in enumerate(sorted(docs)):
        base = docs[rank].get("baseTimeNanoseconds", 0)
        events = [{**e, "ts_ns": base + round(e["ts"] * 1000), "dur_ns": round(e.get("dur", 0) * 1000)}
                  for e in docs[rank]["traceEvents"] if "ts" in e]
        yield rank, {p: (n + 1) * stride + k for k, p in enumerate(pids[rank])}, events


def check_input_flows(session, got):
    """Every input s/f pair is an arc between the slices enclosing its two points (innermost
    X of the thread containing the ts, recomputed here from the input files)."""
    want = Counter()
    for _, _, events in input_ranks(session):
        xs = [e for e in events if e.get("ph") == "X"]
        ends = {}
        for e in events:
            if e.get("ph") in ("s", "f"):
                hits = [x for x in xs if (x["pid"], x["tid"]) == (e["pid"], e["tid"])
                        and x["ts_ns"] <= e["ts_ns"] <= x["ts_ns"] + x["dur_ns"]]
                x = max(hits, key=lambda x: (x["ts_ns"], -x["dur_ns"]))
                ends.setdefault((e["id"], e.get("cat")), {})[e["ph"]] = (x["name"], x["ts_ns"])
        for pair in ends.values():
            want[pair["s"], pair["f"]] += 1
    have = Counter(((a["name"], a["ts"]), (b["name"], b["ts"])) for _, a, b in got["arcs"])
    assert not want - have      # (RPC arrows are arcs too)
    assert not got["unmatched_flow_ends"]


def test_generated_kineto_trace_keeps_every_event_and_flow(tmp_path):
    gen = os.path.join(os.path.dirname(__file__), "support", "gen_kineto.py")
    subprocess.run([sys.executable, gen, str(tmp_path), "--ranks", "2", "--mb", "1", "--jobs", "1"],
                   check=True, timeout=120)
    session = Session.open(sorted(glob.glob(str(tmp_path / "*.json"))))
    alignment = session.align("wall")
    out = str(tmp_path / "t.pftrace")
    summary = combine(session, alignment, out)
    got = read_pftrace(out)      # nesting checked on every track
    ev = summary["events"]
    assert ev["dropped"] == 0 and ev["out"] == ev["in"]
    n_flow_events = sum(int(np.isin(session.trace(r).ph, [ord("s"), ord("f")]).sum()) for r in session.ranks)
    assert n_flow_events > 100 and summary["perfetto"]["flow_events"] == n_flow_events
    assert len(got["arcs"]) == n_flow_events // 2
    check_input_flows(session, got)


def _ev(ph, name, ts, pid=100, tid=1, cat="c", **kw):
    return {"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, **kw}


def test_begin_end_pairs_become_nested_slices_with_both_args(tmp_path):
    r0 = kineto([_ev("B", "outer", 100.0, args={"a": 1}), _ev("B", "inner", 110.0),
                 _ev("E", None, 120.0, args={"b": 2}), _ev("E", None, 150.0, args={"c": 3}),
                 x("x_inside", 130.0, 5.0),
                 x("crossing", 140.0, 20.0),             # crosses outer: overlap track
                 _ev("E", None, 170.0),                  # nothing open: dropped, counted
                 _ev("B", "never_ends", 180.0)], rank=0)  # dropped, counted
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)
    by_name = {s["name"]: s for s in got["slices"]}
    assert sorted(by_name) == ["crossing", "inner", "outer", "x_inside"]
    base = by_name["outer"]["ts"] - 100_000
    assert [(by_name[n]["ts"] - base, by_name[n]["end"] - base) for n in ("outer", "inner", "crossing")] == \
        [(100_000, 150_000), (110_000, 120_000), (140_000, 160_000)]
    assert by_name["inner"]["parent"] is by_name["outer"] and by_name["x_inside"]["parent"] is by_name["outer"]
    assert by_name["inner"]["args"] == {"b": 2} and by_name["outer"]["args"] == {"a": 1, "c": 3}
    assert by_name["crossing"]["track"] != by_name["outer"]["track"]
    ev = summary["events"]
    assert ev["dropped_by"] == {"B/E end without a begin": 1, "B/E begin without an end": 1}
    assert ev["in"] == ev["out"] + ev["dropped"] == 8


def test_async_events_go_to_async_tracks_per_pid_cat_id(tmp_path):
    r0 = kineto([_ev("b", "req", 100.0, id=1, args={"k": "v"}), _ev("n", "mark", 105.0, id=1),
                 _ev("e", "req", 120.0, id=1, args={"status": 200}),
                 _ev("b", "req", 110.0, id=2), _ev("e", "req", 130.0, id=2),                  # another id
                 _ev("b", "req", 101.0, id=1, cat="other"), _ev("e", "req", 102.0, id=1, cat="other"),
                 _ev("b", "req", 100.0, id2={"local": "0x5"}), _ev("e", "req", 101.0, id2={"local": "0x5"}),
                 _ev("S", "legacy", 100.0, id="a"), _ev("F", "legacy", 140.0, id="a"),
                 _ev("b", "outer", 103.0, id=1), _ev("e", "outer", 125.0, id=1),   # crosses req on id 1
                 _ev("b", "no_id", 100.0), x("work", 100.0, 10.0)], rank=0)
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)
    tracks = got["tracks"]
    async_slices = [s for s in got["slices"] if not tracks[s["track"]].HasField("thread")]
    pid = summary["pids"]["0"]["100"]
    assert all(thread_of(tracks, s["track"])[0] == pid for s in async_slices)
    by = Counter((s["name"], tuple(s["cat"])) for s in async_slices)
    assert by == {("req", ("c",)): 3, ("req", ("other",)): 1, ("legacy", ("c",)): 1, ("outer", ("c",)): 1}
    req1 = next(s for s in async_slices if s["name"] == "req" and s["args"].get("k") == "v")
    assert req1["args"] == {"k": "v", "status": 200} and req1["end"] - req1["ts"] == 20_000
    assert tracks[req1["track"]].name == "req"
    # (pid, cat, id) keys: ids 1 and 2, cat "other", the local id2 and the legacy id each get a track
    assert len({s["track"] for s in async_slices if s["name"] != "outer"}) == 5
    outer = next(s for s in async_slices if s["name"] == "outer")
    assert tracks[outer["track"]].name == "req (overlap 1)"
    (mark,) = got["instants"]
    assert mark["name"] == "mark" and mark["track"] == req1["track"]
    ev = summary["events"]
    assert ev["dropped_by"] == {"async event without an id": 1}
    assert ev["in"] == ev["out"] + ev["dropped"] == 15


def test_input_flows_join_the_slices_perfetto_binds_them_to(tmp_path):
    gpu = dict(pid=0, tid=7)
    r0 = kineto([
        x("aten::linear", 100.0, 20.0, tid=1), x("aten::t", 105.0, 2.0, tid=1),
        x("cudaLaunchKernel", 110.0, 5.0, tid=1, cat="cuda_runtime"),
        x("sgemm", 130.0, 10.0, cat="kernel", **gpu),
        x("LinearBackward0", 300.0, 30.0, tid=2), x("bwd_child", 310.0, 5.0, tid=2),
        # fwdbwd: s at the forward op's start, f (bp e) at the backward op's start
        _ev("s", "fwdbwd", 100.0, tid=1, cat="fwdbwd", id=5),
        _ev("f", "fwdbwd", 300.0, tid=2, cat="fwdbwd", id=5, bp="e"),
        # ac2g with the same id 5: told apart by (cat, name), as Perfetto does
        _ev("s", "ac2g", 111.0, tid=1, cat="ac2g", id=5),
        _ev("f", "ac2g", 130.0, cat="ac2g", id=5, bp="e", **gpu),
        # a step and an f without bp (binds to the next slice beginning on its thread)
        _ev("s", "chain", 106.0, tid=1, id=9), _ev("t", "chain", 135.0, cat="c", id=9, **gpu),
        _ev("f", "chain", 305.0, tid=2, id=9),
        # v2 on the X events themselves
        x("producer", 200.0, 5.0, tid=3), x("consumer", 250.0, 5.0, tid=4),
        # nothing to bind to: dropped and counted
        _ev("s", "lost", 1000.0, tid=1, id=11), _ev("f", "lost", 1001.0, tid=1, id=11, bp="e"),
    ], rank=1)
    r0["traceEvents"][-4].update(bind_id=77, flow_out=True)      # producer
    r0["traceEvents"][-3].update(bind_id=77, flow_in=True)       # consumer
    out, summary = merge(tmp_path, [kineto([x("r0", 100.0, 1.0)], rank=0), r0])
    got = read_pftrace(out)
    arcs = Counter((a["name"], b["name"]) for _, a, b in got["arcs"])
    assert arcs == {("aten::linear", "LinearBackward0"): 1, ("cudaLaunchKernel", "sgemm"): 1,
                    ("aten::t", "sgemm"): 1, ("sgemm", "bwd_child"): 1, ("producer", "consumer"): 1}
    ids = {(a["name"], b["name"]): f for f, a, b in got["arcs"]}
    # ids are the JSON output's namespaced ids; the second flow kind sits above bit 56
    from tracemerge.place.ids import namespace_id
    assert {ids["aten::linear", "LinearBackward0"] & ((1 << 56) - 1), ids["cudaLaunchKernel", "sgemm"] & ((1 << 56) - 1)} \
        == {namespace_id(1, 5)}
    assert ids["aten::linear", "LinearBackward0"] != ids["cudaLaunchKernel", "sgemm"]
    assert not got["unmatched_flow_ends"]
    ev = summary["events"]
    assert ev["dropped_by"] == {"flow 's' with no slice on its thread at its time": 1,
                                "flow 'f' with no slice on its thread at its time": 1}
    assert summary["perfetto"]["flow_events"] == 7
    assert ev["in"] == ev["out"] + ev["dropped"]


def test_flow_end_on_a_slice_that_began_before_the_source_goes_on_its_end(tmp_path):
    r0 = kineto([x("long", 100.0, 100.0, tid=2), x("src", 120.0, 10.0, tid=1),
                 _ev("s", "f", 125.0, tid=1, id=1), _ev("f", "f", 150.0, tid=2, id=1, bp="e")], rank=0)
    out, summary = merge(tmp_path, [r0])
    got = read_pftrace(out)
    ((_, a, b),) = got["arcs"]
    assert (a["name"], b["name"]) == ("src", "long") and b["end_terminating"] == [_]
    assert summary["events"]["dropped"] == 0


@pytest.mark.parametrize("core", ["native", "python"])
def test_a_thread_keeps_its_tid_whatever_was_asked_before(tmp_path, monkeypatch, core):
    # five instants on thread 7, then one on thread 8: asking for thread 7's track again
    # must not take tids 8, 9, ... from the threads that come later
    monkeypatch.setenv("TRACEMERGE_CORE", core)
    events = [{"ph": "i", "name": f"tick{n}", "pid": 100, "tid": 7, "ts": 10 + n, "s": "t"} for n in range(5)]
    events += [{"ph": "i", "name": "tock", "pid": 100, "tid": 8, "ts": 20, "s": "t"}, x("op", 30, 5, tid=9)]
    out, _ = merge(tmp_path, [kineto(events, rank=0)])
    got = read_pftrace(out)
    tids = {item["name"]: thread_of(got["tracks"], item["track"])[1] for item in got["instants"] + got["slices"]}
    assert tids == {**{f"tick{n}": 7 for n in range(5)}, "tock": 8, "op": 9}
