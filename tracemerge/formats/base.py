"""What an output format of ``combine`` is: a name, the output names that choose it, and how
one rank's body is made and encoded (in the workers) and the document around the bodies
is written (by the parent)."""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Tuple, Union

# one rank's body: lists of events encoded one at a time, or bytes already encoded
Body = Union[Iterable[list], bytes]
Counts = Dict[str, int]


def nothing(_: Any) -> bytes:
    return b""


def no_warnings(output: str, summary: dict) -> List[str]:
    return []


@dataclass(frozen=True)
class Format:
    """One output format; registered by one line in :data:`tracemerge.formats.FORMATS`.

    ``rank(trace, place, rpc, found, counts, consume) -> (body, counts)`` runs in the
    workers, once per rank, on the selected events: ``rpc`` is the RPC flow plan
    (:class:`~tracemerge.place.arrows.RpcFlows`, or None), ``found`` its spans on this rank,
    ``counts`` this rank's counts so far, ``consume`` whether the trace may be used up.
    ``encode(events) -> bytes`` turns each event list of a body into bytes; ``open(header)``,
    ``separator`` (between non-empty rank bodies) and ``close(footer)`` are written by the
    parent. ``columns_only``: ``rank`` reads the trace's columns, not its event objects,
    so those are freed before selection. ``warnings(output, summary)``: what to tell about
    a written output.
    """

    name: str                                   # the --format value and the summary's "format"
    suffixes: Tuple[str, ...]                   # output names (without .gz/.zst) that choose it
    rank: Callable[..., Tuple[Body, Counts]]
    encode: Callable[[list], bytes] = bytes
    open: Callable[[dict], bytes] = nothing
    separator: bytes = b""
    close: Callable[[dict], bytes] = nothing
    columns_only: bool = False
    warnings: Callable[[str, dict], List[str]] = no_warnings
