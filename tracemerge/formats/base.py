"""What an output format of ``combine`` is: a name, the output names that choose it, and how
one rank's body is made and encoded (in the workers) and the document around the bodies
is written (by the parent)."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

if TYPE_CHECKING:
    from tracemerge.model import RankTrace
    from tracemerge.place.arrows import Arrows, Found
    from tracemerge.place.placement import Placement

# one rank's body: lists of events encoded one at a time (or bodies the compiled core
# wrote), or bytes already encoded
Body = Union[Iterable[Union[list, bytes]], bytes]
Counts = Dict[str, Any]   # ints by name, and {reason: int} breakdowns ("dropped_by")
# (trace, place, arrows, found, counts, consume) -> (body, counts): one rank, in a worker
RankFn = Callable[["RankTrace", "Placement", Optional["Arrows"], "Found", Counts, bool], Tuple[Body, Counts]]


def nothing(_: Any) -> bytes:
    return b""


def no_warnings(output: str, summary: Dict[str, Any]) -> List[str]:
    return []


@dataclass(frozen=True)
class Format:
    """One output format; registered by one line in :data:`tracemerge.formats.FORMATS`.

    ``rank(trace, place, arrows, found, counts, consume) -> (body, counts)`` runs in the
    workers, once per rank, on the selected events: ``arrows`` is the flow arrows' plan
    (:class:`~tracemerge.place.arrows.Arrows`: RPC calls, sends and receives; or None),
    ``found`` the arrows' ends on this rank's spans (``place.arrows.Found``),
    ``counts`` this rank's counts so far, ``consume`` whether the trace may be used up.
    ``encode(events) -> bytes`` turns each event list of a body into bytes; ``open(header)``,
    ``separator`` (between non-empty rank bodies) and ``close(footer)`` are written by the
    parent. ``columns_only``: ``rank`` reads the trace's columns, not its event objects,
    so those are freed before selection. ``warnings(output, summary)``: what to tell about
    a written output.
    """

    name: str                                   # the --format value and the summary's "format"
    suffixes: Tuple[str, ...]                   # output names (without .gz/.zst) that choose it
    rank: RankFn
    encode: Callable[[list], bytes] = bytes
    open: Callable[[Dict[str, Any]], bytes] = nothing
    separator: bytes = b""
    close: Callable[[Dict[str, Any]], bytes] = nothing
    columns_only: bool = False
    warnings: Callable[[str, Dict[str, Any]], List[str]] = no_warnings
