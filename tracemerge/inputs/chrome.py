"""The Chrome trace JSON reader: Kineto / Chrome trace JSON (object or bare array), gzip or
zstd, tracemerge rank files (the same JSON with a ``"tracemerge"`` block).

Every reader ends in :class:`~tracemerge.model.RankTrace` with timestamps as integer ns
on the file's own clock: ``baseTimeNanoseconds + ts*1000`` when the file has a base
(Kineto's Unix-epoch clock), ``ts*1000`` otherwise.
"""

import codecs
import json
import os
import re
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Optional, Union

import msgspec
import numpy as np
import orjson

from tracemerge.errors import TraceError, reading
from tracemerge.files.codecs import decompress
from tracemerge.inputs.base import InputFormat
from tracemerge.inputs.head import read_head
from tracemerge.inputs.rankinfo import NS_LIMIT, check_base, describe, describe_head
from tracemerge.inputs.salvage import NotCut, Unsalvageable, salvage
from tracemerge.model import COLUMN_KEYS, FLOW_ID_KEYS, NO_DUR, NO_TS, Args, Extra, RankTrace

if TYPE_CHECKING:
    from tracemerge.inputs.rankinfo import RankInfo

# a crash can leave the end of a file zero-filled; such padding is not part of the trace
PADDING = b"\0 \t\r\n"
_CONTENT = re.compile(rb"[^\0 \t\r\n]")
# a Perfetto trace's first byte: field 1 (TracePacket), length-delimited; JSON may start with
# the same byte (a newline), but then its first non-blank byte is { or [
PROTOBUF_TRACE = b"\x0a"
# how close to the end a JSON error must be for the file to count as cut off, not corrupt
END_SLACK = 64


def read_bytes(path: str) -> bytes:
    """The complete decompressed bytes of ``path``; a cut gzip or zstd stream is an error
    here (:func:`read_trace` salvages it)."""
    data, cut = read_data(path)
    if cut:
        raise TraceError(path, f"truncated {cut} (the compressed stream ends early)")
    return data


