"""The compiled core's debug annotations (.pftrace args) against the Python encoder, the
reference: the same bytes and the same interned names, in the same order, for any args
object hypothesis makes (nested, escaped, repeated keys, big and odd numbers, id keys), and
events it declines encoded by the Python path in turn."""

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracemerge import native
from tracemerge.formats.perfetto.encoder import _Annotations
from tracemerge.model import Args

needs_core = pytest.mark.skipif(native.active() != "native", reason="the compiled core is not active")

KEYS = st.sampled_from(["External id", "correlation", "Correlation ID", "External ID", "Input Dims", "name",
                        "Ev Idx", "é", "a\\b", "device", "x"])
SCALARS = (st.integers(-(2 ** 70), 2 ** 70) | st.integers(0, 2 ** 33) | st.floats(allow_nan=False, allow_infinity=False)
           | st.booleans() | st.none() | st.text(max_size=8) | st.sampled_from(["", "\\", "\u00e9", "\ud7ff"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=12)


def _raw(obj, spaced):
    text = json.dumps(obj, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))
    return msgspec.Raw(text.encode("utf-8", "surrogatepass"))


def _both(raws, rank):
    """(native bytes, python bytes, native interned, python interned) of the same events."""
    args = Args(raws, raw=True)
    events = list(range(len(raws)))
    n, p = _Annotations(), _Annotations()
    got = n.encode_events(args, events, rank)
    want = p.encode_python(args, events, rank)
    return got, want, n.take_interned(), p.take_interned()


@needs_core
@settings(max_examples=300, deadline=None)
@given(objs=st.lists(st.dictionaries(KEYS, VALUES, max_size=6), min_size=1, max_size=6),
       rank=st.integers(0, 5000), spaced=st.booleans())
def test_the_core_encodes_args_as_the_python_encoder(objs, rank, spaced):
    got, want, got_names, want_names = _both([_raw(o, spaced) for o in objs], rank)
    assert got == want
    assert got_names == want_names


@needs_core
@pytest.mark.parametrize("text", [
    b'{"a": 1, "a": 2}', b'{"a": {"b": 1, "b": 2}}', b'{"big": 123456789012345678901234}', b'{"x": 1e400}',
    b'{"External id": -1}', b'{"External id": "7"}', b'{"External id": 4294967296}', b'{"k\\u00e9": 1}',
    b'[1, 2]', b'"text"', b'{}', b'{"deep": ' + b'[' * 80 + b']' * 80 + b'}', b'{"f": -0.0, "i": -0, "e": 1E5}',
])
def test_odd_args_are_the_python_encoders(text):
    raws = [msgspec.Raw(b'{"first": 1}'), msgspec.Raw(text), msgspec.Raw(b'{"last": [1, {"n": null}]}')]
    try:
        want = _Annotations().encode_python(Args(raws, raw=True), [0, 1, 2], 3)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:  # the Python path refuses it: so must the core's
        with pytest.raises(type(e)):
            _both(raws, 3)
        return
    got, want2, got_names, want_names = _both(raws, 3)
    assert got == want == want2 and got_names == want_names
