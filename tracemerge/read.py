"""Readers: Kineto / Chrome trace JSON (object or bare array), gzip, tracemerge rank files.

Every reader ends in :class:`~tracemerge.model.RankTrace` with timestamps as integer ns
on the file's own clock: ``baseTimeNanoseconds + ts*1000`` when the file has a base
(Kineto's Unix-epoch clock), ``ts*1000`` otherwise.
"""

import gzip
import os
import zlib

import numpy as np
import orjson

from tracemerge.errors import TraceError
from tracemerge.model import COLUMN_KEYS, NO_DUR, NO_TS, RankTrace

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path):
    """The decompressed bytes of ``path`` (gzip is recognised by its magic, not its name)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise TraceError(path, "truncated gzip (the compressed stream ends early)") from None
        except (OSError, zlib.error) as e:
            raise TraceError(path, f"corrupt gzip: {e}") from None
    if not data.strip():
        raise TraceError(path, "empty file")
    return data


def parse_json(path, data):
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise TraceError(path, f"not valid JSON: {e}") from None


def split_document(path, doc):
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


def read_trace(path):
    """Read one trace file into a :class:`RankTrace`."""
    path = os.fspath(path)
    events, meta, block = split_document(path, parse_json(path, read_bytes(path)))
    return build(path, events, meta, block)


def _intern(values, path, what):
    """Codes for ``values`` and the table of distinct values, in first-seen order."""
    table = {}
    try:
        codes = [table.setdefault(v, len(table)) for v in values]
    except TypeError:
        bad = next(i for i, v in enumerate(values) if not _hashable(v))
        raise TraceError(path, f"'{what}' must be a string or number, got {values[bad]!r}", bad) from None
    return np.array(codes, dtype=np.int32), list(table)


def _hashable(v):
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _numbers(values, path, what, required):
    """float64 column of ``values``; None becomes NaN; non-numbers are an error."""
    try:
        col = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        bad = next(i for i, v in enumerate(values) if not _is_number(v))
        raise TraceError(path, f"'{what}' is not a number: {values[bad]!r}", bad) from None
    if len(col) != len(values) or col.ndim != 1:
        bad = next(i for i, v in enumerate(values) if not _is_number(v))
        raise TraceError(path, f"'{what}' is not a number: {values[bad]!r}", bad)
    missing = np.isnan(col)
    if required is not None:
        bad = np.flatnonzero(missing & required)
        if len(bad):
            i = int(bad[0])
            problem = f"missing '{what}'" if values[i] is None else f"'{what}' is not a number: {values[i]!r}"
            raise TraceError(path, problem, i)
    return col, missing


def _is_number(v):
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def build(path, events, meta, block, truncated=False):
    """Columns from a list of event dicts, validated: a bad event is an error naming it."""
    n = len(events)
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise TraceError(path, f"event is a {type(e).__name__}, not an object", i)

    ph_raw = [e.get("ph") for e in events]
    try:
        ph = np.array([ord(p) for p in ph_raw], dtype=np.uint8) if n else np.zeros(0, np.uint8)
    except TypeError:
        bad = next(i for i, p in enumerate(ph_raw) if not (isinstance(p, str) and len(p) == 1))
        problem = "missing 'ph'" if ph_raw[bad] is None else f"bad 'ph' {ph_raw[bad]!r}"
        raise TraceError(path, problem, bad) from None
    is_meta = ph == ord("M")
    needs_name = ~(is_meta | (ph == ord("E")))

    names_raw = [e.get("name") for e in events]
    for i in np.flatnonzero(needs_name):
        if not isinstance(names_raw[i], str):
            break
    else:
        i = None
    if i is not None:
        problem = "missing 'name'" if names_raw[i] is None else f"'name' is not a string: {names_raw[i]!r}"
        raise TraceError(path, problem, int(i))
    cats_raw = [e.get("cat") for e in events]
    name_codes, names = _intern(names_raw + cats_raw, path, "name/cat")
    name, cat = name_codes[:n], name_codes[n:]
    if None in names:
        none_code = names.index(None)
        cat = np.where(cat == none_code, -1, cat).astype(np.int32)

    ts_f, ts_missing = _numbers([e.get("ts") for e in events], path, "ts", required=~is_meta)
    dur_f, dur_missing = _numbers([e.get("dur") for e in events], path, "dur", required=None)
    negative = np.flatnonzero(~dur_missing & (dur_f < 0))
    if len(negative):
        i = int(negative[0])
        raise TraceError(path, f"negative 'dur' {dur_f[i]!r}", i)

    base = meta.get("baseTimeNanoseconds")
    if base is not None and not isinstance(base, int):
        raise TraceError(path, f"'baseTimeNanoseconds' is not an integer: {base!r}")
    ts = np.where(ts_missing, 0, np.rint(ts_f * 1000.0)).astype(np.int64) + (base or 0)
    ts[ts_missing] = NO_TS
    dur = np.where(dur_missing, NO_DUR, np.rint(np.where(dur_missing, 0, dur_f) * 1000.0)).astype(np.int64)

    pid, pids = _intern([e.get("pid", 0) for e in events], path, "pid")
    tid, tids = _intern([e.get("tid", 0) for e in events], path, "tid")
    args = [e.get("args") for e in events]
    extra = [None if e.keys() <= COLUMN_KEYS else {k: v for k, v in e.items() if k not in COLUMN_KEYS}
             for e in events]
    return RankTrace(path=path, meta=meta, tracemerge=block, base_ns=base, names=names, pids=pids,
                     tids=tids, ph=ph, name=name, cat=cat, pid=pid, tid=tid, ts=ts, dur=dur,
                     args=args, extra=extra, truncated=truncated)
