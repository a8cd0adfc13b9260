"""Perfetto protobuf writer: one rank's events as TrackEvent packets, encoded by hand.

A rank becomes one trusted packet sequence (id ``rank + 1``) whose first packet clears
the incremental state and interns every event name and category the rank uses; argument
keys are interned as they first appear. Each input pid is a process track (output pid,
``rank N · worker · host``), each (pid, tid) a thread track named as in the JSON output.
Complete events and paired ``B``/``E`` become SLICE_BEGIN/SLICE_END pairs with their args
as debug annotations; async ``b``/``e`` (and legacy ``S``/``F``) become slices, ``n``
instants, on an async track per (pid, cat, id) under the process; instants stay instants,
counters become counter tracks (``<name> <series>``); input flows become ``flow_ids`` /
``terminating_flow_ids`` on the slices they bind to (:func:`~tracemerge.formats.perfetto.flows.bind_input_flows`).

Perfetto requires slices on one track to nest; a slice that partially overlaps another on
its track moves to an extra track ``<track> (overlap k)`` under the same process and is
counted. Events with no TrackEvent counterpart (object, sample events) and unpaired
begin/end events are counted as dropped with the reason.

The encoder writes protobuf wire format directly (the message classes cost more per
event than the bytes themselves); tests parse the output with ``perfetto_trace_pb2``.
"""

import functools
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Set, Tuple, Union, cast

import msgspec
import numpy as np
import orjson

from tracemerge import native
from tracemerge.algorithms.arrays import distinct
from tracemerge.algorithms.nesting import nest_order, thread_runs
from tracemerge.formats.perfetto import time_shift
from tracemerge.formats.perfetto.flows import FlowRows, bind_input_flow_rows, bind_input_flows, event_id, merge_flows
from tracemerge.formats.perfetto.slices import SLICE_BEGIN, SLICE_END, nest, slice_order
from tracemerge.model import Args, RankTrace
from tracemerge.place.arrows import NO_FLOWS, SliceFlows
from tracemerge.place.ids import namespace_args
from tracemerge.place.placement import CHUNK, Placement, aligned_ns

INSTANT, COUNTER = 3, 4   # TrackEvent.Type (the slice types are in nesting)
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
UINT64_MASK = (1 << 64) - 1
SYNTHETIC_TID = 1 << 30   # base of the tids given to threads whose input tid is a string


# varints of 0..2**14 - 1, and the same 14 bits as two bytes that both continue
_SMALL = [bytes((n,)) if n < 0x80 else bytes((n & 0x7F | 0x80, n >> 7)) for n in range(1 << 14)]
_CONTINUED = [bytes((n & 0x7F | 0x80, n >> 7 | 0x80)) for n in range(1 << 14)]


