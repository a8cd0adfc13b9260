"""Combine: every rank into one trace on the reference clock, one process group per rank."""

import functools
import itertools

import numpy as np

import tracemerge
from tracemerge.formats.perfetto.encoder import output_format, rank_packets
from tracemerge.inputs.rankinfo import learn
from tracemerge.merge import selection as select
from tracemerge.merge.assembly import write_merged
from tracemerge.merge.executors import LocalEngine
from tracemerge.merge.flows import RpcFlows
from tracemerge.merge.placement import (
    Placement,
    aligned_ns,
    rank_label,
    transform_chunks,
)
from tracemerge.nesting import lanes
from tracemerge.output import check_output

SECOND_NS = 1_000_000_000


def aligned_start(session, alignment):
    """The first event of the job on the reference clock."""
    timed = [i for i in session.infos if i.timed] or session.infos
    return min(alignment.clocks[i.rank].to_reference(i.first_ns) for i in timed)


def placements(session, alignment):
    """{rank: Placement}: pid blocks ordered by rank, ts 0 at the whole second before the first event."""
    stride = 1000 * (1 + max(len(i.pids) for i in session.infos) // 1000)
    first = aligned_start(session, alignment)
    out_base = first - first % SECOND_NS
    return {
        info.rank: Placement(rank=info.rank, label=rank_label(info.rank, info.worker_name, info.hostname),
                             pid_base=(n + 1) * stride, clock=alignment.clocks[info.rank], out_base_ns=out_base)
        for n, info in enumerate(session.infos)
    }


def combine(session, alignment, output, force=False, fmt=None, selection=None):
    """Write the merged trace to ``output`` ("-" for stdout); returns its summary.

    ``fmt`` is "json" or "perfetto" (default: perfetto for .pftrace names); ``selection``
    (:class:`~tracemerge.merge.selection.Selection`) keeps some ranks, a window, longer events.

    Ranks described from their heads alone (``RankInfo.partial``) are placed by their
    profiling windows; their workers report the facts of their events, and in the rare
    case that those move the placement (events before the profiler's second, a thousand
    pids in a rank) the ranks are written again, so the output never depends on how the
    inputs were described.
    """
    check_output(output, session.inputs, force)
    fmt = output_format(output, fmt)
    selection = selection or select.Selection()
    select.check_ranks(selection, session.ranks)
    kept = [i for i in session.infos if selection.keeps_rank(i.rank)]
    # a window is measured from the job's first event, and left-out ranks are counted
    session.complete([i.rank for i in session.infos if selection.window_ms or i not in kept])
    rpc = RpcFlows.plan(session.infos, {i.rank for i in kept})
    while True:
        try:
            return _write(session, alignment, output, fmt, selection, kept, rpc)
        except _Moved:
            continue


class _Moved(Exception):
    """What the workers learned about their ranks' events changed the placement."""


def _write(session, alignment, output, fmt, selection, kept, rpc):
    places = placements(session, alignment)
    counts = {"in": 0, "out": 0, "added": 0, "filtered": 0, "dropped": 0}
    for info in session.infos:
        if info not in kept:
            counts["in"] += info.events
            counts["filtered"] += info.events
            counts["filtered:ranks"] = counts.get("filtered:ranks", 0) + info.events
    start = aligned_start(session, alignment) - next(iter(places.values())).out_base_ns
    rank_fn = functools.partial(rank_output, fmt=fmt, selection=selection, window=selection.window_ns(start), rpc=rpc)

    def footer(results):
        for info, r in zip(kept, results):
            if r["facts"] is not None:
                learn(info, r["facts"])
        if placements(session, alignment) != places:
            raise _Moved()
        for r in results:
            for k, v in r["counts"].items():
                counts[k] = counts.get(k, 0) + v
        return {**build_summary(session, alignment, places, counts), "format": fmt,
                "selection": select.describe(selection)}

    header = {"schemaVersion": 1, "displayTimeUnit": "ms",
              "baseTimeNanoseconds": next(iter(places.values())).out_base_ns}
    # each rank is transformed and encoded by the session's engine, into its part of the output
    jobs = [(session.source(i.rank), places[i.rank]) for i in kept]
    return write_merged(session.engine or LocalEngine(1), rank_fn, "perfetto" if fmt == "perfetto" else "chrome",
                        jobs, output, header, footer, facts=any(i.partial for i in kept))


def rank_output(trace, place, fmt="json", selection=None, window=(None, None), rpc=None, consume=False):
    """(an iterable of event lists, or protobuf bytes; counts) of one rank; runs in the
    engine's workers. ``consume``: the caller will not use ``trace`` again, so the events
    are freed as they are encoded."""
    n_in = len(trace)
    if fmt == "perfetto" and consume:
        trace.drop_events()  # the protobuf encoder reads the columns
    trace, counts = select.apply(trace, place, selection, window)
    found, flow_counts = rpc.find(trace, place.rank) if rpc else ({}, {})
    counts.update(flow_counts, **{"in": n_in})
    if fmt == "perfetto":
        data, proto = rank_packets(trace, place, rpc.proto_flows(found) if rpc else None)
        return data, {**counts, **proto}
    # lists of events, made lazily: the worker encodes and frees one list at a time
    times = aligned_ns(trace, place.clock, place.out_base_ns)
    # spans Perfetto's JSON importer could not show on their thread go to lanes of it
    moved = lanes(trace, times[0], times[0] + np.maximum(times[1], 0))
    if moved:
        counts["lanes_spans"] = len(moved)
        counts["lanes_lanes"] = len({(int(trace.pid[i]), int(trace.tid[i]), k) for i, k in moved.items()})
    chunks, made = transform_chunks(trace, place, times, release="events" if consume else "args", lanes=moved)
    if found:
        flow_events = rpc.json_events(found, trace, place, *times, lanes=moved)
        counts["rpc_flow_events"] = len(flow_events)
        made += flow_events
    return itertools.chain(chunks, [made]), {**counts, "added": len(made), "out": len(trace) + len(made)}


def build_summary(session, alignment, places, counts):
    return {
        "version": tracemerge.__version__,
        "inputs": [
            {"path": i.path, "rank": i.rank, "rank_source": i.rank_source, "worker_name": i.worker_name,
             "hostname": i.hostname, "events": i.events, "truncated": i.truncated, "warnings": i.warnings}
            for i in session.infos
        ],
        "skipped": [{"path": path, "problem": problem} for path, problem in session.skipped],
        "warnings": session.warnings,
        "pids": {str(i.rank): {str(p): places[i.rank].pid_base + code for code, p in enumerate(i.pids)}
                 for i in session.infos},
        "reference": alignment.reference,
        "align": alignment.method,
        "alignment": [alignment.clocks[r].as_dict() for r in session.ranks],
        "causality": alignment.causality,
        # what `tracemerge report` needs of the inputs to report on the merged trace alone
        "records": [{"rank": i.rank, "has_block": i.has_block, "rpcs": i.rpcs, "collectives": i.collectives}
                    for i in session.infos],
        "events": {**{k: v for k, v in counts.items() if ":" not in k and not k.startswith(DETAIL)},
                   **reasons(counts)},
        **{group: detail for group, prefix in DETAIL_GROUPS.items()
           if (detail := {k[len(prefix):]: v for k, v in counts.items() if k.startswith(prefix)})},
    }


# per-rank counts beyond in/out/added/filtered/dropped, reported in their own summary groups
DETAIL_GROUPS = {"rpc_flows": "rpc_", "perfetto": "perfetto_", "lanes": "lanes_"}
DETAIL = tuple(DETAIL_GROUPS.values())


def reasons(counts):
    """{"filtered_by": {reason: n}, "dropped_by": {reason: n}} from "filtered:<reason>" keys."""
    out = {"filtered_by": {}, "dropped_by": {}}
    for key, n in counts.items():
        group, sep, reason = key.partition(":")
        if sep:
            out[f"{group}_by"][reason] = n
    return out
