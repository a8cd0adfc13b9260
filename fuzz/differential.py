"""The differential check: the compiled core against the Python path on one input.

For any bytes, either the core declines (the Python path then reads the rank, so the
output is the Python path's by construction), or the core's trace has the same columns
as :func:`tracemerge.inputs.chrome.read_trace` and :func:`tracemerge.formats.chrome.native_body` writes the
same bytes as the transform and the JSON writer, the core's nesting walk the same lanes as
the reference's (``nesting.walk``), and the .pftrace encoder's compiled writer the same
packets as its Python loops. Used by the tests, the fuzz target and
``.ci/run``.
"""

import os
import tempfile

import msgspec
import numpy as np

from tracemerge import native
from tracemerge.algorithms.nesting import lanes
from tracemerge.clocks.clock import ClockModel
from tracemerge.errors import TracemergeError
from tracemerge.formats import chrome
from tracemerge.formats.chrome import native_body
from tracemerge.formats.perfetto.encoder import _Annotations, encode_rank
from tracemerge.inputs.chrome import read_trace
from tracemerge.model import ARG_ID_KEYS, NO_TS
from tracemerge.place.placement import Placement, aligned_ns, transform_chunks

SCALAR_FIELDS = ("meta", "tracemerge", "base_ns", "names", "pids", "tids", "warnings", "truncated")
ARRAY_FIELDS = ("ph", "name", "cat", "pid", "tid", "ts", "dur")


class Mismatch(AssertionError):
    """The core and the Python path disagree."""


def _typed(value):
    """A value with the types of its items spelled out (1 and 1.0 and True compare equal)."""
    if isinstance(value, list):
        return [(type(v).__name__, _typed(v)) for v in value]
    if isinstance(value, dict):
        return {k: (type(v).__name__, _typed(v)) for k, v in value.items()}
    return value


def _decoded_or_error(args, i):
    """``args[i]``, or the error decoding it raises (a number beyond a double, say: the raw
    args are the same bytes for both paths, so they must fail alike)."""
    try:
        return args[i]
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        return f"{type(e).__name__}: {e}"


def same_trace(k, p):
    """None when the core's trace ``k`` and the Python reader's ``p`` agree, else what differs."""
    for f in SCALAR_FIELDS:
        if _typed(getattr(k, f)) != _typed(getattr(p, f)):
            return f"{f}: {getattr(k, f)!r:.200} != {getattr(p, f)!r:.200}"
    for f in ARRAY_FIELDS:
        a, b = getattr(k, f), getattr(p, f)
        if a.dtype != b.dtype or not np.array_equal(a, b):
            return f"column {f}"
    ka = [None if a is None else bytes(a) for a in k.args.items]
    pa = [None if a is None else bytes(a) for a in p.args.items]
    if ka != pa:
        return "args"
    if [_decoded_or_error(k.args, i) for i in range(len(k))] != [_decoded_or_error(p.args, i) for i in range(len(p))]:
        return "decoded args"
    if _typed(k.extra.columns) != _typed(p.extra.columns):
        return "extra columns"
    return None


def placements(trace):
    """A few placements exercising the writer: ranks that namespace ids differently, an
    offset, drift (durations change), a far output origin (large ts)."""
    timed = trace.ts[trace.ts != NO_TS]
    first = int(timed.min()) if len(timed) else 0
    origin = first - first % 1_000_000_000
    return [
        Placement(rank=0, label="rank 0 · w · h", pid_base=1000,
                  clock=ClockModel(rank=0, method="none"), out_base_ns=origin),
        Placement(rank=5, label="rank 5 · \"w\" · h\\é", pid_base=6000,
                  clock=ClockModel(rank=5, method="x", offset_ns=-123_457, drift_ppm=37.5, anchor_ns=first),
                  out_base_ns=origin),
        Placement(rank=4_000_000, label="r", pid_base=2_000_000,
                  clock=ClockModel(rank=1, method="x", offset_ns=987_654_321), out_base_ns=origin - 10**18),
    ]


def _body_or_error(write, *args):
    """``write(*args)``, or the args decode error it raises, as a str (both paths decode
    the renamed processes' args from the same raw bytes, so they must fail alike)."""
    try:
        return write(*args)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        return f"{type(e).__name__}: {e}"


def _packets_or_error(*args):
    """``encode_rank(*args)``, or the error it raises as a str: an args decode error, or a
    timestamp before the output's origin (a varint of a negative number), which both
    encoders must refuse alike, with the same text."""
    try:
        return encode_rank(*args)
    except ValueError as e:  # msgspec's decode errors are ValueErrors too
        return f"{type(e).__name__}: {e}"


def python_body(trace, place, moved=None):
    """The Python path's body of ``trace``'s own events (transform, then the JSON writer);
    ``moved``: the spans that go to lanes ({event index: lane})."""
    chunks, _ = transform_chunks(trace, place, aligned_ns(trace, place.clock, place.out_base_ns), lanes=moved)
    return b",".join(chrome.encode_events(c) for c in chunks if c)


# keys whose token args_with searches for: the RPC spans', the id keys', keys Kineto writes
# in every event and out of args ("name"), and a token that crosses the args' edges (`"}`)
WITH_KEYS = ("rpc_id", "role", *ARG_ID_KEYS, "name", "ts", "a", "", '"}', "}")


