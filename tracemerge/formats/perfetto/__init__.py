"""Perfetto protobuf output (``--format perfetto``, chosen by a ``.pftrace`` name): each rank
is a self-contained run of TracePackets (:mod:`~tracemerge.formats.perfetto.encoder`), and
concatenated traces are one trace, so the document needs no header, separator or footer."""

from tracemerge.formats.base import Format

PROTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")


def rank_packets(trace, place, flows=None):
    """(bytes, counts) of one rank for combine: counts keyed like its summary."""
    # imported here: the registry lists this format for every command, a JSON merge never encodes
    from tracemerge.formats.perfetto.encoder import encode_rank

    data, c = encode_rank(trace, place, flows)
    counts = {"out": c.out, "added": 0, "dropped": sum(c.dropped.values()),
              "perfetto_overlapping_slices": c.overlapping, "perfetto_overlap_tracks": c.overlap_tracks,
              "perfetto_flow_events": c.flows}
    counts["dropped_by"] = dict(c.dropped)
    return data, counts


def rank_body(trace, place, rpc, found, counts, consume):
    """One rank's packets, its RPC arrows bound to their spans."""
    data, proto = rank_packets(trace, place, rpc.proto_flows(found) if rpc else None)
    return data, {**counts, **proto}


FORMAT = Format("perfetto", PROTO_SUFFIXES, rank_body, columns_only=True)
