"""Golden files that a person can read and diff, each a lossless rewriting of the bytes a
command wrote, so that equal golden text means equal output bytes:

- merged JSON: a newline after every element of the top two levels (one trace event per
  line, one summary key per line), where the output has no whitespace; still valid JSON,
  and the output is the golden text with the newlines of those levels removed;
- .pftrace: one line per packet, every field in wire order with its proto name, read with
  Perfetto's descriptors; the dump is made only from a parse whose re-encoding is the
  input's bytes (asserted), and prints every parsed value unambiguously;
- everything else (table, CSV, Markdown, HTML, report and offsets JSON): the bytes as written.

:func:`compare` returns a unified diff of the first differing lines (long lines cut
around their first difference), or None.
"""

from __future__ import annotations

import difflib
import json
import struct
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def _shallow(text: str, depth: int) -> list[int]:
    """The nesting level of each character of a JSON text, or -1 inside a string (its
    quotes included); a bracket counts at the level of the container it opens or closes."""
    levels, level, in_string, escaped = [], 0, False, False
    for c in text:
        if in_string:
            levels.append(-1)
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            continue
        if c == '"':
            in_string = True
            levels.append(-1)
        elif c in "[{":
            level += 1
            levels.append(level)
        elif c in "]}":
            levels.append(level)
            level -= 1
        else:
            levels.append(level)
    return levels


def spread_json(raw: bytes, depth: int = 2) -> str:
    """``raw`` with a newline after each opening bracket and comma, and before each closing
    bracket, of the containers nested at most ``depth`` deep. Deeper than that the text is
    as written (newlines of an input's pretty-printed args included); up to that depth it
    must hold no whitespace, so that :func:`unspread_json` knows each newline there for an
    inserted one."""
    text = raw.decode("utf-8")
    out: list[str] = []
    for c, level in zip(text, _shallow(text, depth)):
        if 0 <= level <= depth:
            if c.isspace():
                raise ValueError(f"whitespace at nesting level {level}: it would be confused with the inserted newlines")
            if c in "]}":
                out.append("\n")
            out.append(c)
            if c in "[{,":
                out.append("\n")
        else:
            out.append(c)
    return "".join(out)


def unspread_json(text: str, depth: int = 2) -> bytes:
    """The output bytes of a golden merged JSON: :func:`spread_json` reversed."""
    return "".join(c for c, level in zip(text, _shallow(text, depth))
                   if not (c == "\n" and 0 <= level <= depth)).encode("utf-8")


# wire types, and the fixed-size scalars' struct formats (their wire type by their size)
VARINT, I64, LEN, I32 = 0, 1, 2, 5
_FIXED = {FieldDescriptor.TYPE_DOUBLE: "<d", FieldDescriptor.TYPE_FLOAT: "<f", FieldDescriptor.TYPE_FIXED64: "<Q",
          FieldDescriptor.TYPE_SFIXED64: "<q", FieldDescriptor.TYPE_FIXED32: "<I", FieldDescriptor.TYPE_SFIXED32: "<i"}
_BYTES = (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if not b & 0x80:
            return value, i


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(number, wire type, value) in wire order; a LEN value is its bytes."""
    out, i = [], 0
    while i < len(data):
        value: Any
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, i = _varint(data, i)
        elif wire in (I64, I32):
            n = 8 if wire == I64 else 4
            value, i = data[i:i + n], i + n
        elif wire == LEN:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wire} (groups) in a .pftrace")
        out.append((number, wire, value))
    return out


def _encode(fields: list[tuple[int, int, Any]]) -> bytes:
    parts = []
    for number, wire, value in fields:
        parts.append(_put_varint(number << 3 | wire))
        if wire == VARINT:
            parts.append(_put_varint(value))
        elif wire == LEN:
            parts.append(_put_varint(len(value)) + value)
        else:
            parts.append(value)
    return b"".join(parts)


def _wire_of(field: FieldDescriptor) -> int:
    if field.type in _BYTES:
        return LEN
    fmt = _FIXED.get(field.type)
    return VARINT if fmt is None else I64 if struct.calcsize(fmt) == 8 else I32


def _show(descriptor: Descriptor | None, data: bytes) -> str:
    """The fields of one message, ``name=value`` in wire order; a field the descriptor does
    not know, or of another wire type than its declared one, as ``#number=w<wire>:<value>``."""
    fields = _fields(data)
    if _encode(fields) != data:  # e.g. an overlong varint: the dump would not say it
        raise ValueError(f"{descriptor.name if descriptor else 'message'} does not re-encode to its bytes")
    shown = []
    for number, wire, value in fields:
        field = descriptor.fields_by_number.get(number) if descriptor else None
        expected = _wire_of(field) if field else None
        packed = field is not None and wire == LEN and expected != LEN  # a packed repeated scalar
        if field is None or (wire != expected and not packed):
            shown.append(f"#{number}=w{wire}:{value.hex() if isinstance(value, bytes) else value}")
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            text = "{" + _show(field.message_type, value) + "}"
        elif field.type == FieldDescriptor.TYPE_STRING and _is_utf8(value):
            text = json.dumps(value.decode("utf-8"), ensure_ascii=False)
        elif field.type in _BYTES or packed:  # bytes, a string that is not UTF-8, packed items as written
            text = "0x" + value.hex()
        elif wire == VARINT:
            text = str(value)
        else:
            fmt = _FIXED[field.type]
            number_ = struct.unpack(fmt, value)[0]
            # a float whose repr does not give its bytes back (a NaN's payload): the bytes
            text = repr(number_) if struct.pack(fmt, number_) == value else "0x" + value.hex()
        shown.append(f"{field.name}={text}")
    return " ".join(shown)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def dump_pftrace(raw: bytes) -> str:
    """One line per packet: its fields in wire order (``name=value``, messages in braces,
    strings as JSON, bytes and packed items in hex)."""
    packets = _fields(raw)
    if any((number, wire) != (1, LEN) for number, wire, _ in packets) or _encode(packets) != raw:
        raise ValueError("not a sequence of packets that re-encodes to its bytes")
    return "".join(_show(pb.TracePacket.DESCRIPTOR, value) + "\n" for _, _, value in packets)


def normalise(kind: str, data: bytes) -> str:
    """The golden text of an output of this kind (see the module's docstring)."""
    if kind in ("json", "json.gz"):
        return spread_json(data)
    if kind.endswith("pftrace"):
        return dump_pftrace(data)
    return data.decode("utf-8")


def compare(expected: str, actual: str, name: str, context: int = 3, limit: int = 40, width: int = 160) -> str | None:
    """None when equal, else the unified diff of the first differing hunks (``limit`` lines),
    each line longer than ``width`` cut to a window around its first difference from its
    counterpart."""
    if expected == actual:
        return None
    old, new = expected.splitlines(), actual.splitlines()
    if old == new:  # only line endings differ
        return f"{name}: the same lines, different line endings (expected {expected[-2:]!r}, got {actual[-2:]!r})"
    lines = list(difflib.unified_diff(old, new, f"{name} (golden)", f"{name} (this run)", n=context, lineterm=""))
    removed = [ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    column = _first_difference(removed[0], added[0]) if removed and added else 0
    cut = [_cut(ln, column, width) for ln in lines[:limit]]
    more = len(lines) - limit
    return "\n".join(cut + ([f"... {more} more diff lines"] if more > 0 else []))


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _cut(line: str, column: int, width: int) -> str:
    if len(line) <= width:
        return line
    start = max(1, min(column - width // 2, len(line) - width))
    return line[0] + ("…" if start > 1 else "") + line[start:start + width] + ("…" if start + width < len(line) else "")
