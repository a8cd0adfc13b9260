"""Writing a rank file: the exported Kineto trace plus the ``"tracemerge"`` object first.

See docs/rank-file-format.md. The trace is kept as Kineto wrote it except that the
spans the instrumentation opened get its ``args`` (rpc_id, role): ``record_function``
cannot attach arguments that Kineto exports, so they are added here; and the span torch
opens unnamed around ``rref.to_here()`` gets its name (capture/rref.py).
"""

import bisect
import os
from collections import defaultdict

import orjson

from tracemerge.capture import native_sides
from tracemerge.files import kineto_text
from tracemerge.files.codecs import Gzip

FORMAT_VERSION = 1

# How far a trace event may start after the time.time_ns() taken just inside its span:
# the two clocks agree to ±2 µs, while two spans of one name on one thread start
# further apart than this (each one sends an RPC in between).
_MATCH_SLACK_NS = 10_000


def write(path: "os.PathLike[str] | str", kineto_json_path: "os.PathLike[str] | str | None",
          meta: dict, taken: dict, served_ops: bool = False, ended_elsewhere: "dict | None" = None) -> None:
    """Write ``path`` from the Kineto export and the recorder's ``taken`` records.

    ``meta`` holds the other fields, in file order; ``taken`` is
    ``Recorder.take(...)``'s output. The Kineto export is removed; without one
    (``trace=False``) the file has no events. ``served_ops``: callers sent builtins here
    as themselves, and the block keeps the ops that may have served them (native_sides).
    ``ended_elsewhere``: {(name, start ns): asynchronous} of the spans ended in C++, as the
    profiler recorded them (session.ended_elsewhere); their ``args.async`` says the same.
    The events are Kineto's, none added or removed.
    """
    if kineto_json_path is None:  # trace=False: the records only
        trace: dict = {"traceEvents": []}
    else:
        with open(kineto_json_path, "rb") as f:
            trace = orjson.loads(f.read())
        os.unlink(kineto_json_path)
    _annotate(trace, taken["spans"], ended_elsewhere or {})
    block = {"version": FORMAT_VERSION, **meta,
             "rpcs": taken["rpcs"], "collectives": taken["collectives"],
             "remote_sides": taken.get("remote_sides", [])}
    if taken.get("native_callees"):
        block["native_callees"] = taken["native_callees"]
    if served_ops:
        # the ops that served the builtins callers sent here as themselves: combine pairs them
        block["served_ops"] = native_sides.served_ops(trace, meta.get("pid", -1), meta.get("profile_start_ns") or 0,
                                                      meta.get("profile_stop_ns") or 2**62)
    # "tracemerge" first, so readers can stop parsing after it; spelled as torch spells the
    # trace where other tools read the text (HTA's rank: kineto_text)
    parts = kineto_text.document({"tracemerge": block, **trace})
    tmp = f"{path}.tmp"
    # the combine's own gzip (level 1): this runs in the training job, where time counts more than size
    with open(tmp, "wb") as raw, Gzip().writer(raw) as f:
        f.writelines(parts)
    os.replace(tmp, path)


# a record's role -> (its start, the end its span ended in C++ holds, the bound it replaces)
_ENDS = {"caller": ("send_ns", "complete_ns", "complete_by_ns"), "callee": ("start_ns", "end_ns", "end_by_ns")}


def _annotate(trace: dict, spans: list, ended_elsewhere: dict) -> None:
    """Add each span's args to the trace event it opened (``args.async`` of a span ended in
    C++ from ``ended_elsewhere``, where the profiler recorded it)."""
    base = trace.get("baseTimeNanoseconds", 0)
    wanted = {(s.tid, s.name) for s in spans}
    starts = defaultdict(list)  # (tid, name) -> [(start ns, event)]
    for e in trace.get("traceEvents", ()):
        if e.get("ph") == "X" and (e.get("tid"), e.get("name")) in wanted:
            starts[(e["tid"], e["name"])].append((base + round(e["ts"] * 1000), e))
    for events in starts.values():
        events.sort(key=lambda pair: pair[0])
    for span in spans:
        found = starts.get((span.tid, span.name))
        if not found:
            continue  # e.g. the span closed after the profiler stopped
        if span.rename:
            # marked just before torch opened it: the first unnamed event from then on (two
            # fetches on a thread start a round trip apart, far more than the slack)
            i = bisect.bisect_left(found, span.mark_ns - _MATCH_SLACK_NS, key=lambda pair: pair[0])
            if i < len(found) and found[i][1].get("name") == "":
                found[i][1]["name"] = span.rename
                found[i][1].setdefault("args", {}).update(span.args)
            continue
        i = bisect.bisect_right(found, span.mark_ns + _MATCH_SLACK_NS, key=lambda pair: pair[0])
        if i:
            start, event = found[i - 1]
            event.setdefault("args", {}).update(span.args)
            if span.ends is not None:
                # a span ended in C++ when its future completed: where it ended is the
                # profiler's record, and its end is the call's (the caller's t4, or an
                # async_execution callee's t3)
                if (span.name, start) in ended_elsewhere:
                    event["args"]["async"] = ended_elsewhere[span.name, start]
                begun, ended, bound = _ENDS[span.ends["role"]]
                if ended not in span.ends and span.ends["status"] != "pending" and event["args"].get("finished", True):
                    span.ends[ended] = max(span.ends[begun], start + round(event.get("dur", 0) * 1000))
                    span.ends.pop(bound, None)  # the end itself, in place of when it was seen done
