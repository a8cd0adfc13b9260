"""Args.key_values (one key of each event's args, decoded alone) tells what the args'
dicts tell, for raw and decoded args, objects and not."""

import msgspec
import pytest
from msgspec import UNSET

from tracemerge.model import Args

ARGS = [
    {"correlation": 7, "External id": 3},
    {"External id": 3},                     # the key missing
    None,                                   # no args
    {"correlation": None},                  # the key, null
    {"nested": {"correlation": 9}},         # the key only deeper: missing at the top
    {"correlation": "x7", "name": "correlation"},
    [1, 2],                                 # args that are not an object
    "correlation",
    {"correlation": 1.5},
]


def expected(items, key, missing, no_object):
    return [a.get(key, missing) if isinstance(a, dict) else no_object for a in items]


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_key_values_equal_the_dicts(raw, chunk):
    items = [msgspec.Raw(msgspec.json.encode(a)) if a is not None else None for a in ARGS] if raw else list(ARGS)
    args = Args(items, raw=raw)
    idx = list(range(len(ARGS)))
    for key in ("correlation", "External id"):
        for missing, no_object in ((UNSET, UNSET), (None, -1)):
            got = list(args.key_values(idx, key, missing, no_object, chunk=chunk))
            assert got == expected(ARGS, key, missing, no_object)
    # a subset, out of order
    assert list(args.key_values([5, 0, 3], "correlation", chunk=chunk)) == ["x7", 7, None]