def read_file_bytes(path: str) -> tuple[bytes, str]:
    """(decompressed bytes, cut) of any file ``path``; ``cut`` names the codec ("gzip",
    "zstd") when its stream ends early, else it is "" (:func:`tracemerge.files.codecs.decompress`)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    return decompress(path, data)


def read_data(path: str) -> tuple[bytes, str]:
    """:func:`read_file_bytes` of a JSON trace, checked to hold text and to be no Perfetto protobuf."""
    return checked_data(path, *read_file_bytes(path))


def checked_data(path: str, data: bytes, cut: str) -> tuple[bytes, str]:
    """(data, cut) of :func:`read_data`, from the decompressed bytes ``data`` of ``path``
    (read by a caller that opened the file for more than its bytes: the compiled core's read)."""
    content = _CONTENT.search(data)  # data.strip() would copy the whole file when it ends in a newline
    if not content:
        raise TraceError(path, "empty file" if not cut else f"truncated {cut} with no data before the cut")
    if data[:1] == PROTOBUF_TRACE and data[content.start():content.start() + 1] not in b"{[":
        raise TraceError(path, "a Perfetto protobuf trace (.pftrace), not JSON: tracemerge reads JSON traces "
                               "(rank files, Kineto or Chrome JSON, a merged .json); merge the rank files to "
                               "-o x.json to report on the merged trace")
    check_text(path, data, cut)
    return data, cut


# a \uD800-\uDFFF escape: half of a UTF-16 pair, which UTF-8 output cannot hold alone
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_TEXT_CHUNK = 16 << 20


def check_text(path: str, data: bytes, cut: str = "") -> None:
    """JSON is UTF-8 and so are the outputs: bytes that are not UTF-8, and escapes of lone
    UTF-16 surrogates (valid JSON, but no UTF-8 can encode them), are errors naming the byte,
    found here before any output is made. ASCII files (most traces) cost one isascii() pass."""
    if not data.isascii():
        decoder = codecs.getincrementaldecoder("utf-8")()
        view = memoryview(data)
        for at in range(0, len(data), _TEXT_CHUNK):
            try:
                decoder.decode(view[at:at + _TEXT_CHUNK])  # an unfinished last character: a cut file
            except UnicodeDecodeError as e:
                raise TraceError(path, f"byte {at + e.start}: not valid UTF-8 ({e.reason}: "
                                       f"{bytes(view[at + e.start:at + e.start + 4])!r})") from None
    if b"\\u" not in data:
        return
    low_after = -1
    for m in _SURROGATE.finditer(data):
        start = m.start()
        slashes = len(data[max(0, start - 16):start]) - len(data[max(0, start - 16):start].rstrip(b"\\"))
        if slashes % 2 or start == low_after:
            continue  # an escaped backslash followed by "u", or the low half of a pair already seen
        high = m.group()[3:4].lower() in b"89ab"
        if high:
            follower = _SURROGATE.match(data, m.end())
            if follower and follower.group()[3:4].lower() in b"cdef":
                low_after = follower.start()
                continue
        raise TraceError(path, f"byte {start}: a lone surrogate escape {m.group().decode()} (half of a UTF-16 "
                               "pair, which UTF-8 output cannot hold)")


def parse_json(path: str, data: bytes, cut: Union[str, bool] = False) -> tuple[Any, Optional[str]]:
    """(document, warning or None): the parsed trace, salvaged when the data ends early.

    A document that does not end in ``}`` or ``]`` cannot be whole, so it goes straight
    to the salvage scan instead of through a parse that is bound to fail at its end.
    """
    end = _content_end(data)
    error = None
    if not cut and data[end - 1:end] in (b"}", b"]"):
        try:
            return _loads(data), None
        except orjson.JSONDecodeError as e:
            error = e
    body = data[:end]
    if cut or (error is None and body.lstrip()[:1] in (b"{", b"[")) or \
            (error is not None and error.pos >= len(body) - END_SLACK):
        try:
            return _salvaged(path, body, data, cut)
        except NotCut:
            pass
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        return _lenient(path, data, error or e), None
    return doc, f"ignored {len(data) - len(body)} trailing zero/blank bytes"


def _content_end(data: bytes) -> int:
    """Length of ``data`` without its trailing padding (a short walk: a few blocks at most)."""
    end = len(data)
    while end and data[end - 1] in PADDING:
        end -= 1
    return end


def _loads(data: bytes) -> Any:
    """msgspec builds the same objects as orjson without orjson's intermediate document
    tree (peak memory 290 MB instead of 440 MB for a 60 MB trace, same speed); on any
    error orjson parses again, for its error position and message."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):  # invalid UTF-8 in a string is the latter
        return orjson.loads(data)


def _lenient(path: str, data: bytes, error: Exception) -> Any:
    """The stdlib's reading of JSON orjson refused: it accepts NaN and Infinity, which the
    event checks then report with the event's index; anything else is not JSON."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise TraceError(path, f"not valid JSON: {error}") from None


def _salvaged(path: str, body: bytes, data: bytes, cut: Union[str, bool]) -> tuple[Any, str]:
    how = f"the {cut} stream ends early" if cut else "the JSON ends early"
    try:
        kept = salvage(body)
    except Unsalvageable as e:
        raise TraceError(path, f"not valid JSON: truncated ({how}); nothing to recover: {e}") from None
    try:
        doc = orjson.loads(kept.text)
    except orjson.JSONDecodeError as e:
        doc = _lenient(path, kept.text, e)
    return doc, (f"truncated file ({how}): recovered {kept.events} complete events from the first "
                 f"{kept.kept_bytes} of {len(data)} bytes; whatever followed is lost")


def split_document(path: str, doc: Any) -> tuple[list, dict[str, Any], Optional[dict[str, Any]]]:
    """(events, meta, tracemerge block) of a parsed trace document."""
    if isinstance(doc, list):
        return doc, {}, None
    if not isinstance(doc, dict):
        raise TraceError(path, f"expected a JSON object or array, found {type(doc).__name__}")
    if "traceEvents" not in doc:
        raise TraceError(path, "JSON object has no 'traceEvents' (not a Chrome/Kineto trace)")
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise TraceError(path, f"'traceEvents' is a {type(events).__name__}, not a list")
    block = doc.get("tracemerge")
    if block is not None and not isinstance(block, dict):
        raise TraceError(path, "'tracemerge' block is not an object")
    meta = {k: v for k, v in doc.items() if k not in ("traceEvents", "tracemerge")}
    return events, meta, block


def read_trace(path: Union[str, "os.PathLike[str]"]) -> RankTrace:
    """Read one trace file into a :class:`RankTrace` (the registry's ``read``: use
    :func:`tracemerge.inputs.read_trace`, which picks the reader)."""
    path = os.fspath(path)
    with reading(path):
        return _read_trace(path)


def read_columns(path: Union[str, "os.PathLike[str]"]) -> RankTrace:
    """:func:`read_trace` for readers of columns and args only (reports): the typed reader
    keeps no per-event structs and builds no extra keys, so a rank costs its columns and
    the raw args, not a Python object per event."""
    path = os.fspath(path)
    with reading(path):
        data, cut = read_data(path)
        trace = None if cut else read_typed(path, data, extra=False)
        del data
        return trace if trace is not None else _read_trace(path)


def _read_trace(path: str) -> RankTrace:
    data, cut = read_data(path)
    trace = None if cut else read_typed(path, data)
    if trace is not None:
        return trace
    doc, warning = parse_json(path, data, cut)
    del data  # the bytes are no longer needed while the columns are built
    events, meta, block = split_document(path, doc)
    trace = build(path, events, meta, block, truncated=warning is not None and warning.startswith("truncated"))
    if warning:
        trace.warnings.append(warning)
    return trace


def _intern(values: list, path: str, what: str) -> tuple[np.ndarray, list]:
    """Codes for ``values`` and the table of distinct values, in first-seen order."""
    try:
        table = dict.fromkeys(values)  # first-seen order; C loops only, no per-value bytecode
    except TypeError:
        bad = next(i for i, v in enumerate(values) if not _hashable(v))
        raise TraceError(path, f"'{what}' must be a string or number, got {values[bad]!r}", bad) from None
    code = {v: i for i, v in enumerate(table)}
    return np.fromiter(map(code.__getitem__, values), np.int32, len(values)), list(table)


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


TIME_LIMIT_NS = NS_LIMIT  # |base + ts| beyond this (year 2116) leaves no room for offsets in int64


NUMBER_TYPES = frozenset((int, float, type(None)))
MAX_US = 7e15  # µs (year 2191) whose ns still fit int64 after adding a Kineto base


def _numbers(values: list, path: str, what: str, required: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """float64 column of ``values`` and its mask of absent (None) values.

    Strings, booleans, NaN and infinities are errors naming the event; so is an absent
    value where ``required`` says one is needed.
    """
    if not set(map(type, values)) <= NUMBER_TYPES:
        bad = next(i for i, v in enumerate(values) if type(v) not in NUMBER_TYPES)
        raise TraceError(path, f"'{what}' is not a number: {values[bad]!r}", bad)
    try:
        col = np.array(values, dtype=np.float64)
    except OverflowError:
        bad = next(i for i, v in enumerate(values) if isinstance(v, int) and abs(v) > MAX_US)
        raise TraceError(path, f"'{what}' is out of range: {values[bad]!r}", bad) from None
    nan = np.isnan(col)
    absent = values.count(None)
    if absent != int(nan.sum()) or np.isinf(col).any():
        bad = next(i for i, v in enumerate(values) if v is not None and not np.isfinite(v))
        raise TraceError(path, f"'{what}' is not a finite number: {values[bad]!r}", bad)
    missing = nan
    if required is not None and absent:
        at = np.flatnonzero(missing & required)
        if len(at):
            raise TraceError(path, f"missing '{what}'", int(at[0]))
    return col, missing


def _column(events: list[dict], key: str, default: Any = None) -> list:
    """``[e.get(key, default) for e in events]`` without a bytecode loop (3-4× faster)."""
    return list(map(dict.get, events, repeat(key), repeat(default)))


def build(path: str, events: list, meta: dict[str, Any], block: Optional[dict[str, Any]],
          truncated: bool = False) -> RankTrace:
    """Columns from a list of event dicts, validated: a bad event is an error naming it."""
    if not set(map(type, events)) <= {dict}:
        i, e = next((i, e) for i, e in enumerate(events) if not isinstance(e, dict))
        raise TraceError(path, f"event is a {type(e).__name__}, not an object", i)
    columns = {k: _column(events, k, 0 if k in ("pid", "tid") else None) for k in COLUMN_KEYS}
    extra = [None if e.keys() <= COLUMN_KEYS else {k: v for k, v in e.items() if k not in COLUMN_KEYS}
             for e in events]
    return from_columns(path, columns, Args(columns["args"]), Extra(extra), meta, block, truncated)


def from_columns(path: str, col: dict[str, list], args: Args, extra: Extra, meta: dict[str, Any],
                 block: Optional[dict[str, Any]], truncated: bool = False,
                 events: Optional[list] = None) -> RankTrace:
    """The validated :class:`RankTrace` of per-event value lists ``col[key]`` (one per
    COLUMN_KEYS key; pid/tid 0 where absent, others None): both readers end here.
    ``events``: the typed reader's structs, kept for the transform."""
    n = len(col["ph"])
    ph_raw = col["ph"]
    try:
        ph = np.fromiter(map(ord, ph_raw), np.uint8, n)
    except (TypeError, ValueError, OverflowError):
        bad = next(i for i, p in enumerate(ph_raw) if not (isinstance(p, str) and len(p) == 1 and ord(p) < 256))
        problem = "missing 'ph'" if ph_raw[bad] is None else f"bad 'ph' {ph_raw[bad]!r}"
        raise TraceError(path, problem, bad) from None
    is_meta = ph == ord("M")
    needs_name = ~(is_meta | (ph == ord("E")))

    names_raw = col["name"]
    for i in np.flatnonzero(needs_name) if not set(map(type, names_raw)) <= {str} else ():
        if not isinstance(names_raw[i], str):
            break
    else:
        i = None
    if i is not None:
        problem = "missing 'name'" if names_raw[i] is None else f"'name' is not a string: {names_raw[i]!r}"
        raise TraceError(path, problem, int(i))
    cats = col["cat"]
    if not set(map(type, cats)) <= {str, type(None)}:
        at = next(i for i, c in enumerate(cats) if c is not None and not isinstance(c, str))
        raise TraceError(path, f"'cat' is not a string: {cats[at]!r}", at)
    name_codes, names = _intern(names_raw + cats, path, "name/cat")
    name, cat = name_codes[:n], name_codes[n:]
    if None in names:
        none_code = names.index(None)
        cat = np.where(cat == none_code, -1, cat).astype(np.int32)

    base = meta.get("baseTimeNanoseconds")
    if base is not None and not isinstance(base, int):
        raise TraceError(path, f"'baseTimeNanoseconds' is not an integer: {base!r}")
    check_base(path, base)
    ts, dur = times_ns(path, col["ts"], col["dur"], base, required=~is_meta)
    pid, pids = _intern(col["pid"], path, "pid")
    tid, tids = _intern(col["tid"], path, "tid")
    return RankTrace(path=path, meta=meta, tracemerge=block, base_ns=base, names=names, pids=pids,
                     tids=tids, ph=ph, name=name, cat=cat, pid=pid, tid=tid, ts=ts, dur=dur,
                     args=args, extra=extra, truncated=truncated, events=events)


def times_ns(path: str, ts_values: list, dur_values: list, base: Optional[int],
             required: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ts, dur) int64 ns columns of µs values: ts on the file's clock (``base`` + ts),
    NO_TS / NO_DUR where absent; a bad or missing-where-``required`` value is an error."""
    ts_f, ts_missing = _numbers(ts_values, path, "ts", required=required)
    dur_f, dur_missing = _numbers(dur_values, path, "dur", required=None)
    return float_times_ns(path, ts_f, ts_missing, dur_f, dur_missing, base)


def event_times_ns(path: str, events: list, base: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`times_ns` of a list of event dicts, as the reader makes a trace's ts/dur
    columns (only metadata events may lack a ts), without the rest of its columns."""
    is_meta = np.fromiter(map("M".__eq__, _column(events, "ph")), bool, len(events))
    return times_ns(path, _column(events, "ts"), _column(events, "dur"), base, required=~is_meta)


# ns of the file's clock that fit int64 (after a base is added) with room for the rounding
MAX_NS = float(2**63 - 2**12)


def float_times_ns(path: str, ts_f: np.ndarray, ts_missing: np.ndarray, dur_f: np.ndarray, dur_missing: np.ndarray,
                   base: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`times_ns` from float64 µs columns and their masks of absent values (the
    compiled core's scan gives these directly)."""
    negative = np.flatnonzero(~dur_missing & (dur_f < 0))
    if len(negative):
        i = int(negative[0])
        raise TraceError(path, f"negative 'dur' {dur_f[i]:g}", i)
    for what, col in (("ts", ts_f), ("dur", dur_f)):
        huge = np.flatnonzero(np.abs(col) > MAX_US)
        if len(huge):
            i = int(huge[0])
            raise TraceError(path, f"'{what}' {float(col[i]):g} µs is out of range (beyond year 2191)", i)
    if base is not None:
        # base + ts (+ dur) must stay well inside int64 ns, or event times wrap around
        ends = base + ts_f * 1000.0 + np.where(dur_missing, 0.0, dur_f * 1000.0)
        wraps = np.flatnonzero(~ts_missing & (np.abs(ends) >= TIME_LIMIT_NS))
        if len(wraps):
            i = int(wraps[0])
            raise TraceError(path, f"'ts' {ts_f[i]:g} µs is out of range: baseTimeNanoseconds {base} + ts (+ dur) "
                                   "is beyond year 2116 (2**62 ns)", i)
    ts = _exact_ns(np.where(ts_missing, 0.0, ts_f)) + (base or 0)
    ts[ts_missing] = NO_TS
    dur = np.where(dur_missing, NO_DUR, _exact_ns(np.where(dur_missing, 0.0, dur_f)))
    return ts, dur


def _exact_ns(us: np.ndarray) -> np.ndarray:
    """int64 ns of float64 µs, whole µs converted exactly.

    Older Kineto writes epoch µs (~1.7e15) with no base: ``us * 1000.0`` is then past
    2**53 and off by up to 128 ns, enough to turn a child that ends with its parent into
    one that ends after it (torch then nests it elsewhere and the parent's self time
    goes negative). The whole µs (exact in float64 below 2**53) and the fraction
    (exact as ``us - floor(us)``) are scaled apart.
    """
    whole = np.floor(us)
    split = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)
    # below 2**43 µs the product is within half a ns and stays as it always was (the same
    # output bytes: the two roundings may differ by 1 ns on sub-ns fractions)
    return np.where(np.abs(us) < EXACT_PRODUCT_US, np.rint(us * 1000.0).astype(np.int64), split)


# µs below which ``us * 1000.0`` is exact to within half a ns (2**53 ns / 1000)
EXACT_PRODUCT_US = float(2**43)


# ---- the typed reader ------------------------------------------------------------------
# A decode straight into one Struct per event, ``args`` kept as raw JSON (msgspec.Raw, a
# view of the input bytes): no dict is built for an event or its args (a 60 MB Kineto
# rank: 0.16 s instead of ~0.45 s to dicts plus their columns). It takes the common
# shape only — an object with a traceEvents list of events made of the Chrome keys below;
# anything else (an unknown key, a bare array, a cut file, bad JSON) is read by the
# generic reader above, so its errors, salvage and warnings stay the same.

EXTRA_KEYS = ("id", "id2", "bp", "s", "bind_id", "flow_in", "flow_out", "tts", "tdur", "cname", "scope",
              "sf", "stack", "esf", "estack")


# gc=False: decoded JSON holds no reference cycles, so the structs need no collector
# header (16 B each) nor tracking
class _Timing(msgspec.Struct, gc=False):
    """The keys :func:`rankinfo.describe` reads (other keys are skipped by the decoder)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None


class _Event(_Timing, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """A whole event: the timing keys, raw args, and the keys kept in ``extra``.

    The structs are also the merged trace's events: :func:`transform.transform_chunks`
    patches the values that change in place and the JSON writer encodes them as they are,
    so a key the output leaves out must encode as absent — None (absent or null alike in
    the output) or UNSET (absent, unlike null) — with the Chrome keys in Kineto's order.
    """

    # absent is tid 0, which the output writes (set by read_typed); typed so that the value the
    # output writes (the pid/tid table's, where 1, 1.0 and true are one) is the struct's own
    # msgspec reads these annotations to decode: the defaults (UNSET, None) are msgspec's own
    # markers of an absent key, outside the decoded types on purpose
    tid: Union[int, str, None] = msgspec.UNSET  # type: ignore[assignment]
    args: msgspec.Raw = None  # type: ignore[assignment]
    # absent (UNSET) and null (None) differ for the keys kept in ``extra``
    id: Any = msgspec.UNSET
    id2: Any = msgspec.UNSET
    bp: Any = msgspec.UNSET
    s: Any = msgspec.UNSET
    bind_id: Any = msgspec.UNSET
    flow_in: Any = msgspec.UNSET
    flow_out: Any = msgspec.UNSET
    tts: Any = msgspec.UNSET
    tdur: Any = msgspec.UNSET
    cname: Any = msgspec.UNSET
    scope: Any = msgspec.UNSET
    sf: Any = msgspec.UNSET
    stack: Any = msgspec.UNSET
    esf: Any = msgspec.UNSET
    estack: Any = msgspec.UNSET


class _Columns(_Timing, gc=False):
    """What a reader of columns and args needs (reports, describing a file): the timing
    keys and raw args; other keys are skipped, not kept (``extra`` is not built), so each
    struct is ~120 bytes smaller than an :class:`_Event`."""

    # msgspec reads these annotations to decode: the defaults (UNSET, None) are msgspec's own
    # markers of an absent key, outside the decoded types on purpose
    tid: Union[int, str, None] = msgspec.UNSET  # type: ignore[assignment]
    args: msgspec.Raw = None  # type: ignore[assignment]


# the extra keys the transform rewrites in the structs: read before it does, the others on first use

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[_Event])
_NULL = msgspec.Raw(b"null")
_COLUMNS = msgspec.json.Decoder(list[_Columns])


def read_typed(path: str, data: bytes, extra: bool = True, describing: bool = False) -> Optional[RankTrace]:
    """The RankTrace of ``data`` by the typed reader, or None when it does not take the file;
    with ``extra`` the trace keeps the event structs (``events``) for the transform, without
    it the EXTRA_KEYS are left out (``extra`` is all None). ``describing``: only for
    :func:`rankinfo.describe`, which reads the args of RPC spans (and, without a rank-file
    block listing them, of collectives), so the args are kept as raw JSON."""
    try:
        top = _TOP.decode(data)
        block = msgspec.json.decode(top.pop("tracemerge")) if "tracemerge" in top else None
        events = (_EVENTS if extra and not describing else _COLUMNS).decode(top.pop("traceEvents"))
        meta = {k: msgspec.json.decode(v) for k, v in top.items()}
    except (msgspec.DecodeError, UnicodeDecodeError, KeyError):
        return None
    if block is not None and not isinstance(block, dict):
        return None
    columns = {k: list(map(attrgetter(k), events)) for k in COLUMN_KEYS}
    _fill_absent(events, columns)
    n = len(events)
    if not extra:
        del events  # the columns hold the values: the structs go before the arrays are made
        return from_columns(path, columns, Args(columns["args"], raw=True), Extra(columns={}, n=n), meta, block)
    read = _extra(events, FLOW_ID_KEYS)
    return from_columns(path, columns, Args(columns["args"], raw=True),
                        Extra(columns=read, n=n, rest=partial(_extra, events, EXTRA_KEYS, read)), meta, block,
                        events=events)


def _fill_absent(events: list, columns: dict[str, list]) -> None:
    """The columns and structs as the generic reader and the output see them: ``"args":
    null`` is no args, an absent tid is 0, a null tid is none (left out of the output)."""
    args, tids = columns["args"], columns["tid"]
    if 4 in set(map(len, filter(None, args))):  # len(b"null"): a Raw compares far slower than its length
        for i in [i for i, a in enumerate(args) if a == _NULL]:
            args[i] = events[i].args = None
    values = set(tids)
    if msgspec.UNSET in values:
        for i in [i for i, t in enumerate(tids) if t is msgspec.UNSET]:
            tids[i] = events[i].tid = 0
    if None in values:
        for i in [i for i, t in enumerate(tids) if t is None]:
            events[i].tid = msgspec.UNSET


def _extra(events: list, keys: tuple[str, ...], read: Optional[dict[str, list]] = None) -> dict[str, list]:
    """The ``keys`` the file uses (of EXTRA_KEYS, in that order) as columns, UNSET where an
    event lacks the key: no dict per event, and a key absent from the whole file costs one C
    pass. ``read``: the FLOW_ID_KEYS columns read before, taken from there (the structs'
    values may have been rewritten since)."""
    columns: dict[str, list] = {}
    for key in keys:
        values = read.get(key) if read is not None and key in FLOW_ID_KEYS else list(map(attrgetter(key), events))
        if values is not None and values.count(msgspec.UNSET) != len(values):
            columns[key] = values
    return columns


def describe_file(path: str) -> "RankInfo":
    """The :class:`RankInfo` of ``path``: the typed reader without the keys describe() does
    not use (flow ids, scopes); a file it does not take goes through the full reader, which
    explains or salvages it."""
    data, cut = read_data(path)
    trace = None if cut else read_typed(path, data, extra=False, describing=True)
    del data
    return describe(trace if trace is not None else read_trace(path))


def describe_head_of(path: str) -> Optional["RankInfo"]:
    """The partial :class:`RankInfo` of a rank file from the keys before its events, or None."""
    found = read_head(path)
    return describe_head(path, found) if found is not None else None


# the fallback (no sniff): anything no other reader claims is read as trace JSON, whose
# errors say what is wrong with it
FORMAT = InputFormat("chrome", read_trace, describe_file, head=describe_head_of)

