"""RPC flow arrows: caller span -> callee span -> caller, in JSON and in protobuf."""

import glob
import os
from collections import Counter

import pytest
from support.paths import SAMPLES
from support.pftrace import read_pftrace, thread_of
from support.ranks import BASE, load_output, rank_file, write, x

from tracemerge.correlate.match import match_rpcs
from tracemerge.job import Session
from tracemerge.merge.combine import combine
from tracemerge.place.selection import Selection


def rpc_pair(caller_ts=100.0, callee_ts=130.0, wrong_rank_span=False):
    """Rank 0 calls rank 1 once ("0:0"); rank 1 also writes a stray span claiming to be the caller."""
    name = "rpc_async#f(worker0 -> worker1)"
    rec = {"rpc_id": "0:0", "kind": "rpc_async", "func": "f", "name": name, "caller": 0, "callee": 1}
    r0 = rank_file([x(name, caller_ts, 100.0, pid=7, tid=1, cat="user_annotation", rpc_id="0:0", role="caller"),
                    x("inner", caller_ts + 10, 5.0, pid=7, tid=1)],
                   rank=0, rpcs=[{**rec, "role": "caller", "send_ns": BASE + 100_000, "complete_ns": BASE + 200_000}])
    callee = [x(name + "#remote", callee_ts, 40.0, pid=8, tid=3, cat="user_annotation", rpc_id="0:0", role="callee")]
    if wrong_rank_span:
        callee.append(x(name, callee_ts + 50, 5.0, pid=8, tid=3, rpc_id="0:0", role="caller"))
    r1 = rank_file(callee, rank=1, rpcs=[{**rec, "role": "callee", "start_ns": BASE + 130_000, "end_ns": BASE + 170_000}])
    return r0, r1


def merge(tmp_path, docs, out, **kw):
    paths = [write(tmp_path / f"rank{r}.json", d) for r, d in enumerate(docs)]
    session = Session.open(paths)
    summary = combine(session, session.align("wall"), str(tmp_path / out), force=True, **kw)
    return str(tmp_path / out), summary


def kept_spans(events, pid, tid):
    """The X events of a thread that Perfetto's JSON import keeps on the thread's slice stack
    (as (ts, end, name)): spans in (ts, -dur) order, one partly overlapping the open span is
    dropped from the track."""
    spans = sorted((e["ts"], -e["dur"], e["name"]) for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == (pid, tid))
    kept, stack = [], []
    for ts, neg_dur, name in spans:
        while stack and stack[-1][1] <= ts:
            stack.pop()
        if not stack or ts - neg_dur <= stack[-1][1]:
            stack.append((ts, ts - neg_dur, name))
            kept.append(stack[-1])
    return kept


def enclosing(events, flow):
    """The innermost kept X event on the flow's thread containing its ts (None when none)."""
    hits = [k for k in kept_spans(events, flow["pid"], flow["tid"]) if k[0] <= flow["ts"] <= k[1]]
    return max(hits, key=lambda k: (k[0], -k[1]))[2] if hits else None


def check_json_flows(events, ordered=True):
    """Every flow id has one s and one f (bp e) and each binds inside a span; returns {id: (from, to)}."""
    flows = [e for e in events if e["ph"] in "sf" and e.get("cat") == "rpc"]
    arrows = {}
    for e in flows:
        assert isinstance(e["id"], int) and e["id"] < 2 ** 53 and e["name"] == "rpc"
        arrows.setdefault(e["id"], {})[e["ph"]] = e
    for fid, ends in arrows.items():
        assert set(ends) == {"s", "f"}, f"flow {fid} is missing an end"
        assert ends["f"]["bp"] == "e"
        assert ends["s"]["ts"] <= ends["f"]["ts"] or not ordered
    return {fid: (enclosing(events, ends["s"]), enclosing(events, ends["f"])) for fid, ends in arrows.items()}