def _varint(n: int) -> bytes:
    """Base-128 varint of a non-negative int, 14 bits per table lookup."""
    if n < 0x4000:
        if n < 0:
            raise ValueError(f"varint of a negative number {n}")
        return _SMALL[n]
    out = []
    while n >= 0x4000:
        out.append(_CONTINUED[n & 0x3FFF])
        n >>= 14
    out.append(_SMALL[n])
    return b"".join(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _uint(number: int, n: int) -> bytes:
    return _tag(number, 0) + _varint(n)


def _int(number: int, n: int) -> bytes:
    return _tag(number, 0) + _varint(n & UINT64_MASK)


def _double(number: int, x: float) -> bytes:
    return _tag(number, 1) + struct.pack("<d", x)


def _bytes(number: int, payload: bytes) -> bytes:
    return _tag(number, 2) + _varint(len(payload)) + payload


def _str(number: int, s: str) -> bytes:
    return _bytes(number, s.encode("utf-8", "surrogatepass"))


# Trace.packet
def _packet(payload: bytes) -> bytes:
    return b"\x0a" + _varint(len(payload)) + payload


@dataclass
class ProtoCounts:
    """What one rank's shard holds; ``out`` counts input events represented in it."""

    out: int = 0
    slices: int = 0
    instants: int = 0
    counters: int = 0
    metadata: int = 0
    flows: int = 0                   # input flow events bound to slices
    overlapping: int = 0             # slices moved to an overlap track
    overlap_tracks: int = 0
    dropped: Dict[str, int] = field(default_factory=dict)   # {reason: count}

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n


class _Annotations:
    """Debug annotations with interned names, valid within one packet sequence.

    Args repeat heavily (Kineto's ``Record function id: 0``, ``device: 0``, kernel grids), so
    the encoded bytes of each (name, value) pair are kept and reused; ints of 14 bits and
    more (ids, counters, mostly unique) are encoded directly.
    """

    def __init__(self) -> None:
        self.iids: Dict[str, bytes] = {}       # key -> DebugAnnotation.name_iid field bytes
        self.new: List[bytes] = []
        self.pairs: Dict[Tuple[Any, type, Any], bytes] = {}      # (key, value class, value or its repr) -> TrackEvent.debug_annotations field

    def name(self, key: str) -> bytes:
        field = self.iids.get(key)
        if field is None:
            iid = len(self.iids) + 1
            field = self.iids[key] = _uint(1, iid)
            self.new.append(_bytes(3, field + _str(2, key)))
        return field

    def value(self, v: Any) -> bytes:
        if isinstance(v, str):
            return _str(6, v)
        if isinstance(v, bool):
            return _uint(2, int(v))
        if isinstance(v, int):
            return _int(4, v) if -INT64_MAX - 1 <= v <= INT64_MAX else _str(6, str(v))
        if isinstance(v, float):
            return _double(5, v)
        if isinstance(v, dict):
            return b"".join(_bytes(11, self.name(str(k)) + self.value(x)) for k, x in v.items())
        if isinstance(v, list):
            return b"".join(_bytes(12, self.value(x)) for x in v) if v else _str(9, "[]")
        return _str(9, orjson.dumps(v).decode())

    def encode(self, args: Dict[str, Any]) -> bytes:
        pairs, iids = self.pairs, self.iids
        out = []
        for k, v in args.items():
            cls = v.__class__
            if cls is int and not 0 <= v < 0x4000 and -INT64_MAX - 1 <= v <= INT64_MAX:
                inner = (iids.get(k) or self.name(str(k))) + b"\x20" + _varint(v & UINT64_MASK)
                out.append(b"\x22" + _SMALL[len(inner)] + inner)
            else:
                # repr tells 1, 1.0 and True apart inside lists and dicts, as the class does outside
                key = (k, cls, repr(v)) if cls is list or cls is dict else (k, cls, v)
                out.append(pairs.get(key) or self._cached_pair(key, k, v))
        return b"".join(out)

    def encode_events(self, args: Args, events: List[int], rank: int) -> List[bytes]:
        """The debug annotations of the args of ``events`` (indices into ``args``), ids
        namespaced for ``rank``, in order (names are interned in first-use order). Raw args
        are encoded by the compiled core where it is active, every event it declines by
        :meth:`encode_python`, in turn."""
        if not args.raw or native.active() != "native":
            return self.encode_python(args, events, rank)
        raw = args.take(events).items
        out: List[bytes] = []
        at = 0
        while at < len(raw):
            done, at = native.debug_annotations(raw, at, rank, self.iids, self.new)
            out += done
            if at < len(raw):  # declined: the Python path encodes this one, then the core goes on
                try:
                    out += self.encode_python(args, [events[at]], rank)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    # args that cannot be decoded: the error the reference gives, which names
                    # the event's place in the chunk it decodes, not in a batch of one
                    lo = at - at % CHUNK
                    args.dicts(events[lo:lo + CHUNK])
                    raise
                at += 1
        return out

    def encode_python(self, args: Args, events: List[int], rank: int) -> List[bytes]:
        """:meth:`encode_events` by the Python path: the reference."""
        encoded: List[bytes] = []
        for lo in range(0, len(events), CHUNK):  # the decoded args of one chunk at a time
            encoded += [self.encode(namespace_args(rank, a)) if a else b"" for a in args.dicts(events[lo:lo + CHUNK])]
        return encoded

    def _cached_pair(self, key: Tuple[Any, type, Any], k: Any, v: Any) -> bytes:
        field = _bytes(4, self.name(str(k)) + self.value(v))
        # 0.0 == -0.0 and nan != nan as keys; long strings are rarely repeated
        if not ((key[1] is float and (v == 0 or v != v)) or (key[1] is str and len(v) > 256)):
            self.pairs[key] = field
        return field

    def take_interned(self) -> bytes:
        """InternedData bytes for the names first used since the last call."""
        out, self.new = b"".join(self.new), []
        return out


@dataclass
class Slices:
    """Every slice of one rank (``X``, paired ``B``/``E``, paired async ``b``/``e``/``S``/``F``),
    sorted by (track, start, -end).

    ``track`` is the thread key (``RankTrace.thread_keys``) for a thread track and ``-(k + 1)`` for
    async track k (``async_keys[k]`` = (pid code, cat code, id)). ``begin`` is the event
    that names the slice, ``close`` the event that ended it (-1 for ``X``).
    """

    track: np.ndarray
    start: np.ndarray
    end: np.ndarray
    begin: np.ndarray
    close: np.ndarray
    async_keys: List[Tuple[int, int, Union[int, str]]]
    async_names: List[int]     # name code of each async track's first event

    def ranges(self) -> Dict[int, Tuple[int, int]]:
        """{track: (first row, end row)} of the sorted slices."""
        return {int(self.track[a]): (a, b) for a, b in thread_runs(self.track)}


def _pair_begin_end(trace: RankTrace, mask: np.ndarray, key_of: Callable[[int], Optional[Hashable]],
                    counts: ProtoCounts, what: str) -> Tuple[List[int], List[int], List[Any]]:
    """(begin indices, end indices, keys) of the begin/end events under ``mask`` paired per
    key in time order: an end closes the innermost open begin of its name (any name when
    it has none), as Perfetto's JSON importer does. Unpaired events are counted as dropped."""
    idx = np.flatnonzero(mask)
    idx = idx[np.lexsort((idx, trace.ts[idx]))]
    opening = {ord("B"), ord("b"), ord("S")}
    names = trace.names
    stacks: Dict[Any, List[int]] = {}
    begins: List[int] = []
    ends: List[int] = []
    keys: List[Any] = []
    unmatched_end = 0
    for i in idx.tolist():
        key = key_of(i)
        if key is None:
            continue
        stack = stacks.setdefault(key, [])
        if int(trace.ph[i]) in opening:
            stack.append(i)
            continue
        name = names[trace.name[i]]
        k = len(stack) - 1
        while k >= 0 and name is not None and names[trace.name[stack[k]]] != name:
            k -= 1
        if k < 0:
            unmatched_end += 1
            continue
        begins.append(stack.pop(k))
        ends.append(i)
        keys.append(key)
    if unmatched_end:
        counts.drop(f"{what} end without a begin", unmatched_end)
    open_begins = sum(map(len, stacks.values()))
    if open_begins:
        counts.drop(f"{what} begin without an end", open_begins)
    return begins, ends, keys


def _async_id(extra: Optional[Dict[str, Any]]) -> Union[int, str, None]:
    """The id of an async event (``id``, else ``id2.global`` / ``id2.local``), or None."""
    extra = extra or {}
    value = event_id(extra.get("id"), extra.get("id2"))
    return value if value is None or isinstance(value, (int, str)) else orjson.dumps(value).decode()


def collect_slices(trace: RankTrace, start: np.ndarray, dur: np.ndarray,
                   counts: ProtoCounts) -> Tuple[Slices, List[Tuple[int, int]]]:
    """(Slices, async instants [(event index, async track)]) of one rank; unpaired begin/end
    events and async events without an id are counted as dropped."""
    ph = trace.ph
    thread = trace.thread_keys()

    is_be = np.isin(ph, [ord("B"), ord("E")])
    be_begin, be_end, _ = _pair_begin_end(trace, is_be, lambda i: int(thread[i]), counts, "B/E")

    async_codes: Dict[Tuple[int, int, Union[int, str]], int] = {}
    async_keys: List[Tuple[int, int, Union[int, str]]] = []
    async_names: List[int] = []
    no_id = 0

    def async_track(i: int) -> Optional[int]:
        nonlocal no_id
        value = _async_id(trace.extra[i])
        if value is None:
            no_id += 1
            return None
        key = (int(trace.pid[i]), int(trace.cat[i]), value)
        code = async_codes.get(key)
        if code is None:
            code = async_codes[key] = -(len(async_keys) + 1)
            async_keys.append(key)
            async_names.append(int(trace.name[i]))
        return code

    is_async = np.isin(ph, [ord(c) for c in "beSF"])
    as_begin, as_end, as_track = _pair_begin_end(trace, is_async, async_track, counts, "async")
    instants: List[Tuple[int, int]] = []
    for i in np.flatnonzero(ph == ord("n")).tolist():
        code = async_track(i)
        if code is not None:
            instants.append((i, code))
    if no_id:
        counts.drop("async event without an id", no_id)

    xs = np.flatnonzero(ph == ord("X"))
    begin = np.concatenate((xs, np.array(be_begin + as_begin, dtype=np.int64))).astype(np.int64)
    close = np.concatenate((np.full(len(xs), -1), np.array(be_end + as_end, dtype=np.int64))).astype(np.int64)
    track = np.concatenate((thread[begin[:len(xs) + len(be_begin)]], np.array(as_track, dtype=np.int64)))
    s = start[begin]
    e = np.where(close >= 0, start[np.maximum(close, 0)], s + np.maximum(dur[begin], 0))
    order = nest_order(track, s, e)
    slices = Slices(track[order], s[order], e[order], begin[order], close[order], async_keys, async_names)
    counts.slices = len(begin)
    counts.out += len(xs) + 2 * (len(be_begin) + len(as_begin)) + len(instants)
    counts.instants += len(instants)
    return slices, instants


def encode_rank(trace: RankTrace, place: Placement, flows: Optional[Dict[int, SliceFlows]] = None,
                reference: bool = False) -> Tuple[bytes, ProtoCounts]:
    """(bytes, ProtoCounts) of one rank: a self-contained run of packets of its sequence.

    ``flows`` maps an event index to its :class:`~tracemerge.place.arrows.SliceFlows` for
    the RPC arrows; input flow events are bound
    here (:func:`~tracemerge.formats.perfetto.flows.bind_input_flows`).

    The per-event loops run in the compiled writer (``native.proto()``) where it is active;
    ``reference``: in Python, the debug annotations too, whatever the core (the
    differential check compares the two).
    """
    counts = ProtoCounts()
    seq = _uint(10, place.rank + 1)
    start, dur = aligned_ns(trace, place.clock, place.out_base_ns)
    packets: List[bytes] = []
    tracks = _Tracks(trace, place, seq, packets)
    is_instant, is_counter = _phases(trace.ph, counts)
    slices, async_instants = collect_slices(trace, start, dur, counts)
    ranges = slices.ranges()
    proto = None if reference else native.proto()
    if proto is not None and len(trace) and int(trace.name.min()) < 0:
        proto = None    # a nameless event: the Python path's name field of code -1 is its own quirk
    bodies = _bodies(trace, place.rank, start, slices, ranges, flows, proto, reference, counts)
    track_uuid = functools.partial(_track_uuid, tracks, slices, trace.names, trace.thread_stride)
    for track, (lo, hi) in ranges.items():
        _lanes(bodies, proto, slices, lo, hi, functools.partial(track_uuid, track), counts)
    counts.overlap_tracks = tracks.overlap_tracks

    for i in np.flatnonzero(is_instant).tolist():
        scope = (trace.extra[i] or {}).get("s", "t")
        pid_code, tid_code = int(trace.pid[i]), int(trace.tid[i])
        uuid = tracks.process(pid_code) if scope in ("p", "g") else tracks.thread(pid_code, tid_code, 0)
        bodies.instant(int(start[i]), uuid, i)
        counts.instants += 1
    for i, track in async_instants:
        bodies.instant(int(start[i]), track_uuid(track, 0), i)
    for i in np.flatnonzero(is_counter).tolist():
        _counter(trace, i, int(start[i]), tracks, bodies, counts)

    base = place.out_base_ns + time_shift(place.out_base_ns)  # >= 0: Perfetto's times are unsigned
    body = bodies.packets(base, seq + _uint(13, SEQ_NEEDS_INCREMENTAL_STATE))
    # Argument names were interned while encoding; all of them go in the first packet.
    head = _packet(seq + _uint(13, SEQ_INCREMENTAL_STATE_CLEARED)
                   + _bytes(12, _interned(trace, slices, async_instants, is_instant) + bodies.anns.take_interned()))
    counts.out += counts.instants - len(async_instants) + counts.counters + counts.metadata
    return b"".join([head] + packets + body), counts


def _phases(ph: np.ndarray, counts: "ProtoCounts") -> Tuple[np.ndarray, np.ndarray]:
    """(instants, counters) of the phases ``ph``; metadata counted, phases with no
    TrackEvent form dropped (counted by phase)."""
    is_meta = ph == ord("M")
    counts.metadata = int(is_meta.sum())
    is_instant = np.isin(ph, [ord("i"), ord("I"), ord("R")])
    is_counter = ph == ord("C")
    handled = is_meta | is_instant | is_counter | np.isin(ph, [ord(c) for c in "XBEbenSFstf"])
    for code in distinct(ph[~handled]).tolist():
        counts.drop(f"phase '{chr(code)}' has no TrackEvent form", int((ph == code).sum()))
    return is_instant, is_counter


def _bodies(trace: RankTrace, rank: int, start: np.ndarray, slices: Slices, ranges: Dict[int, Tuple[int, int]],
            flows: Optional[Dict[int, SliceFlows]], proto: Any, reference: bool,
            counts: "ProtoCounts") -> "Union[_Bodies, _ColumnBodies]":
    """The rank's bodies, the Python path's (``proto`` None) or the compiled writer's, with
    the RPC arrows ``flows`` and the input flows bound to their slices (counted)."""
    if proto is None:
        bound, flow_counts = bind_input_flows(trace, rank, start, slices, ranges)
    else:
        rows, flow_counts = bind_input_flow_rows(trace, rank, start, slices, ranges, proto.chains)
    counts.flows = flow_counts.pop("converted")
    counts.out += counts.flows
    for reason, n in flow_counts.items():
        counts.drop(reason, n)
    if proto is None:
        return _Bodies(trace, rank, merge_flows(flows or {}, bound), reference)
    return _ColumnBodies(trace, rank, FlowRows.of(flows or {}) + rows, proto)


def _track_uuid(tracks: "_Tracks", slices: Slices, names: List[Any], n_tids: int, track: int, lane: int) -> int:
    """The uuid of lane ``lane`` of ``track``: a thread's (track >= 0) or an async track's."""
    if track >= 0:
        return tracks.thread(track // n_tids, track % n_tids, lane)
    k = -track - 1
    return tracks.async_(k, slices.async_keys[k][0], names[slices.async_names[k]], lane)


def _lanes(bodies: "Union[_Bodies, _ColumnBodies]", proto: Any, slices: Slices, lo: int, hi: int,
           lane_uuid: Callable[[int], int], counts: "ProtoCounts") -> None:
    """The slices ``lo:hi`` of one track (sorted by (start, -end)), split into nested lanes,
    each lane's slices added to ``bodies`` on its track (``lane_uuid(lane)``)."""
    if proto is None:
        gs, ge = slices.start[lo:hi].tolist(), slices.end[lo:hi].tolist()
        lanes = np.array(nest(gs, ge))
    else:
        gs, ge = _int64(slices.start[lo:hi]), _int64(slices.end[lo:hi])
        lanes = np.frombuffer(proto.nest(gs, ge), np.int64)
    # each lane's slices, in their order: grouped by one sort (a mask per lane was
    # quadratic in the lanes: 100k crossing spans make 100k lanes)
    by_lane = np.argsort(lanes, kind="stable")
    cuts = np.flatnonzero(np.diff(lanes[by_lane])) + 1
    for sel in np.split(by_lane, cuts) if len(by_lane) else []:
        lane = int(lanes[sel[0]])
        if lane:
            counts.overlapping += len(sel)
        uuid = lane_uuid(lane)
        begin, close = slices.begin[lo:hi][sel], slices.close[lo:hi][sel]
        if proto is None:
            cast(_Bodies, bodies).lane(
                uuid, slice_order([gs[k] for k in sel.tolist()], [ge[k] for k in sel.tolist()]),
                begin.tolist(), close.tolist())
        else:
            cast(_ColumnBodies, bodies).lane(
                uuid, proto.slice_order(_int64(gs[sel]), _int64(ge[sel])), begin, close)


def _counter(trace: RankTrace, i: int, ts: int, tracks: "_Tracks", bodies: "Union[_Bodies, _ColumnBodies]",
             counts: "ProtoCounts") -> None:
    """Counter event ``i``: one value on its counter track per numeric arg (none: dropped)."""
    values = trace.args[i] if isinstance(trace.args[i], dict) else {}
    numeric = {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not numeric:
        counts.drop("counter without numeric values")
        return
    for key, v in numeric.items():
        uuid = tracks.counter(int(trace.pid[i]), trace.names[trace.name[i]], key)
        value = _int(30, v) if isinstance(v, int) and -INT64_MAX <= v <= INT64_MAX else _double(44, float(v))
        bodies.counter(ts, uuid, value)
    counts.counters += 1


def _interned(trace: RankTrace, slices: Slices, async_instants: List[Tuple[int, int]], is_instant: np.ndarray) -> bytes:
    """The interned names and categories of the events drawn, for the first packet (the
    sequence starts from a clean state)."""
    named = np.zeros(len(trace), dtype=bool)
    named[slices.begin] = True
    named[[i for i, _ in async_instants]] = True
    named |= is_instant
    used_names = distinct(trace.name[named]).tolist()
    used_cats = distinct(trace.cat[named & (trace.cat >= 0)]).tolist()
    names = trace.names
    interned = b"".join(_bytes(2, _uint(1, c + 1) + _str(2, names[c])) for c in used_names)
    return interned + b"".join(_bytes(1, _uint(1, c + 1) + _str(2, names[c])) for c in used_cats)


FLOW_IDS, TERMINATING_FLOW_IDS = _tag(47, 1), _tag(48, 1)


class _Bodies:
    """The TrackEvent bodies of one rank with their timestamps, then framed as packets.

    A slice's BEGIN (and an instant) carries its name, category, args and outgoing flows;
    its END the args of the event that closed the slice (``close``, an ``E``/``e``), which
    Perfetto merges into the slice's args. Each body is kept as its head (type, track,
    name, category), the event whose args it carries and its flows; the args are decoded a
    chunk at a time when the packets are made, so a rank's decoded args never coexist.
    """

    def __init__(self, trace: RankTrace, rank: int, flows: Dict[int, SliceFlows], reference: bool = False) -> None:
        self.args, self.rank, self.flows, self.reference = trace.args, rank, flows, reference
        self.name_code, self.cat_code = trace.name.tolist(), trace.cat.tolist()
        n = len(trace.names)
        self.name_field = [_uint(10, c + 1) for c in range(n)]
        self.cat_field = [_uint(3, c + 1) for c in range(n)] + [b""]    # [-1]: no category
        self.anns = _Annotations()
        self.ts: List[int] = []
        self.heads: List[bytes] = []
        self.args_event: List[int] = []
        self.tails: List[bytes] = []

    def add(self, ts: int, head: bytes, args_event: int = -1, tail: bytes = b"") -> None:
        self.ts.append(ts)
        self.heads.append(head)
        self.args_event.append(args_event)
        self.tails.append(tail)

    def counter(self, ts: int, uuid: int, value: bytes) -> None:
        """A counter's body: its type and track, then ``value`` (its counter_value field)."""
        self.add(ts, _uint(9, COUNTER) + _uint(11, uuid) + value)

    def lane(self, uuid: int, records: List[Tuple[int, int, int]], begin: Sequence[int], close: Sequence[int]) -> None:
        """A lane's slices: ``records`` (ts, SLICE_BEGIN/SLICE_END, n) of its slices n, whose
        named events are ``begin[n]`` and closing events ``close[n]`` (-1 for ``X``)."""
        begin_head, end_head = _uint(9, SLICE_BEGIN) + _uint(11, uuid), _uint(9, SLICE_END) + _uint(11, uuid)
        name, cat, name_field, cat_field = self.name_code, self.cat_code, self.name_field, self.cat_field
        flows, no_flow = self.flows, NO_FLOWS
        ts_out, heads, args_event, tails = self.ts, self.heads, self.args_event, self.tails
        for ts, kind, n in records:
            i = begin[n]
            flow = flows.get(i, no_flow)
            if kind == SLICE_BEGIN:
                heads.append(begin_head + name_field[name[i]] + cat_field[cat[i]])
                args_event.append(i)
                tails.append(_flows(flow.begin, flow.begin_terminating) if flow is not no_flow else b"")
            else:
                heads.append(end_head)
                args_event.append(close[n])
                tails.append(_flows(flow.end, flow.end_terminating) if flow is not no_flow else b"")
            ts_out.append(ts)

    def instant(self, ts: int, uuid: int, i: int) -> None:
        flow = self.flows.get(i)
        self.add(ts, _uint(9, INSTANT) + _uint(11, uuid) + self.name_field[self.name_code[i]]
                 + self.cat_field[self.cat_code[i]], i, _flows(flow.begin, flow.begin_terminating) if flow else b"")

    def _bodies(self) -> List[bytes]:
        """Every body, in the order added: head, encoded args, flows."""
        with_args = [k for k, i in enumerate(self.args_event) if i >= 0]
        events = [self.args_event[k] for k in with_args]
        encode = self.anns.encode_python if self.reference else self.anns.encode_events
        encoded = encode(self.args, events, self.rank)
        args = [b""] * len(self.heads)
        for k, data in zip(with_args, encoded):
            args[k] = data
        return list(map(b"".join, zip(self.heads, args, self.tails)))

    def packets(self, base_ns: int, flags: bytes) -> List[bytes]:
        """The bodies as TracePackets (``timestamp`` = base_ns + ts, ``flags``, ``track_event``)
        in time order, ties in the order added; every packet's framing is built at once."""
        ts = np.array(self.ts, dtype=np.int64)
        order = np.argsort(ts, kind="stable")
        ts = ts[order] + base_ns
        made = self._bodies()
        self.heads = self.args_event = self.tails = None  # type: ignore[assignment]  # freed: packets are made once
        bodies = list(map(made.__getitem__, order.tolist()))
        del made
        size = np.fromiter(map(len, bodies), np.int64, len(bodies))
        # TracePacket: 0x0a len | timestamp 0x40 varint | flags | track_event 0x5a len | body
        ts_bytes, ts_len = _varints(ts)
        size_bytes, size_len = _varints(size)
        packet_bytes, packet_len = _varints(1 + ts_len + len(flags) + 1 + size_len + size)
        n = len(bodies)

        def const(data: bytes) -> Tuple[np.ndarray, np.ndarray]:
            return np.tile(np.frombuffer(data, np.uint8), (n, 1)), np.ones((n, len(data)), bool)

        parts = [const(b"\x0a"), packet_bytes, const(b"\x40"), ts_bytes, const(flags + b"\x5a"), size_bytes]
        framing = np.concatenate([p[0] for p in parts], axis=1)[np.concatenate([p[1] for p in parts], axis=1)]
        framing = framing.tobytes()
        ends = np.cumsum(1 + packet_len + 1 + ts_len + len(flags) + 1 + size_len).tolist()
        out = [b""] * (2 * n)
        out[0::2] = [framing[a:b] for a, b in zip([0] + ends[:-1], ends)]
        out[1::2] = bodies
        return out


class _ColumnBodies:
    """:class:`_Bodies` as numpy columns, framed by the compiled packet writer (``_proto``).

    The same bodies in the same order added, so the same bytes: the lanes' records come
    from ``_proto.slice_order`` and become whole columns (type, track, name and category
    codes, the event whose args the body carries, its flows) instead of one head per
    record; the args are encoded in the order added (argument names intern in first-use
    order); ``_proto.packets`` writes the sorted bodies and their framing into one bytes.
    The flows come as :class:`~tracemerge.formats.perfetto.flows.FlowRows`, sorted by
    (event, field) once; a body's flows are the rows of its event's begin (or end) fields.
    Only instants and counters are made one by one here.
    """

    def __init__(self, trace: RankTrace, rank: int, flows: FlowRows, proto: native.PacketWriter) -> None:
        self.args, self.rank, self.proto = trace.args, rank, proto
        self.name_code, self.cat_code = _int64(trace.name), _int64(trace.cat)
        key = flows.event * 4 + flows.slot
        order = np.argsort(key, kind="stable")   # per field, the ids in the order bound
        self.flow_key, self.flow_id, self.flow_slot = key[order], flows.fid[order], flows.slot[order]
        self.anns = _Annotations()
        self.columns: List[Tuple[np.ndarray, ...]] = []        # (ts, kind, uuid, name, cat, args event, tail slot, flow event, half) per lane
        self.one: List[Tuple[int, ...]] = []            # the same, one row per instant or counter, in the order added
        self.pending: List[Tuple[int, Sequence[bytes], np.ndarray, np.ndarray]] = []   # lanes not yet columns
        self.tails: List[bytes] = []          # counter values, by tail slot

    def _tail(self, data: bytes) -> int:
        if not data:
            return -1
        self.tails.append(data)
        return len(self.tails) - 1

    def _flush_one(self) -> None:
        self._flush_lanes()  # added before any row of ``one`` (a lane flushes those first)
        if self.one:
            self.columns.append(tuple(np.array(c, np.int64) for c in zip(*self.one)))
            self.one = []

    def counter(self, ts: int, uuid: int, value: bytes) -> None:
        """:meth:`_Bodies.counter`."""
        self.one.append((ts, COUNTER, uuid, -1, -1, -1, self._tail(value), -1, 0))

    def lane(self, uuid: int, records: Sequence[bytes], begin: np.ndarray, close: np.ndarray) -> None:
        """A lane's slices: ``records`` (ts, kind, n) as ``_proto.slice_order`` gives them, the
        slices' named events ``begin`` and closing events ``close`` (-1 for ``X``). Kept
        as they come and made columns for many lanes at once (:meth:`_flush_lanes`): a
        thread of 100k crossing spans has 100k lanes, and numpy's cost per call was most
        of its time."""
        if self.one:
            self._flush_one()
        self.pending.append((uuid, records, begin, close))

    def _flush_lanes(self) -> None:
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        ts, kind, n = (np.frombuffer(b"".join(p[1][j] for p in pending), np.int64) for j in range(3))
        rows = np.fromiter((len(p[1][0]) // 8 for p in pending), np.int64, len(pending))
        sizes = np.fromiter((len(p[2]) for p in pending), np.int64, len(pending))
        # a record's slice n is of its own lane: offset into the lanes' slices laid end to end
        n = n + np.repeat(np.cumsum(sizes) - sizes, rows)
        begin = np.concatenate([_int64(p[2]) for p in pending]) if len(pending) > 1 else _int64(pending[0][2])
        close = np.concatenate([_int64(p[3]) for p in pending]) if len(pending) > 1 else _int64(pending[0][3])
        uuid = np.repeat(np.array([p[0] for p in pending], np.uint64).view(np.int64), rows)
        is_begin = kind == SLICE_BEGIN
        named = begin[n]
        event = np.where(is_begin, named, close[n])
        name = np.where(is_begin, self.name_code[named], -1)
        cat = np.where(is_begin, self.cat_code[named], -1)
        none = np.full(len(ts), -1, np.int64)
        self.columns.append((ts, kind, uuid, name, cat, event, none, named, np.where(is_begin, 0, 2)))

    def instant(self, ts: int, uuid: int, i: int) -> None:
        self.one.append((ts, INSTANT, uuid, int(self.name_code[i]), int(self.cat_code[i]), i, -1, i, 0))

    def packets(self, base_ns: int, flags: bytes) -> List[bytes]:
        """:meth:`_Bodies.packets`: the framed packets in time order, ties in the order added."""
        self._flush_one()
        if not self.columns:
            self.columns = [tuple(np.zeros(0, np.int64) for _ in range(9))]
        ts, kind, uuid, name, cat, event, tail, flow_event, half = map(np.concatenate, zip(*self.columns))
        self.columns = []
        # a body's flows: the rows keyed (event, 0..1) for a begin or instant, (event, 2..3) for an end
        flow_lo = np.searchsorted(self.flow_key, flow_event * 4 + half, "left")
        flow_hi = np.where(flow_event >= 0, np.searchsorted(self.flow_key, flow_event * 4 + half + 2, "left"), flow_lo)
        with_args = np.flatnonzero(event >= 0)
        encoded = self.anns.encode_events(self.args, event[with_args].tolist(), self.rank)
        args_slot = np.full(len(ts), -1, np.int64)
        args_slot[with_args] = np.arange(len(with_args))
        order = np.argsort(ts, kind="stable")
        ts = ts[order] + base_ns
        if len(ts) and ts.min() < 0:
            raise ValueError(f"varint of a negative number {ts.min()}")
        return [self.proto.packets(ts, kind[order], uuid[order], name[order], cat[order], args_slot[order],
                                   tail[order], flow_lo[order], flow_hi[order], _int64(self.flow_id.view(np.int64)),
                                   _int64(self.flow_slot), encoded, self.tails, flags)]


def _int64(values: Any) -> np.ndarray:
    """A contiguous int64 copy or view of ``values``, as the compiled writer takes them."""
    return np.ascontiguousarray(values, np.int64)


def _varints(values: np.ndarray) -> Tuple[Tuple[np.ndarray, np.ndarray], np.ndarray]:
    """((bytes, valid), lengths) of the varints of non-negative int64 ``values``: ``bytes`` is
    (n, width) uint8 with each varint at the start of its row, ``valid`` marks its bytes."""
    if len(values) and values.min() < 0:
        raise ValueError(f"varint of a negative number {values.min()}")
    v = values.astype(np.uint64)
    lengths = np.ones(len(v), np.int64)
    for k in range(1, 10):
        lengths += v >= np.uint64(1 << 7 * k)
    width = int(lengths.max(initial=1))
    columns = np.arange(width)
    out = np.empty((len(v), width), np.uint8)
    for k in range(width):
        out[:, k] = (v >> np.uint64(7 * k)) & np.uint64(0x7F)
    out[columns < lengths[:, None] - 1] |= 0x80
    return (out, columns < lengths[:, None]), lengths


def _flows(out: Sequence[int], terminating: Sequence[int]) -> bytes:
    """TrackEvent.flow_ids and terminating_flow_ids fields (fixed64)."""
    return b"".join([FLOW_IDS + struct.pack("<Q", f) for f in out]
                    + [TERMINATING_FLOW_IDS + struct.pack("<Q", f) for f in terminating])


class _Tracks:
    """Track descriptors of one rank, emitted on first use; uuids are ``pid << 32 | n``."""

    def __init__(self, trace: RankTrace, place: Placement, seq: bytes, packets: List[bytes]) -> None:
        self.trace, self.place, self.seq, self.packets = trace, place, seq, packets
        self.uuids: Dict[Tuple[Any, ...], int] = {}
        self.thread_names = trace.metadata("thread_name")
        self.overlap_tracks = 0
        self.used_tids: Dict[int, Set[int]] = {}

    def _emit(self, key: Tuple[Any, ...], descriptor_of: Callable[[int], bytes]) -> int:
        uuid = self.uuids.get(key)
        if uuid is None:
            pid = self.place.pid_base + key[1]
            uuid = self.uuids[key] = pid << 32 | len(self.uuids)
            self.packets.append(_packet(self.seq + _bytes(60, _uint(1, uuid) + descriptor_of(pid))))
        return uuid

    def process(self, pid_code: int) -> int:
        return self._emit(("process", pid_code),
                          lambda pid: _bytes(3, _int(1, pid) + _str(6, self.place.label)))

    def thread(self, pid_code: int, tid_code: int, lane: int) -> int:
        parent = self.process(pid_code)
        name = self._thread_name(pid_code, tid_code)
        if lane:
            self.overlap_tracks += ("thread", pid_code, tid_code, lane) not in self.uuids
            label = name if name is not None else f"thread {self.trace.tids[tid_code]}"
            return self._emit(("thread", pid_code, tid_code, lane),
                              lambda pid: _uint(5, parent) + _str(2, f"{label} (overlap {lane})"))
        known = self.uuids.get(("thread", pid_code, tid_code, 0))
        if known is not None:  # a tid is taken once per thread: asking again must not take another
            return known
        tid = self._tid(pid_code, tid_code)
        thread = _int(1, self.place.pid_base + pid_code) + _int(2, tid)
        if name is not None:
            thread += _str(5, name)
        return self._emit(("thread", pid_code, tid_code, 0), lambda pid: _uint(5, parent) + _bytes(4, thread))

    def async_(self, k: int, pid_code: int, name: Any, lane: int) -> int:
        """Async track k (one per (pid, cat, id), named after its first event) under the process."""
        parent = self.process(pid_code)
        if lane:
            self.overlap_tracks += ("async", pid_code, k, lane) not in self.uuids
        label = name if not lane else f"{name} (overlap {lane})"
        return self._emit(("async", pid_code, k, lane), lambda pid: _uint(5, parent) + _str(2, str(label)))

    def counter(self, pid_code: int, name: Any, key: str) -> int:
        parent = self.process(pid_code)
        return self._emit(("counter", pid_code, name, key),
                          lambda pid: _uint(5, parent) + _str(2, f"{name} {key}") + _bytes(8, b""))

    def _thread_name(self, pid_code: int, tid_code: int) -> Optional[str]:
        """The thread_name metadata, else a string tid itself (as Perfetto's JSON import names it)."""
        name = self.thread_names.get((pid_code, tid_code))
        if name is not None:
            return str(name)
        original = self.trace.tids[tid_code]
        return original if isinstance(original, str) else None

    def _tid(self, pid_code: int, tid_code: int) -> int:
        """A 32-bit tid, unique within the process: the input tid when it is one."""
        taken = self.used_tids.setdefault(pid_code, set())
        original = self.trace.tids[tid_code]
        tid = original if isinstance(original, int) and 0 < original <= INT32_MAX else SYNTHETIC_TID + tid_code
        while tid in taken:
            tid += 1
        taken.add(tid)
        return tid
