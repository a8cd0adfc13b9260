"""The callee's half of the builtins callers sent it as themselves (``recorder.Peers``).

Such a call runs on the callee's C++ path, where no Python runs: only its op in the
callee's own trace tells when it was served. The writer keeps what combine needs to pair
each call with that op, in the block's ``served_ops`` (docs/rank-file-format.md): every
outermost op on a thread that may serve RPCs (not the main thread; named
``pt_thread_pool``, ``python`` or not named), with its name, thread, start and end and,
when the profiler recorded them, its input shapes. Nothing is added to the events: the
pairing (``tracemerge.correlate.native_calls``) has both sides' data, the caller's exact
span ends included, where the callee would have had only what callers handed over.

Ops of wrapped calls nest inside their ``#remote`` spans, so they are not outermost and
not kept; what is kept grows with the builtin calls served, not with the trace.
"""

from collections import defaultdict

# RPC server threads are named pt_thread_pool, but Kineto reads a thread's name once, and
# a pool thread read before it named itself is "python" (what unnamed threads inherit).
_SERVER_THREADS = ("(pt_thread_pool)", "(python)")


def served_ops(trace: dict, main_tid: int, start_ns: int, stop_ns: int) -> list:
    """[{"name", "tid", "start_ns", "end_ns"[, "shapes"]}] of the outermost ``cpu_op``
    events on threads of ``trace`` that may serve RPCs, starting in [start_ns, stop_ns]
    (the file's window), by start. ``main_tid``: the process's main thread (its pid),
    which serves no RPC."""
    base = trace.get("baseTimeNanoseconds", 0)
    events = trace.get("traceEvents", ())
    named = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            named[(e.get("pid"), e.get("tid"))] = str((e.get("args") or {}).get("name", ""))
    by_thread = defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        where = (e.get("pid"), e.get("tid"))
        if e.get("tid") == main_tid or not named.get(where, _SERVER_THREADS[0]).endswith(_SERVER_THREADS):
            continue
        start = base + round(e["ts"] * 1000)
        by_thread[where].append((start, start + round(e["dur"] * 1000), e))
    out = []
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        outer_end = None
        for start, end, e in spans:
            if outer_end is not None and start < outer_end:
                continue  # inside an earlier span of this thread (an op's own layers, a served call's ops)
            outer_end = end
            if e.get("cat") != "cpu_op" or not start_ns <= start <= stop_ns:
                continue
            op = {"name": e.get("name", ""), "tid": e.get("tid"), "start_ns": start, "end_ns": end}
            dims = (e.get("args") or {}).get("Input Dims")
            if isinstance(dims, list):
                op["shapes"] = dims
            out.append(op)
    out.sort(key=lambda op: op["start_ns"])
    return out
