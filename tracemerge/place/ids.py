"""Rank-namespaced ids: flow and correlation ids made unique per rank, so no arrow ever
joins two ranks by accident. Ints stay ints below 2**53: ``(rank + 1) << 32 | id``."""

import re
from itertools import repeat
from operator import is_not
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import msgspec
import numpy as np

from tracemerge.model import ARG_ID_KEYS, FLOW_ID_KEYS, Args

# Keys that join events into flows or correlate CPU ops with device work; namespaced per
# rank so no arrow ever joins two ranks by accident.
ID_KEYS = ("id", "bind_id")
EXTRA_ID_KEYS = frozenset(FLOW_ID_KEYS)
NAMESPACE_BITS = 32
ID_LIMIT = 1 << NAMESPACE_BITS
CHUNK = 50_000


def namespace_id(rank: int, value: Any) -> Union[int, str]:
    """A rank-unique form of a flow/correlation id: ints stay ints below 2**53."""
    if value.__class__ is int and 0 <= value < ID_LIMIT:  # exact int: a bool is not an id
        return ((rank + 1) << NAMESPACE_BITS) | value
    return f"r{rank}:{value}"


def namespace_extra(rank: int, extra: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if extra is None or extra.keys().isdisjoint(EXTRA_ID_KEYS):
        return extra
    out = dict(extra)
    for k in ID_KEYS:
        if k in out:
            out[k] = namespace_id(rank, out[k])
    id2 = out.get("id2")
    if isinstance(id2, dict) and "global" in id2:
        out["id2"] = {**id2, "global": namespace_id(rank, id2["global"])}
    return out


def namespaced_ids(rank: int, key: str, values: Sequence[Any]) -> Tuple[List[int], List[Any]]:
    """(indices, new values) of the events that have ``key`` (of EXTRA_ID_KEYS; ``values``
    UNSET where absent), flow ids namespaced: plain in-range integer ids (the Kineto case)
    with numpy, anything else by namespace_id."""
    at = np.flatnonzero(np.fromiter(map(is_not, values, repeat(msgspec.UNSET)), bool, len(values))).tolist()
    ids = list(map(values.__getitem__, at))
    if key == "id2":
        return at, [{**v, "global": namespace_id(rank, v["global"])} if isinstance(v, dict) and "global" in v else v
                    for v in ids]
    return at, namespace_ids(rank, ids)


def namespace_ids(rank: int, values: List[Any]) -> List[Any]:
    """``[namespace_id(rank, v) for v in values]``: plain in-range integer ids (the Kineto
    case) in one numpy pass."""
    if values and set(map(type, values)) == {int} and 0 <= min(values) and max(values) < ID_LIMIT:
        return (np.fromiter(values, np.int64, len(values)) | ((rank + 1) << NAMESPACE_BITS)).tolist()
    return [namespace_id(rank, v) for v in values]


def namespace_args(rank: int, args: Any) -> Any:
    if not isinstance(args, dict) or args.keys().isdisjoint(ARG_ID_KEYS):
        return args
    out = dict(args)
    for k in ARG_ID_KEYS:
        if k in out:
            out[k] = namespace_id(rank, out[k])
    return out


_ARG_ID = re.compile(rb'("(?:' + b"|".join(re.escape(k.encode()) for k in ARG_ID_KEYS) +
                     rb')"\s*:\s*)(\d{1,18}(?=\s*[,}]))?')
_KEY_TOKENS = [b'"' + k.encode() + b'"' for k in ARG_ID_KEYS]
# The same in Kineto's spelling ("key": digits) only: a pattern with no optional parts is
# scanned about twice as fast; where it finds every key token it has found _ARG_ID's matches
_KINETO_ID = re.compile(rb'("(?:' + b"|".join(re.escape(k.encode()) for k in ARG_ID_KEYS) +
                        rb')": )(\d{1,18})(?=\s*[,}])')


def namespaced_args(rank: int, args: Args) -> List[Any]:
    """Each event's args (Args items) with ARG_ID_KEYS namespaced by ``namespace_id``.

    Raw args are rewritten in their bytes, all of a rank's in one regex pass over their
    concatenation, when that is exact: every args is a flat object (one "{" each) and every
    id a plain integer; otherwise each is decoded and rewritten as a dict.
    """
    items = args.items
    if not args.raw:
        return [namespace_args(rank, a) if a.__class__ is dict else a for a in items]
    rewritten: List[Any] = []
    for lo in range(0, len(items), CHUNK):  # by chunks: the joined copies of a rank's args never coexist
        part = _rewrite_raw_ids(rank, items[lo:lo + CHUNK])
        if part is None:
            break
        rewritten += part
    else:
        return rewritten
    return [a if a is None else namespace_args(rank, msgspec.json.decode(a)) for a in items]


def _rewrite_raw_ids(rank: int, items: List[Optional[msgspec.Raw]]) -> Optional[List[Any]]:
    present = list(filter(None, items))
    joined = b"\0".join(present)  # NUL cannot occur in JSON text
    if (joined.count(b"{") != len(present) or joined.count(b"\0{") + joined.startswith(b"{") != len(present)
            or b"\\u" in joined):  # a nested object, a non-object, or a key that may be spelled with escapes
        return None
    tokens = sum(map(joined.count, _KEY_TOKENS))
    if not tokens:
        return list(items)
    parts = _KINETO_ID.split(joined)
    if len(parts) // 3 == tokens:
        if any(b"\\" + t in joined for t in _KEY_TOKENS):
            return None
    else:
        parts = _ARG_ID.split(joined)
        if None in parts[2::3] or any(map(bytes.endswith, parts[0:-1:3], repeat(b"\\"))):
            return None
    values = parts[2::3]
    ids = np.fromiter(map(int, values), np.int64, len(values))
    small = ids < ID_LIMIT
    new = (ids | ((rank + 1) << NAMESPACE_BITS)).astype("S20").tolist()
    for k in np.flatnonzero(~small).tolist():
        new[k] = msgspec.json.encode(namespace_id(rank, int(ids[k])))
    parts[2::3] = new
    pieces = b"".join(parts).split(b"\0")
    out = np.full(len(items), None, dtype=object)
    out[np.fromiter(map(is_not, items, repeat(None)), bool, len(items))] = \
        np.fromiter(map(msgspec.Raw, pieces), object, len(pieces))
    return out.tolist()
