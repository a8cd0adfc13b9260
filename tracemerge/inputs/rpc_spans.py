"""The RPC spans in a rank's events: the X events whose ``args`` carry ``rpc_id`` (and
``role``), as the capture writes them (docs/rank-file-format.md).

One reading of them serves two stages: describing a rank (:func:`spans`: which RPC spans
its events hold, so the flow plan draws an arrow only where both of its spans will be in
the output) and writing it (:func:`span_args`, from which ``place.arrows`` finds the spans
to bind arrows to)."""

from typing import Any, Dict, Iterator, List, Tuple

from tracemerge.errors import TraceError
from tracemerge.model import NO_DUR, NO_TS, RankTrace


def span_args(trace: RankTrace) -> Iterator[Tuple[int, str, Any]]:
    """(event index, rpc_id, role) of every timed X event whose args name an ``rpc_id``, in
    event order; a non-string id or role is an input error naming the event."""
    span = (trace.ph == ord("X")) & (trace.ts != NO_TS) & (trace.dur != NO_DUR)
    for i in trace.args.with_key("rpc_id"):  # args are decoded for these events only
        if not span[i]:
            continue
        a = trace.args[i]
        if not isinstance(a, dict) or "rpc_id" not in a:
            continue
        rpc_id, role = a["rpc_id"], a.get("role")
        if not isinstance(rpc_id, str) or not isinstance(role, (str, type(None))):
            bad = "rpc_id" if not isinstance(rpc_id, str) else "role"
            raise TraceError(trace.path, f"'args.{bad}' is not a string: {a[bad]!r}", int(i))
        yield int(i), rpc_id, role


def spans(trace: RankTrace) -> List[Dict[str, Any]]:
    """The RPC spans of a rank as small records: rpc_id, role, ts_ns and dur_ns (the file's
    clock) and cat (what the size controls of ``combine`` select by)."""
    out = []
    for i, rpc_id, role in span_args(trace):
        cat = trace.names[trace.cat[i]]
        out.append({"rpc_id": rpc_id, "role": role, "ts_ns": int(trace.ts[i]), "dur_ns": int(trace.dur[i]),
                    "cat": cat if isinstance(cat, str) else ""})
    return out