def test_json_flows_join_caller_callee_caller(tmp_path):
    out, summary = merge(tmp_path, rpc_pair(wrong_rank_span=True), "t.json")
    events = load_output(out)["traceEvents"]
    arrows = check_json_flows(events)
    name = "rpc_async#f(worker0 -> worker1)"
    assert sorted(arrows.values()) == sorted([(name, name + "#remote"), (name + "#remote", name)])
    # the caller's spans are on rank 0's pid, the callee's on rank 1's: nothing else joined
    pids = {e["pid"] for e in events if e["ph"] in "sf"}
    assert pids == {summary["pids"]["0"]["7"], summary["pids"]["1"]["8"]}
    assert summary["rpc_flows"] == {"caller_spans": 1, "callee_spans": 1, "duplicate_spans": 0, "flow_events": 4}
    ev = summary["events"]
    assert ev["added"] >= 4 and ev["out"] == ev["in"] + ev["added"]


def test_protobuf_flows_join_the_right_slices(tmp_path):
    out, summary = merge(tmp_path, rpc_pair(wrong_rank_span=True), "t.pftrace")
    got = read_pftrace(out)
    by_name = {}
    for s in got["slices"]:
        by_name.setdefault(s["name"], []).append(s)
    name = "rpc_async#f(worker0 -> worker1)"
    caller = next(s for s in by_name[name] if thread_of(got["tracks"], s["track"])[0] == summary["pids"]["0"]["7"])
    stray = next(s for s in by_name[name] if s is not caller)
    (callee,) = by_name[name + "#remote"]
    req, resp = caller["flows"][0], caller["end_terminating"][0]
    assert caller["flows"] == [req] and callee["terminating"] == [req]        # caller -> callee
    assert callee["end_flows"] == [resp] and caller["end_terminating"] == [resp]  # callee -> caller
    assert req != resp
    assert not (stray["flows"] or stray["terminating"] or stray["end_flows"] or stray["end_terminating"])
    assert not by_name["inner"][0]["flows"]


def test_no_flows_when_the_peer_rank_is_left_out(tmp_path):
    out, summary = merge(tmp_path, rpc_pair(), "t.json", selection=Selection(ranks=frozenset({0})))
    assert not [e for e in load_output(out)["traceEvents"] if e["ph"] in "sf"]
    assert "rpc_flows" not in summary or summary["rpc_flows"].get("flow_events", 0) == 0


@pytest.mark.parametrize("sample", ["rpc_profiling", "threads_1", "threads_8", "parameter_server", "rl_agent"])
def test_real_rpc_sample_has_flows_for_every_call(tmp_path, sample):
    paths = sorted(glob.glob(os.path.join(SAMPLES, sample, "rank*.json.gz")))
    if not paths:
        pytest.skip(f"no {sample} samples")
    session = Session.open(paths)
    calls = [c for c in match_rpcs(session.infos).calls if c.send_ns is not None and c.start_ns is not None]
    assert calls
    out = str(tmp_path / "t.json")
    combine(session, session.align("wall"), out)
    events = load_output(out)["traceEvents"]
    arrows = check_json_flows(events)
    assert len(arrows) == 2 * len(calls)
    # every RPC span is on its track in Perfetto's JSON import (spans that cannot nest on
    # their thread went to lanes of it), and every arrow binds to the two spans of its call
    on_track = {k[2] for e in events if e["ph"] == "X" for k in kept_spans(events, e["pid"], e["tid"])}
    rpc_spans = {e["name"] for e in events if e["ph"] == "X" and "rpc_id" in (e.get("args") or {})}
    assert rpc_spans <= on_track
    want = Counter([(c.name, c.name + "#remote") for c in calls] + [(c.name + "#remote", c.name) for c in calls])
    assert Counter(arrows.values()) == want
    combine(session, session.align("wall"), str(tmp_path / "t.pftrace"))
    got = read_pftrace(str(tmp_path / "t.pftrace"))
    rpc = range(1 << 52, 1 << 53)  # RPC flow ids (the samples with autograd have input flows too)
    starts = [f for s in got["slices"] for f in s["flows"] + s["end_flows"] if f in rpc]
    ends = [f for s in got["slices"] for f in s["terminating"] + s["end_terminating"] if f in rpc]
    assert sorted(starts) == sorted(ends) and len(starts) == 2 * len(calls)


