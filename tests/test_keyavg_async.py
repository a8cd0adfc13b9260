"""Self CPU of in-flight ``rpc_async`` spans against torch's own EventList.

The spans of an ``rpc_async``/``remote`` call end on another thread (the one that completes
the future), so torch's key_averages() counts each once, nests nothing under it and gives
it self CPU 0, even when several are in flight on one thread. The captured samples record
that fact per span (``args.async``, written by the capture, which saw where the span ended);
here torch's ``EventList`` is built from the same events with ``is_async`` from that fact and
compared with tracemerge's key averages, row by row: counts, CPU total, self CPU.
"""

import gzip
import json
import os
from decimal import Decimal

import numpy as np
import pytest
from support.paths import SAMPLES

from tracemerge.inputs import read_trace
from tracemerge.report.keyavg import group_rows, key_averages

profiler_util = pytest.importorskip("torch.autograd.profiler_util")

HOST_CATEGORIES = ("cpu_op", "user_annotation")   # what torch's CPU profile holds (not the "Trace" span)
# ranks whose caller thread has rpc_async spans in flight together (threads_1: four at once)
CALLERS = ["threads_1/rank0.json.gz", "rpc_profiling/rank0.json.gz"]
CALLEES = ["threads_1/rank1.json.gz", "rpc_profiling/rank1.json.gz"]


def host_events(path):
    """(``path``: under samples/, or absolute) The trace's host spans, their ts and dur in µs from the first one: the files' µs
    timestamps (4.6e12) are read exactly and made small before they become floats, as
    tracemerge keeps them in integer ns."""
    with gzip.open(os.path.join(SAMPLES, path)) as f:
        doc = json.load(f, parse_float=Decimal)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in HOST_CATEGORIES]
    origin = min(e["ts"] for e in events)
    return [{**e, "ts": float(e["ts"] - origin), "dur": float(e["dur"])} for e in events]


def ends_elsewhere(event):
    """What torch's Kineto events say as is_async: the span ended on another thread. The
    capture records it for RPC spans; gloo's work (``gloo:*`` on pt_gloo_runloop threads) is
    handed over between threads as well, and torch counts it the same way (the real job of
    test_rpc_concurrent.py shows both)."""
    return (event.get("args") or {}).get("async") is True or event["name"].startswith("gloo:")


def torch_rows(events, is_async):
    evs = profiler_util.EventList([
        profiler_util.FunctionEvent(
            id=i, name=profiler_util._rewrite_name(e["name"], with_wildcard=True), thread=e["tid"],
            start_us=e["ts"], end_us=e["ts"] + e["dur"], stack=[], is_async=is_async(e),
            is_user_annotation=e["cat"] == "user_annotation")
        for i, e in enumerate(events) if not profiler_util._filter_name(e["name"])])
    evs._build_tree()
    return {(a.key, a.is_user_annotation): (a.count, a.cpu_time_total, a.self_cpu_time_total)
            for a in evs.key_averages()}


def tracemerge_rows(path):
    trace = read_trace(os.path.join(SAMPLES, path))
    rows = group_rows(key_averages(trace, np.zeros(len(trace.pids), dtype=np.int64)), by_rank=False)
    return {(r.key, r.is_user_annotation): (r.count, r.cpu_time_total, r.self_cpu_time_total) for r in rows}


def assert_same(got, expected):
    assert set(got) == set(expected)
    for key, (count, total, self_) in expected.items():
        assert got[key][0] == count, key
        assert got[key][1] == pytest.approx(total, rel=1e-9, abs=1e-6), key
        assert got[key][2] == pytest.approx(self_, rel=1e-9, abs=1e-6), key


@pytest.mark.parametrize("path", CALLERS + CALLEES)
def test_key_averages_equal_torch_event_list(path):
    assert_same(tracemerge_rows(path), torch_rows(host_events(path), ends_elsewhere))


@pytest.fixture(params=CALLERS)
def enclosed(request, tmp_path):
    """A caller's file with one more span around everything on the thread that issued the
    RPCs: there the asynchronous spans, were they nested, would take the ops in flight with
    them as children, and the enclosing span's self CPU would show it."""
    with gzip.open(os.path.join(SAMPLES, request.param), "rt") as f:
        text = f.read()
    doc = json.loads(text, parse_float=Decimal)   # exact µs: the new span's times are written as read
    tid = next(e["tid"] for e in doc["traceEvents"] if (e.get("args") or {}).get("async") is True)
    mine = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("tid") == tid and e.get("cat") in HOST_CATEGORIES]
    start, end = min(e["ts"] for e in mine) - 1, max(e["ts"] + e["dur"] for e in mine) + 1
    span = (f'{{"ph":"X","cat":"user_annotation","name":"enclosing","pid":{json.dumps(mine[0]["pid"])},"tid":{tid},'
            f'"ts":{start},"dur":{end - start},"args":{{}}}},')
    at = text.index("[", text.index('"traceEvents"')) + 1   # the span goes first; the values stay as written
    path = tmp_path / os.path.basename(request.param)
    with gzip.open(path, "wt") as f:
        f.write(text[:at] + span + text[at:])
    return str(path)


def test_asynchronous_spans_stay_out_of_the_nesting(enclosed):
    expected = torch_rows(host_events(enclosed), ends_elsewhere)
    assert_same(tracemerge_rows(enclosed), expected)
    nested = torch_rows(host_events(enclosed), lambda e: e["name"].startswith("gloo:"))
    assert nested[("enclosing", True)][2] != expected[("enclosing", True)][2]


@pytest.mark.parametrize("path", CALLERS)
def test_in_flight_rpc_async_spans_have_no_self_cpu(path):
    """The callers' asynchronous RPC spans: counted once each, self CPU 0, and the case is a
    real one: nested as ordinary spans they would have self CPU (or swallow the ops between
    them), so a tracemerge that did so would fail the comparison above."""
    events = host_events(path)
    spans = [e for e in events if e["args"].get("async") is True]
    keys = {(profiler_util._rewrite_name(e["name"], with_wildcard=True), e["cat"] == "user_annotation")
            for e in spans}
    assert any(e["name"].startswith("rpc_async#") for e in spans)
    got = tracemerge_rows(path)
    for key in keys:
        assert got[key][0] == sum((e["name"], e["cat"] == "user_annotation") == key for e in spans), key
        assert got[key][2] == 0, key
    as_sync = torch_rows(events, lambda e: e["name"].startswith("gloo:"))
    assert any(as_sync[key][2] > 0 for key in keys)
    assert as_sync != torch_rows(events, ends_elsewhere)
