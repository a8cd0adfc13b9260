"""Perfetto protobuf output (``--format perfetto``, chosen by a ``.pftrace`` name): each rank
is a self-contained run of TracePackets (:mod:`~tracemerge.formats.perfetto.encoder`), and
concatenated traces are one trace, so the document needs no header, separator or footer."""

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from tracemerge.formats.base import Counts, Format

if TYPE_CHECKING:
    from tracemerge.model import RankTrace
    from tracemerge.place.arrows import Arrows, Found, SliceFlows
    from tracemerge.place.placement import Placement

PROTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")


def rank_packets(trace: "RankTrace", place: "Placement",
                 flows: Optional[Dict[int, "SliceFlows"]] = None) -> Tuple[bytes, Counts]:
    """(bytes, counts) of one rank for combine: counts keyed like its summary."""
    # imported here: the registry lists this format for every command, a JSON merge never encodes
    from tracemerge.formats.perfetto.encoder import encode_rank

    data, c = encode_rank(trace, place, flows)
    counts: Counts = {"out": c.out, "added": 0, "dropped": sum(c.dropped.values()),
              "perfetto_overlapping_slices": c.overlapping, "perfetto_overlap_tracks": c.overlap_tracks,
              "perfetto_flow_events": c.flows}
    counts["dropped_by"] = dict(c.dropped)
    return data, counts


def rank_body(trace: "RankTrace", place: "Placement", arrows: Optional["Arrows"], found: "Found", counts: Counts,
              consume: bool) -> Tuple[bytes, Counts]:
    """One rank's packets, its flow arrows (RPC's, send/recv's) bound to their spans."""
    from tracemerge.place.arrows import proto_flows

    data, proto = rank_packets(trace, place, proto_flows(found) if arrows else None)
    return data, {**counts, **proto}


def time_shift(out_base_ns: int) -> int:
    """ns added to every time of a .pftrace: Perfetto's timestamps are unsigned, so a job
    whose output starts before 1970 (negative times in a file without a base) is written
    from 0 on — every event shifted alike, nothing lost (the JSON output keeps the times
    as they are). 0 for any job that starts after 1970."""
    return max(0, -out_base_ns)


def shift_warnings(output: str, summary: Dict[str, Any]) -> List[str]:
    shift = summary.get("time_shift_ns")
    if not shift:
        return []
    return [f"the job starts {shift} ns before 1970 (negative times): Perfetto's times are unsigned, so every event "
            f"of {output} is {shift} ns later than its input says (the JSON output keeps the times)"]


FORMAT = Format("perfetto", PROTO_SUFFIXES, rank_body, columns_only=True, warnings=shift_warnings)
