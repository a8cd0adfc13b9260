"""Trace documents spelled as torch spells them where other tools read the text.

Tools that tell a trace file's rank read its text, not its JSON: HolisticTraceAnalysis
finds the first ``"rank":\\s+(\\d+)`` in the file (hta/common/trace_file.py), which Kineto's
writer satisfies (``"distributedInfo": {"backend": "gloo", "rank": 0, ...}``: torch
writes that value with ``json.dumps``, whose separators are ``", "`` and ``": "``) and a
compact writer (``"rank":0``) does not. :func:`document` writes one key of the top-level
object per line, every value but the events with those separators, the events compact
(one encoder call: most of the bytes) — so a rank file reads as the trace torch wrote plus
the ``"tracemerge"`` block, whose own ``"rank": R`` comes first in the file.
"""

from typing import Any, Dict, List

import msgspec

_encode = msgspec.json.encode  # msgspec.Raw values (exact µs text) are written as they are

# the block's lists of records may hold thousands of entries: written compact, like the events
_COMPACT_IN_BLOCK = (list,)


def spaced(value: Any) -> bytes:
    """``value`` as JSON with Python's ``json.dumps`` separators (``", "``, ``": "``)."""
    if isinstance(value, dict):
        return b"{" + b", ".join(_encode(str(k)) + b": " + spaced(v) for k, v in value.items()) + b"}"
    if isinstance(value, (list, tuple)):
        return b"[" + b", ".join(map(spaced, value)) + b"]"
    return _encode(value)


def _block(block: Dict[str, Any]) -> bytes:
    """The ``"tracemerge"`` block: its fields spaced, its record lists compact."""
    return b"{" + b", ".join(_encode(str(k)) + b": " + (_encode(v) if isinstance(v, _COMPACT_IN_BLOCK) else spaced(v))
                             for k, v in block.items()) + b"}"


def document(doc: Dict[str, Any]) -> List[bytes]:
    """The bytes of a trace document (a dict, keys in file order) as pieces to write one
    after the other (the events are most of the bytes: never copied into one object): each
    top-level key on a line of its own, ``traceEvents`` compact, the rest spaced as torch
    spells them."""
    parts = [b"{\n"]
    for n, (key, value) in enumerate(doc.items()):
        if key == "traceEvents":
            text = _encode(value)
        elif key == "tracemerge" and isinstance(value, dict):
            text = _block(value)
        else:
            text = spaced(value)
        parts += [b",\n  " if n else b"  ", _encode(str(key)), b": ", text]
    parts.append(b"\n}\n")
    return parts
