"""File names of any bytes. A Linux file name is bytes (``rank1-\\xff.json.gz`` is legal);
Python hands it over as text with each byte that is not UTF-8 as a lone surrogate
(surrogateescape), which no UTF-8 output takes (orjson: "str is not valid UTF-8", an
internal error writing the summary). Where a file or a terminal takes bytes, the name is
carried as the bytes it is (:func:`as_bytes`); where the output must be UTF-8 (JSON, the
one-line messages) it is shown escaped, ``rank1-\\xff.json.gz`` (:func:`shown`,
:func:`json_safe`, :func:`dumps`)."""

import os
from typing import Any


def shown(text: str) -> str:
    """``text`` with each byte a name held that is not UTF-8 written ``\\xNN``; text without
    such bytes is returned as it is."""
    if text.isascii():
        return text
    return os.fsencode(text).decode("utf-8", "backslashreplace") if _escaped(text) else text


def as_bytes(text: str) -> bytes:
    """``text`` as UTF-8, each escaped byte of a name the byte it was (os.fsencode's rule)."""
    return text.encode("utf-8", "surrogateescape")


def _escaped(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def json_safe(value: Any) -> Any:
    """``value`` (dicts, lists, tuples, scalars) with every string :func:`shown`."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(value: Any, option: int = 0) -> bytes:
    """orjson.dumps, the names of any bytes shown escaped: the walk over ``value`` is paid
    only when orjson refused a string."""
    import orjson  # here: the messages' helpers above are used before the CLI needs orjson

    try:
        return orjson.dumps(value, option=option)
    except TypeError:
        return orjson.dumps(json_safe(value), option=option)
