"""Chrome trace JSON writer: streamed rank by rank, so only one rank's events are in memory.

The document is made of pieces that can be produced apart: :func:`open_document`, one
:func:`encode_events` body per rank (worker processes write these as shard files),
:data:`SEPARATOR` between non-empty bodies, and :func:`close_document`.
"""

import msgspec
import orjson

SEPARATOR = b","


def open_document(header):
    """``{...header, "traceEvents":[`` as bytes."""
    head = orjson.dumps(header)
    return head[:-1] + (b',"traceEvents":[' if len(head) > 2 else b'"traceEvents":[')


def encode_events(events):
    """One rank's events as the comma-joined body of the traceEvents array (b"" when none).

    msgspec writes dicts, ``transform.Event`` structs and raw JSON args (verbatim) alike.
    """
    return msgspec.json.encode(events)[1:-1] if events else b""


def close_document(footer):
    """``],"tracemerge":footer}`` as bytes."""
    return b'],"tracemerge":' + orjson.dumps(footer) + b"}"

