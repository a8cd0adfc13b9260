"""The callee's side of builtins sent natively, found in the callee's own trace.

A builtin sent as itself (``rpc_async("w1", torch.add, ...)``) runs on the callee's C++
path: nothing of the capture runs there, but the callee's profiler records its op
(``aten::add``) on the RPC server thread that ran it. Callers hand the records of the
builtins they sent natively over to the callee before it stops recording
(``rpc.stop_serving_natively``); here each is paired with its op, which gives the callee
record (``start_ns``/``end_ns`` are the op's) and a ``#remote`` span around the op.

Pairing: an op is a candidate when it is outermost on a thread that may serve RPCs (not
the main thread; named ``pt_thread_pool``, ``python`` or not named), has the call's builtin name, and starts inside the
caller's [send, complete] window put on this clock (exactly when both share one boot's
clock, else with the hand-over's own offset estimate, within its RTT/2). Calls are taken
in the order their windows end, each with the earliest candidate left, which pairs as
many calls as can be paired. A call alone in flight gets its own op. Calls of the same
builtin in flight together (from one caller or several) can only be told apart by time:
each gets an op of its builtin inside its window, used once, but two of them may have
exchanged ops. ``profile(wrap_builtins=True)`` sends builtins wrapped instead (exact,
at the Python path's cost).
"""

import bisect
from collections import defaultdict

# The profiler's op times and time.time_ns() agree to ±2 µs; a window this much wider
# keeps an op that starts right at the caller's send (same clock) inside it.
_SLACK_NS = 20_000
# RPC server threads are named pt_thread_pool, but Kineto reads a thread's name once, and
# a pool thread read before it named itself is "python" (what unnamed threads inherit).
_SERVER_THREADS = ("(pt_thread_pool)", "(python)")


def attach(trace: dict, handed: list, own_boot_id: str, main_tid: int) -> list:
    """Callee records for the calls in ``handed`` (``Recorder.native``) found in
    ``trace``; their ``#remote`` span events are appended to ``trace["traceEvents"]``.
    ``main_tid``: the process's main thread (its pid), which serves no RPC."""
    calls = []
    for group in handed:
        same_clock = bool(own_boot_id) and group.get("boot_id") == own_boot_id
        offset = 0 if same_clock else group["offset_ns"]
        slack = _SLACK_NS if same_clock else _SLACK_NS + group["rtt_ns"] // 2
        for call in group["calls"]:
            # a call settled lazily has only the time its end was seen, which bounds it
            end = call.get("complete_ns", call.get("_settled_ns"))
            calls.append((call["send_ns"] - offset - slack,
                          float("inf") if end is None else end - offset + slack, call, same_clock))
    if not calls:
        return []
    events = trace.setdefault("traceEvents", [])
    ops = _served_ops(trace, {c[2]["func"] for c in calls}, main_tid)
    used: dict = defaultdict(set)  # builtin name -> indices of its ops already paired
    records = []
    # Each call, by the end of its window, takes the earliest op left in it: this pairs
    # every call that can be paired (intervals and points, matched greedily).
    for low, high, call, same_clock in sorted(calls, key=lambda c: (c[1], c[0])):
        found, paired = ops.get(call["func"], []), used[call["func"]]
        i = bisect.bisect_left(found, low, key=lambda op: op[0])
        while i < len(found) and found[i][0] <= high and i in paired:
            i += 1
        if i == len(found) or found[i][0] > high:
            continue  # not in this trace (e.g. served before or after the profiler ran)
        paired.add(i)
        start_ns, end_ns, event = found[i]
        records.append(_record(call, start_ns, end_ns, same_clock))
        events.append(_span(call, event, start_ns, end_ns, trace.get("baseTimeNanoseconds", 0)))
    return records


def _served_ops(trace: dict, names: set, main_tid: int) -> dict:
    """name -> [(start ns, end ns, event)] of the outermost ops named ``names`` on
    threads that may serve RPCs, sorted by start."""
    base = trace.get("baseTimeNanoseconds", 0)
    named = {}
    for e in trace.get("traceEvents", ()):
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            named[(e.get("pid"), e.get("tid"))] = str((e.get("args") or {}).get("name", ""))
    by_thread = defaultdict(list)
    for e in trace.get("traceEvents", ()):
        if e.get("ph") != "X" or "dur" not in e:
            continue
        where = (e.get("pid"), e.get("tid"))
        if e.get("tid") == main_tid or not named.get(where, _SERVER_THREADS[0]).endswith(_SERVER_THREADS):
            continue
        start = base + round(e["ts"] * 1000)
        by_thread[where].append((start, start + round(e["dur"] * 1000), e))
    out = defaultdict(list)
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        outer_end = None
        for start, end, e in spans:
            if outer_end is not None and start < outer_end:
                continue  # inside an earlier span of this thread (an op's own layers, a served call's ops)
            outer_end = end
            if e.get("name") in names:
                out[e["name"]].append((start, end, e))
    for found in out.values():
        found.sort(key=lambda op: op[0])
    return out


def _record(call: dict, start_ns: int, end_ns: int, same_clock: bool) -> dict:
    if same_clock:
        # The profiler's clock and time.time_ns() differ by up to ±2 µs: on one clock the op
        # surely ran inside the call, and the records say so (the span keeps the op's times).
        start_ns = max(start_ns, call["send_ns"])
        end_ns = max(start_ns, min(end_ns, call.get("complete_ns", end_ns)))
    record = {k: call[k] for k in ("rpc_id", "kind", "func", "name", "caller", "callee", "caller_name", "callee_name")}
    # the op ran, so it ended; an error is known to the caller (a remote()'s never is)
    record.update(role="callee", native=True, start_ns=start_ns, end_ns=end_ns,
                  status="error" if call.get("status") == "error" else "ok")
    return record


def _span(call: dict, op: dict, start_ns: int, end_ns: int, base: int) -> dict:
    """The ``#remote`` span: 1 ns wider than the op on each side, so it is the op's parent
    whatever the order (equal extents nest by file order)."""
    return {"ph": "X", "cat": "user_annotation", "name": call["name"] + "#remote",
            "pid": op.get("pid"), "tid": op.get("tid"),
            "ts": round((start_ns - 1 - base) / 1000, 3), "dur": round((end_ns - start_ns + 2) / 1000, 3),
            "args": {"rpc_id": call["rpc_id"], "role": "callee", "async": False}}