def _cut(src, dst, fraction):
    """A copy of the (gzip) rank file ``src`` whose JSON ends early, as a transfer cut short leaves it."""
    import gzip
    data = gzip.decompress(open(src, "rb").read())
    open(dst, "wb").write(data[:int(len(data) * fraction)])
    return str(dst)


def _flow_ids(events):
    return Counter(e["id"] for e in events if e.get("ph") in ("s", "t", "f") and e.get("cat") == "rpc")


def test_a_cut_callee_file_draws_no_arrow_into_the_air_and_the_summary_says_so(tmp_path):
    """The callee's file ends early: its records (in the head) name every call, but some of its
    callee spans were cut off. An arrow is drawn only where both spans are in the output, and
    the summary counts what was drawn, not what the records say."""
    paths = sorted(glob.glob(os.path.join(SAMPLES, "rpc_profiling", "rank*.json.gz")))
    cut = _cut(paths[1], tmp_path / "rank1.json", 0.7)
    job = Session.open([paths[0], cut])
    summary = combine(job, job.align("auto"), str(tmp_path / "t.json"))
    events = load_output(str(tmp_path / "t.json"))["traceEvents"]
    callee_spans = {e["args"]["rpc_id"] for e in events if e["ph"] == "X" and (e.get("args") or {}).get("role") == "callee"}
    caller_spans = {e["args"]["rpc_id"] for e in events if e["ph"] == "X" and (e.get("args") or {}).get("role") == "caller"}
    both_recorded = summary["rpc_sides"]["both_sides"]
    assert len(callee_spans) < both_recorded, "the cut was meant to lose callee spans"
    ids = _flow_ids(events)
    assert set(ids.values()) == {2}, "every arrow has both of its ends"
    drawn = len(callee_spans & caller_spans)
    assert summary["rpc_sides"]["drawn"] == drawn == len(ids) // 2
    assert summary["rpc_sides"]["spans_missing"] == {"caller": both_recorded - len(caller_spans),
                                                     "callee": both_recorded - len(callee_spans)}
    assert summary["rpc_flows"]["callee_spans"] == drawn


def test_spans_left_out_by_the_window_take_their_arrows_with_them(tmp_path):
    """--window keeps the caller's span but not the callee's: neither the arrow nor half of it."""
    out, summary = merge(tmp_path, rpc_pair(caller_ts=100.0, callee_ts=5_000.0), "t.json",
                         selection=Selection(window_ms=(0.0, 1.0)))
    events = load_output(out)["traceEvents"]
    assert any(e["ph"] == "X" and e["name"] == "rpc_async#f(worker0 -> worker1)" for e in events)
    assert not any(e["ph"] == "X" and e["name"].endswith("#remote") for e in events)
    assert not _flow_ids(events)
    assert summary["rpc_sides"]["drawn"] == 0 and summary["rpc_sides"]["spans_missing"] == {"caller": 0, "callee": 1}


@pytest.mark.parametrize("core", ["native", "python"])
def test_an_rpc_span_without_a_cat_is_of_no_category(tmp_path, monkeypatch, core):
    """A caller span written without "cat" is kept by ``--drop-category`` of any name: its
    category is none, not the name that happens to come last in the rank's string table
    (which the code -1 of an absent cat once read)."""
    monkeypatch.setenv("TRACEMERGE_CORE", core)
    r0, r1 = rpc_pair()
    del r0["traceEvents"][0]["cat"]
    last = r0["traceEvents"][-1]
    last["cat"] = "zz_last_category"  # a category that is also the last string the reader meets
    _, summary = merge(tmp_path, [r0, r1], "out.json",
                       selection=Selection(drop_categories=frozenset({"zz_last_category"})))
    assert summary["rpc_flows"] == {"caller_spans": 1, "callee_spans": 1, "duplicate_spans": 0, "flow_events": 4}
