"""Clock alignment: match RPCs and collectives across ranks (correlate), bound each pair's
offset line (bands), solve over the graph of ranks (graph), review causality, and the
alignment methods (methods). Produces a :class:`~tracemerge.clocks.clock.ClockModel` per rank."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict

from tracemerge.registry import Deferred

if TYPE_CHECKING:
    from tracemerge.clocks.clock import ClockModel


@dataclass(frozen=True)
class Method:
    """One alignment method: ``--align NAME``, its function, and what ``--help`` says of it."""

    name: str
    align: Callable[[Dict[int, Any], int, Any], Dict[int, "ClockModel"]]   # (infos by rank, reference, the job's Correlation)
    summary: str


def _in(module: str, function: str) -> Deferred:
    """A method's function, imported when the method runs: ``--align``'s choices and help
    read this list without loading the solver (numpy)."""
    return Deferred(f"tracemerge.clocks.{module}", function)


# ``--align``'s choices and help, in this order; a new method is one function and one line here
METHODS: Dict[str, Method] = {m.name: m for m in (
    Method("none", _in("methods", "align_none"), "timestamps as written"),
    Method("wall", _in("methods", "align_wall"), "each file's wall clock"),
    Method("start", _in("methods", "align_start"), "profiler starts coincide"),
    Method("rpc", _in("methods", "align_rpc"), "NTP-style offsets and drift from matched RPCs"),
    Method("collective", _in("methods", "align_collective"), "from matched collectives"),
    Method("nccl-kernel", _in("nccl_kernel", "align_nccl_kernel"),
           "from the ends of matched collectives' NCCL kernels (GPU completion)"),
    Method("cpu-collective", _in("cpu_collective", "align_cpu_collective"),
           "from the ends of matched gloo collectives (CPU completion)"),
    Method("auto", _in("methods", "align_auto"), "every exchange the data has, per rank (NCCL kernel ends first, "
                                                 "then gloo collective ends), wall clock for ranks with none"),
)}
