"""Clocks from CPU completion: the ranks of a gloo collective leave it together.

The same reasoning as :mod:`tracemerge.clocks.nccl_kernel`, on the CPU: a synchronising
collective (all_reduce, all_gather, reduce_scatter, all_to_all, barrier) cannot finish on
any rank before every rank's data has arrived, and once it has, each rank finishes within
its last message (tenths of a ms on one host's loopback, up to a few ms on busy cores). Its
execution span on the group's runloop thread (``gloo:all_reduce``:
:mod:`tracemerge.inputs.event_collectives`, ``source: "events"``) ends then, so for ranks
``a`` and ``b`` the difference of the ends of one collective, each on its own clock, is
``b``'s offset to ``a`` plus that message's noise. Per pair of ranks, over the matched
collectives: the offset is the median difference, outliers (a rank preempted before its
end was stamped) are left out and said, drift is fitted only where many samples support
it, and the error bound is the spread of the samples kept (:func:`nccl_kernel.fit_pair`)
plus the **last message**: the ranks leave within the time the collective still took
after its last rank arrived, which the last arriver's own stay in it measures on one clock
(the shortest stay of the members: every rank ends together, the last to come stays least;
the median over the matched collectives, :func:`last_message_ns`). On busy cores the runloop
threads pass the last messages on late, and one rank may end consistently later than
another: that shifts every sample alike, which their spread cannot show. Ranks are joined
through the pairs of least bound. Broadcast and scatter roots may leave
before the others have their data: they count for nothing. The capture's own records end
when the Python call returned, which for an asynchronous call is a callback's time, so
they do not count either.
"""

from typing import Any, Dict, Mapping

import numpy as np

from tracemerge.algorithms.arrays import distinct
from tracemerge.algorithms.arrays import median as median_of  # np.median imports numpy.ma
from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.nccl_kernel import align_from_ends, auto_with_kernels, kernel_ends, kernel_linked
from tracemerge.inputs.event_collectives import SOURCE

METHOD = "cpu-collective"
WHAT = ("collective ends", "gloo collective ends")


def is_event_end(record: Dict[str, Any]) -> bool:
    """A record read from a collective's execution span on the CPU: its end is the completion."""
    return record.get("source") == SOURCE and not record.get("kernel") and not record.get("end_at_stop")


def last_message_ns(collectives: Any) -> int:
    """The median over the matched synchronising collectives with two or more execution
    ends of the shortest stay of a member (end - start on its own clock): the time the
    collective took after its last rank arrived (module docstring)."""
    row, _, _ = kernel_ends(collectives, is_event_end)
    if not len(row):
        return 0
    keep = np.flatnonzero(np.isin(collectives.member_row, row[np.r_[True, row[1:] != row[:-1]]]))
    keep = keep[collectives.member_ended[keep] & np.fromiter(
        (is_event_end(collectives.records[i]) for i in collectives.member_record[keep].tolist()), bool, len(keep))]
    stay = collectives.member_end[keep] - collectives.member_start[keep]
    rows = collectives.member_row[keep]
    shortest = np.full(int(rows.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(shortest, rows, stay)
    found = shortest[distinct(rows)]
    return max(int(median_of(found)), 0)


def align_cpu_collective(infos: Mapping[int, Any], reference: int, links: Any = None) -> Dict[int, ClockModel]:
    """{rank: ClockModel} from the ends of matched collectives' execution spans (module
    docstring); ranks none joins to the reference keep their wall clock and say so."""
    return align_from_ends(infos, reference, links, is_event_end, METHOD, WHAT[0], "gloo collective span",
                           last_message_ns)


def ends_linked(links: Any) -> bool:
    """Some matched collective has the execution ends of two ranks."""
    return kernel_linked(links, is_event_end)


def auto_with_ends(infos: Mapping[int, Any], reference: int, links: Any,
                   cpu: Dict[int, ClockModel]) -> Dict[int, ClockModel]:
    """``cpu`` (auto's clocks from the other exchanges) with the clocks from collective ends
    preferred where they are tighter or disagree (:func:`nccl_kernel.prefer_kernels`)."""
    return auto_with_kernels(infos, reference, links, cpu, is_event_end, METHOD, WHAT, last_message_ns)
