"""Chrome trace JSON output (``--format json``): streamed rank by rank, so only one rank's
events are in memory.

The document is made of pieces that can be produced apart: :func:`open_document`, one
:func:`encode_events` body per rank (worker processes write these as shard files),
:data:`SEPARATOR` between non-empty bodies, and :func:`close_document`.
"""

import itertools
import os
from collections import Counter
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union, cast

import msgspec
import numpy as np

from tracemerge import native
from tracemerge.algorithms.nesting import lanes
from tracemerge.files import names
from tracemerge.files.codecs import codec_for
from tracemerge.formats.base import Counts, Format
from tracemerge.model import Args, RankTrace, Replaced
from tracemerge.place.arrows import KINDS, json_events
from tracemerge.place.ids import namespaced_args
from tracemerge.place.placement import OutputEvent, Placement, aligned_ns, lane_tid, transform_chunks
from tracemerge.place.placement import _rewrite_process_metadata as rewrite_process_metadata

if TYPE_CHECKING:
    from tracemerge.place.arrows import Arrows, Found

SEPARATOR = b","
# Perfetto's UI holds about 2 GB; a JSON trace takes several times its size once loaded.
JSON_WARN_BYTES = 400 << 20


JSON_BYTES_PER_EVENT = 300    # Kineto events are ~257 B, ~437 B with record_shapes


def open_document(header: Dict[str, Any]) -> bytes:
    """``{...header, "traceEvents":[`` as bytes."""
    head = names.dumps(header)
    return head[:-1] + (b',"traceEvents":[' if len(head) > 2 else b'"traceEvents":[')


def encode_events(events: List[OutputEvent]) -> bytes:
    """One rank's events as the comma-joined body of the traceEvents array (b"" when none).

    msgspec writes dicts, ``merge.placement.Event`` structs and raw JSON args (verbatim) alike.
    """
    return msgspec.json.encode(events)[1:-1] if events else b""


def close_document(footer: Dict[str, Any]) -> bytes:
    """``],"tracemerge":footer}`` as bytes."""
    return b'],"tracemerge":' + names.dumps(footer) + b"}"


def rank_body(trace: RankTrace, place: Placement, arrows: Optional["Arrows"], found: "Found", counts: Counts,
              consume: bool) -> Tuple[Iterator[Union[list, bytes]], Counts]:
    """One rank's events as lists made lazily (the worker encodes and frees one list at a
    time), or as the body the compiled core writes for a trace it read (raising
    :class:`tracemerge.native.Declined` where it cannot), with its flow arrows' events last
    (RPC's, then send/recv's: ``found``), written here for either core."""
    times = aligned_ns(trace, place.clock, place.out_base_ns)
    # spans Perfetto's JSON importer could not show on their thread go to lanes of it
    moved = lanes(trace, times[0], times[0] + np.maximum(times[1], 0), walk=native.walk)
    if moved:
        counts["lanes_spans"] = len(moved)
        counts["lanes_lanes"] = len({(int(trace.pid[i]), int(trace.tid[i]), k) for i, k in moved.items()})
    if native.core_of(trace) == "native":  # read by the compiled core, which writes the events too
        body = native_body(cast(native.NativeTrace, trace), place, *times, moved)
        if body is None:
            raise native.Declined("a ts or dur of 1e16 µs or more")
        chunks: Iterable[Union[list, bytes]] = [body]
        made = transform_chunks(trace, place, times, lanes=moved)[1]
    else:
        chunks, made = transform_chunks(trace, place, times, release="events" if consume else "args", lanes=moved)
    if found:
        flow_events = json_events(found, trace, place, *times, lanes=moved)
        kinds = Counter(p.kind for points in found.values() for p in points)   # one event per point
        for kind in KINDS:
            if kind in kinds:
                counts[f"{kind}_flow_events"] = kinds[kind]
        made += flow_events
    return itertools.chain(chunks, [made]), {**counts, "added": len(made), "out": len(trace) + len(made)}


def native_body(trace: native.NativeTrace, place: Placement, start: np.ndarray, dur: np.ndarray,
                moved: Optional[Dict[int, int]] = None) -> Optional[bytes]:
    """The body :func:`~tracemerge.place.placement.transform_chunks` and
    :func:`encode_events` make of the own events of ``trace`` (read by the compiled core),
    written by the core's splice writer; None when it cannot write it. The renamed process
    metadata (a few events per rank) is made by the transform's own code and handed to the
    writer as replacement args; the spans ``moved`` to lanes ({event index: lane}) get
    their lane's tid, encoded as the Python path encodes it. Args the combine replaced
    (:class:`~tracemerge.model.Replaced`: the in-flight mark of ``place.in_flight``) are
    handed over the same way: the core reads flat args only, whose ids the Python path
    rewrites in their bytes one by one, so one item namespaced alone is what it writes."""
    overrides: Dict[int, bytes] = {}
    if isinstance(trace.args, Replaced):
        for i in trace.args.over:
            a = namespaced_args(place.rank, Args([trace.args.raw_item(i)], raw=True))[0]
            overrides[i] = bytes(a) if a.__class__ is msgspec.Raw else msgspec.json.encode(a)
    for i in np.flatnonzero(trace.ph == ord("M")).tolist():
        if trace.names[trace.name[i]] not in ("process_name", "process_sort_index"):
            continue
        args = namespaced_args(place.rank, Args([trace.args.raw_item(i)], raw=True))
        rewrite_process_metadata(trace, place, args, [i], i)
        a = args[0]
        overrides[i] = bytes(a) if a.__class__ is msgspec.Raw else msgspec.json.encode(a)
    tids = {i: msgspec.json.encode(lane_tid(trace.tids[trace.tid[i]], lane)) for i, lane in (moved or {}).items()}
    return native.json_body(trace, place, start, dur, overrides, tids)


def size_warning(output: str, summary: Dict[str, Any]) -> List[str]:
    """Warnings for a JSON output the Perfetto UI may fail to load (it holds about 2 GB)."""
    if summary.get("format") == "perfetto":
        return []
    if output != "-" and codec_for(output) is None:
        size = os.path.getsize(output)
    else:  # compressed or piped: estimate from the event count
        size = summary["events"]["out"] * JSON_BYTES_PER_EVENT
    if size <= JSON_WARN_BYTES:
        return []
    return [f"the JSON trace is about {size / 2**20:.0f} MB; the Perfetto UI may run out of memory loading "
            "it: write a .pftrace (-o trace.pftrace) or narrow it with --window/--ranks/--min-duration"]


FORMAT = Format("json", (".json",), rank_body, encode_events, open_document, SEPARATOR, close_document,
                warnings=size_warning)
