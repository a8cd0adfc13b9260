"""Combine: every rank into one trace on the reference clock, one process group per rank."""

import tracemerge
from tracemerge.engine import LocalEngine, write_sharded
from tracemerge.output import check_output
from tracemerge.transform import Placement, rank_label, transform

SECOND_NS = 1_000_000_000


def placements(session, alignment):
    """{rank: Placement}: pid blocks ordered by rank, ts 0 at the whole second before the first event."""
    stride = 1000 * (1 + max(len(i.pids) for i in session.infos) // 1000)
    first = min(alignment.clocks[i.rank].to_reference(i.first_ns) for i in session.infos)
    out_base = first - first % SECOND_NS
    return {
        info.rank: Placement(rank=info.rank, label=rank_label(info.rank, info.worker_name, info.hostname),
                             pid_base=(n + 1) * stride, clock=alignment.clocks[info.rank], out_base_ns=out_base)
        for n, info in enumerate(session.infos)
    }


def combine(session, alignment, output, force=False):
    """Write the merged Chrome trace to ``output`` ("-" for stdout); returns its summary."""
    check_output(output, session.paths, force)
    places = placements(session, alignment)
    counts = {"in": 0, "out": 0, "added": 0, "filtered": 0, "dropped": 0}

    def summary():
        return build_summary(session, alignment, places, counts)

    header = {"schemaVersion": 1, "displayTimeUnit": "ms",
              "baseTimeNanoseconds": next(iter(places.values())).out_base_ns}
    # each rank is transformed and encoded by the session's engine into its own shard
    jobs = [(session.source(i.rank), places[i.rank]) for i in session.infos]
    write_sharded(session.engine or LocalEngine(1), rank_events, "chrome", jobs, output, header, summary, counts)
    return summary()


def rank_events(trace, place):
    """(events, counts) of one rank in the merged trace; runs in the engine's workers."""
    events, added = transform(trace, place)
    return events, {"in": len(trace), "added": added, "out": len(events)}


def build_summary(session, alignment, places, counts):
    return {
        "version": tracemerge.__version__,
        "inputs": [
            {"path": i.path, "rank": i.rank, "rank_source": i.rank_source, "worker_name": i.worker_name,
             "hostname": i.hostname, "events": i.events, "truncated": i.truncated, "warnings": i.warnings}
            for i in session.infos
        ],
        "pids": {str(i.rank): {str(p): places[i.rank].pid_base + code for code, p in enumerate(i.pids)}
                 for i in session.infos},
        "reference": alignment.reference,
        "align": alignment.method,
        "alignment": [alignment.clocks[r].as_dict() for r in session.ranks],
        "events": dict(counts),
    }
