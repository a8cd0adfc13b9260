"""Types of the compiled .pftrace packet writer (``_proto.c``; docs/native.md): the per-event
loops of the Perfetto encoder (``formats/perfetto/encoder.py``, the reference). Every
column is a C-contiguous one-dimensional int64 buffer (numpy), every result int64 bytes
but ``packets``'."""

from typing import List, Tuple, Union

from _typeshed import ReadableBuffer
from numpy import ndarray

# a buffer of int64 (numpy's arrays among them: numpy declares their buffer protocol to
# type checkers only from Python 3.12 on, as __buffer__)
_Int64Buffer = Union[ReadableBuffer, ndarray]


def nest(start: _Int64Buffer, end: _Int64Buffer) -> bytes:
    """The lane of each slice of one track, slices sorted by (start, -end) (``nesting.nest``)."""


def slice_order(start: _Int64Buffer, end: _Int64Buffer) -> Tuple[bytes, bytes, bytes]:
    """(ts, kind, slice) of one lane's begin and end records in emission order (``nesting.slice_order``)."""


def chains(fid: _Int64Buffer, role: _Int64Buffer, v1: _Int64Buffer, begin_ns: _Int64Buffer,
           end_ns: _Int64Buffer, has_end: _Int64Buffer) -> Tuple[bytes, bytes]:
    """(slot, drop) of each of the input's flow points (``flows.bind_input_flows``)."""


def packets(ts: _Int64Buffer, kind: _Int64Buffer, uuid: _Int64Buffer, name: _Int64Buffer,
            cat: _Int64Buffer, args_slot: _Int64Buffer, tail_slot: _Int64Buffer, flow_lo: _Int64Buffer,
            flow_hi: _Int64Buffer, flow_id: _Int64Buffer, flow_slot: _Int64Buffer, args: List[bytes],
            tails: List[bytes], flags: bytes) -> bytes:
    """Every body as a framed TracePacket, in the columns' order (``encoder._Bodies.packets``)."""
