"""The RPC spans in a rank's events: the X events whose ``args`` carry ``rpc_id`` (and
``role``), as the capture writes them (docs/rank-file-format.md).

One reading of them serves two stages: describing a rank (:func:`spans`: which RPC spans
its events hold, so the flow plan draws an arrow only where both of its spans will be in
the output) and writing it (:func:`span_args`, from which ``place.arrows`` finds the spans
to bind arrows to)."""

from typing import Any, Dict, Iterator, List, Optional, Tuple

import msgspec
import numpy as np

from tracemerge.errors import TraceError
from tracemerge.model import NO_DUR, NO_TS, RankTrace


class _RpcKeys(msgspec.Struct):
    """The two keys of an RPC span's args; the event's other args are skipped unbuilt."""

    rpc_id: Any = msgspec.UNSET
    role: Any = None


_RPC_KEYS = msgspec.json.Decoder(List[Optional[_RpcKeys]])


def span_args(trace: RankTrace) -> Iterator[Tuple[int, str, Any]]:
    """(event index, rpc_id, role) of every timed X event whose args name an ``rpc_id``, in
    event order; a non-string id or role is an input error naming the event."""
    span = (trace.ph == ord("X")) & (trace.ts != NO_TS) & (trace.dur != NO_DUR)
    idx = np.asarray(trace.args.with_key("rpc_id"), np.int64)
    idx = idx[span[idx]].tolist() if len(idx) else []
    for i, (rpc_id, role) in zip(idx, _keys(trace, idx)):
        if rpc_id is msgspec.UNSET:
            continue
        if not isinstance(rpc_id, str) or not isinstance(role, (str, type(None))):
            bad, value = ("rpc_id", rpc_id) if not isinstance(rpc_id, str) else ("role", role)
            raise TraceError(trace.path, f"'args.{bad}' is not a string: {value!r}", i)
        yield i, rpc_id, role


def _keys(trace: RankTrace, idx: List[int]) -> List[Tuple[Any, Any]]:
    """(rpc_id or UNSET, role) of the events ``idx``: raw args decoded together, into the two
    keys only (one call for a rank's thousands of spans: ~7 us a span one at a time)."""
    args = trace.args.take(idx)
    if args.raw:
        try:
            found = _RPC_KEYS.decode(b"[" + b",".join(a if a is not None else b"null" for a in args.items) + b"]")
            return [(msgspec.UNSET, None) if a is None else (a.rpc_id, a.role) for a in found]
        except msgspec.ValidationError:  # args that are not objects: one by one, below
            pass
    return [(a["rpc_id"], a.get("role")) if isinstance(a, dict) and "rpc_id" in a else (msgspec.UNSET, None)
            for a in args]


def spans(trace: RankTrace) -> List[Dict[str, Any]]:
    """The RPC spans of a rank as small records: rpc_id, role, ts_ns and dur_ns (the file's
    clock) and cat (what the size controls of ``combine`` select by)."""
    out = []
    for i, rpc_id, role in span_args(trace):
        cat = trace.names[trace.cat[i]]
        out.append({"rpc_id": rpc_id, "role": role, "ts_ns": int(trace.ts[i]), "dur_ns": int(trace.dur[i]),
                    "cat": cat if isinstance(cat, str) else ""})
    return out