def _values_or_error(args, idx, key):
    """``args.key_values(idx, key)`` as a list (absent and no object told apart), or the
    error it raises as a str."""
    try:
        return list(args.key_values(idx, key, missing="absent", no_object="no object"))
    except ValueError as e:  # msgspec's DecodeError and ValidationError
        return f"{type(e).__name__}: {e}"


def check_bytes(data, name="input.json"):
    """Run the differential check on one document's bytes; returns "declined: <why>",
    "python error", or "same"; raises Mismatch when the paths disagree."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        k = native.read(path, data)
        try:
            p = read_trace(path)
        except TracemergeError as e:
            if not isinstance(k, str):
                raise Mismatch(f"the core took an input the Python path refuses ({e})") from None
            return "python error"
        if isinstance(k, str):
            return f"declined: {k}"
        why = same_trace(k, p)
        if why:
            raise Mismatch(f"read: {why}")
        # the core's args array (Scan.args_array) against the Python reference (Args.joined),
        # events in reverse and repeated, as a selection may ask for them
        idx = list(range(len(p) - 1, -1, -1)) * 2
        if p.args.raw and k.args.joined(idx) != p.args.joined(idx):
            raise Mismatch("args.joined: the core's array of args differs from the Python reader's")
        # the core's search of each event's args for a key's token (Scan.args_with) against
        # the reference's search of their joined text (Args.with_key)
        for key in WITH_KEYS:
            if k.args.with_key(key) != p.args.with_key(key):
                raise Mismatch(f"args.with_key({key!r}): the core's events differ from the reference's")
        # the id keys' values the scan recorded (Scan.arg_ids) against the reference's decode of
        # the text (Args.key_values), value and type, or the error both must raise alike
        for key in ARG_ID_KEYS:
            got, want = (_values_or_error(a, idx, key) for a in (k.args, p.args))
            if got != want or [type(v) for v in got] != [type(v) for v in want]:
                raise Mismatch(f"args.key_values({key!r}): the core's {got!r:.200} != the reference's {want!r:.200}")
        for place in placements(p):
            start, dur = aligned_ns(k, place.clock, place.out_base_ns)
            moved = lanes(p, start, start + np.maximum(dur, 0))  # the reference's nesting walk (nesting.walk)
            # the core's walk (formats.chrome.rank_body's) moves the same spans to the same lanes
            by_core = lanes(k, start, start + np.maximum(dur, 0), walk=native.walk)
            if by_core != moved:
                raise Mismatch(f"rank {place.rank}: lanes by the core's walk {sorted(by_core.items())[:5]} != "
                               f"by the reference's {sorted(moved.items())[:5]}")
            body = _body_or_error(native_body, k, place, start, dur, moved)
            if body is None:
                continue  # out of the writer's reach: that rank is written by the Python path
            expected = _body_or_error(python_body, p, place, moved)
            if body.__class__ is str or expected.__class__ is str:  # args that cannot be decoded
                if body != expected:
                    raise Mismatch(f"rank {place.rank}: {body!r:.200} != {expected!r:.200}")
                continue
            if body != expected:
                at = next((i for i, (a, b) in enumerate(zip(body, expected)) if a != b), min(len(body), len(expected)))
                raise Mismatch(f"rank {place.rank}: bytes differ at {at}: {body[at - 60:at + 60]!r} != "
                               f"{expected[at - 60:at + 60]!r}")
        why = same_annotations(k, p) or same_pftrace(k, p)
        if why:
            raise Mismatch(why)
        return "same"


def same_pftrace(k, p):
    """None when the .pftrace packets of the core's trace by the compiled writer
    (``native._proto``, with the core's annotations) are the Python encoder's of the Python
    reader's trace, with the same counts, for each placement; else what differs."""
    for place in placements(p):
        got, want = _packets_or_error(k, place), _packets_or_error(p, place, None, True)
        if got.__class__ is str or want.__class__ is str:
            if got != want:
                return f".pftrace rank {place.rank}: {got!r:.200} != {want!r:.200}"
            continue
        if got[0] != want[0]:
            at = next((i for i, (a, b) in enumerate(zip(got[0], want[0])) if a != b), min(len(got[0]), len(want[0])))
            return f".pftrace rank {place.rank}: bytes differ at {at}: {got[0][at - 40:at + 40]!r} != " \
                   f"{want[0][at - 40:at + 40]!r}"
        if got[1] != want[1]:
            return f".pftrace rank {place.rank}: counts {got[1]} != {want[1]}"
    return None


def same_annotations(k, p, rank=5):
    """None when the compiled core's debug annotations of every event's args (the .pftrace
    encoder's) are the Python encoder's, with the same names interned, else what differs."""
    events = list(range(len(k)))
    compiled, python = _Annotations(), _Annotations()
    try:
        want = python.encode_python(p.args, events, rank)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        try:
            compiled.encode_events(k.args, events, rank)
        except type(e) as again:
            return None if str(again) == str(e) else f"annotations: the core's error {again} != {e}"
        return f"annotations: the core encoded args the Python path refuses ({e})"
    got = compiled.encode_events(k.args, events, rank)
    if got != want:
        at = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        return f"annotations of event {at}: {got[at]!r:.120} != {want[at]!r:.120}"
    if compiled.take_interned() != python.take_interned():
        return "annotations: the interned names differ"
    return None
