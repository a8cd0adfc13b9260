"""The RPC spans in a rank's events: the X events whose ``args`` carry ``rpc_id`` (and
``role``), as the capture writes them (docs/rank-file-format.md).

One reading of them serves two stages: describing a rank (:func:`spans`: which RPC spans
its events hold, so the flow plan draws an arrow only where both of its spans will be in
the output) and writing it (:func:`span_args`, from which ``place.arrows`` finds the spans
to bind arrows to)."""

from typing import Any, Dict, Iterator, List, Tuple

import msgspec
import numpy as np

from tracemerge.errors import TraceError
from tracemerge.model import NO_DUR, NO_TS, RankTrace


def span_args(trace: RankTrace) -> Iterator[Tuple[int, str, Any]]:
    """(event index, rpc_id, role) of every timed X event whose args name an ``rpc_id``, in
    event order; a non-string id or role is an input error naming the event."""
    span = (trace.ph == ord("X")) & (trace.ts != NO_TS) & (trace.dur != NO_DUR)
    idx = np.asarray(trace.args.with_key("rpc_id"), np.int64)
    idx = idx[span[idx]].tolist() if len(idx) else []
    # each key of these events' args decoded together (a rank's thousands of spans, one at
    # a time, were ~7 us each); UNSET: no rpc_id, or args that are no object
    ids = trace.args.key_values(idx, "rpc_id")
    roles = trace.args.key_values(idx, "role", missing=None, no_object=None)
    for i, rpc_id, role in zip(idx, ids, roles):
        if rpc_id is msgspec.UNSET:
            continue
        if not isinstance(rpc_id, str) or not isinstance(role, (str, type(None))):
            bad, value = ("rpc_id", rpc_id) if not isinstance(rpc_id, str) else ("role", role)
            raise TraceError(trace.path, f"'args.{bad}' is not a string: {value!r}", i)
        yield i, rpc_id, role


def spans(trace: RankTrace) -> List[Dict[str, Any]]:
    """The RPC spans of a rank as small records: rpc_id, role, ts_ns and dur_ns (the file's
    clock) and cat (what the size controls of ``combine`` select by)."""
    found = list(span_args(trace))
    at = [i for i, _, _ in found]
    # the columns as Python ints at once: a numpy scalar per field and span cost more than the rest
    cats = trace.cat[at].tolist()
    # the names of the few codes these spans use (a GPU rank's table holds tens of thousands);
    # code -1 is an event without a cat
    named = {c: trace.names[c] if c >= 0 else "" for c in set(cats)}
    return [{"rpc_id": rpc_id, "role": role, "ts_ns": ts, "dur_ns": dur,
             "cat": named[cat] if isinstance(named[cat], str) else ""}
            for (_, rpc_id, role), ts, dur, cat in zip(found, trace.ts[at].tolist(), trace.dur[at].tolist(), cats)]
