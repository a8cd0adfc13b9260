"""The lines the commands print about what they did: ``combine``'s and ``export``'s summary,
``offsets``' notes, ``info``'s descriptions, the warnings of a job's files.

Plain functions from the job, its alignment and a command's summary to lines of text; the
click layer (cli.py) prints them (on stderr, silenced by ``--quiet``; ``info``'s on stdout).
cli.py imports this module when a command first prints, not at start-up (it loads the
clock text and the compiled core's status).
"""

import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from tracemerge import formats, native
from tracemerge.clocks.text import causality_line, clock_notes
from tracemerge.inputs.rankinfo import ASSUMED_RANK

PREFIX = "tracemerge: "


def by(reasons: "Optional[Dict[str, int]]") -> str:
    """`` (window: 3, ranks: 2)``: why events were filtered or dropped, or nothing."""
    return f" ({', '.join(f'{k}: {v}' for k, v in reasons.items())})" if reasons else ""


def core_line(cores: "Sequence[Tuple[str, str]]", unit: str = "ranks") -> str:
    """Which core read the inputs: "core: native (8 ranks)", with each rank the Python path
    read instead and why (the output is the same bytes either way); ``unit``: "files" when
    some rank is several cycle files, each read on its own."""
    n_native = sum(core == "native" for _, core in cores)
    if not n_native and native.active() != "native":  # no compiled core: one reason for all
        return f"core: python ({len(cores)} {unit}; {native.describe().split('(', 1)[-1].rstrip(')')})"
    fallback = [(path, core.partition(": ")[2] or "not taken") for path, core in cores if core != "native"]
    return f"core: native ({n_native} of {len(cores)} {unit})" + "".join(
        f"; {path} read by the Python path: {why}" for path, why in fallback)


def clock_warnings(job: Any, alignment: Any) -> List[str]:
    """The clock notes of ``alignment`` (:func:`~tracemerge.clocks.text.clock_notes`), once per
    cause: a rank the job's warnings already name as linked to no other rank (why, and what
    would link it) is not said again as a rank no exchange links to the reference."""
    unlinked = {info.rank for info in job.infos
                if any(w.startswith(f"rank {info.rank} (") and "is linked to no other rank" in w for w in job.warnings)}
    return [line for line, rank in zip(clock_notes(alignment), sorted(r for r, c in alignment.clocks.items() if c.note))
            if not (rank in unlinked and "no exchange links" in line)]


def file_warnings(infos: Iterable[Any]) -> List[str]:
    """Each file's own warnings (a truncated file's salvage among them), named by its path."""
    return [f"{PREFIX}warning: {info.path}: {w}" for info in infos for w in info.warnings]


def job_notes(job: Any) -> List[str]:
    """What opening the job found: the files skipped and why, the job-wide warnings, a lone
    file whose rank was assumed."""
    lines = [f"{PREFIX}warning: skipped {path}: {problem}" for path, problem in job.skipped]
    lines += [f"{PREFIX}warning: {w}" for w in job.warnings]
    lines += [f"{PREFIX}note: {info.path}: no rank in the file (no distributedInfo.rank, none in its name): "
              "the only input, taken as rank 0" for info in job.infos if info.rank_source == ASSUMED_RANK]
    return lines


def combine_lines(job: Any, alignment: Any, written: Any, output: str, report_path: Optional[str]) -> List[str]:
    """``combine``'s summary: events in and out and why, the RPCs' sides, causality, the core,
    the clock and file warnings, and what the output format warns of."""
    summary = written.summary
    ev = summary["events"]
    lines = [f"{PREFIX}{len(job.infos)} ranks, {ev['in']} events in, {ev['out']} out "
             f"({ev['added']} added, {ev['filtered']} filtered{by(ev.get('filtered_by'))}, "
             f"{ev['dropped']} dropped{by(ev.get('dropped_by'))}), "
             f"aligned by {alignment.method} to rank {alignment.reference} -> {output}"
             + (f", report -> {report_path}" if report_path is not None else "")]
    sides = summary["rpc_sides"]
    if sides["calls"]:
        lines.append(rpcs_line(sides))
        missing = sides.get("spans_missing") or {}
        if sum(missing.values()):
            lines.append(
                f"{PREFIX}warning: {sides['drawn']} RPCs are drawn with both spans and their arrows; "
                f"{missing['caller']} caller and {missing['callee']} callee spans of the others are not in the "
                "output (their file's events lack them — a cut file? — or --ranks/--window/--min-duration/"
                "--drop-category left them out), so those calls have no arrows")
        lines += [f"{PREFIX}note: {journal_only_line(rank, j)}" for rank, j in (sides.get("journal_only") or {}).items()]
    lines.append(f"{PREFIX}{causality_line(alignment.causality, alignment.method)}")
    lines.append(f"{PREFIX}{core_line(written.cores, 'files' if any(i.parts for i in job.infos) else 'ranks')}")
    lines += clock_and_file_warnings(job, alignment)
    unaccounted = ev["in"] + ev["added"] - ev["out"] - ev["filtered"] - ev["dropped"]
    if unaccounted:
        lines.append(f"{PREFIX}warning: {unaccounted} events are not accounted for (in + added != out + "
                     "filtered + dropped); this is a bug, please report it")
    lines += [f"{PREFIX}warning: {w}" for w in formats.FORMATS[summary["format"]].warnings(output, summary)]
    return lines


def rpcs_line(sides: Dict[str, Any]) -> str:
    """How many RPCs the job's records join, and with which sides."""
    return (f"{PREFIX}{sides['calls']} RPCs: {sides['both_sides']} with both sides, "
            f"{sides['caller_only']} caller only, {sides['callee_only']} callee only")


def clock_and_file_warnings(job: Any, alignment: Any) -> List[str]:
    """What the clock model and each file warn of."""
    return [f"{PREFIX}warning: {line}" for line in clock_warnings(job, alignment)] + file_warnings(job.infos)


def align_lines(job: Any, alignment: Any, summary: Dict[str, Any]) -> List[str]:
    """``align``'s summary, as ``combine``'s: ranks and events, the outputs, the RPCs' sides,
    the ranks left without a file, causality, the clock and file warnings."""
    ev, outputs = summary["events"], summary["outputs"]
    names = ", ".join(os.path.basename(o["path"]) for o in outputs)
    lines = [f"{PREFIX}{len(outputs)} ranks, {ev['in']} events in, {ev['out']} out ({ev['moved']} moved), "
             f"aligned by {alignment.method} to rank {alignment.reference} -> {summary['output']} ({names})"]
    if summary["rpc_sides"]["calls"]:
        lines.append(rpcs_line(summary["rpc_sides"]))
    lines += [f"{PREFIX}note: rank {r} was read from its journal alone (it died before writing its rank file, or its "
              "file was not given): it has no events, so no file is written for it" for r in summary["journal_only"]]
    lines.append(f"{PREFIX}{causality_line(alignment.causality, alignment.method)}")
    lines += clock_and_file_warnings(job, alignment)
    if summary["others_in_output"]:
        others = summary["others_in_output"]
        lines.append(f"{PREFIX}note: {summary['output']} holds {len(others)} other trace file"
                     f"{'' if len(others) == 1 else 's'} ({', '.join(others[:3])}{', …' if len(others) > 3 else ''}), "
                     "which HTA's trace_dir would read as ranks too")
    return lines


def journal_only_line(rank: str, j: Dict[str, Any]) -> str:
    """What a merged trace lacks of a rank read from its journal alone (``rpc_sides.journal_only``),
    said once: expected of a rank that died before writing its file, so no missing-span warning."""
    n, unwritten = j["in_flight_to"], j["spans_never_written"]
    how = "died" if j["died"] else "left only its journal (its rank file was not given)"
    sides = " and ".join(f"{k} call{'' if k == 1 else 's'} it {what}" for k, what in
                         ((unwritten["callee"], "served"), (unwritten["caller"], "made")) if k)
    return (f"rank {rank} {how} (journal only): {n} call{'' if n == 1 else 's'} in flight to it, "
            "its spans were never written" + (f" (no arrows for the {sides})" if sides else ""))


def export_lines(job: Any, summary: Dict[str, Any], output: str) -> List[str]:
    """``export``'s summary: events in, rows written, the alignment, clock and file warnings."""
    ev = summary["events"]
    lines = [f"{PREFIX}{len(job.infos)} ranks, {ev['in']} events in, {ev['rows']} rows ({ev['filtered']} filtered), "
             f"aligned by {summary['align']} to rank {summary['reference']} -> {output}"]
    return lines + clock_and_file_warnings(job, job.clock_model())


def offsets_notes(job: Any, alignment: Any) -> List[str]:
    """What ``offsets`` says after its table: clock warnings, causality, the files read from
    their heads only, the warnings of the files read whole."""
    lines = [f"{PREFIX}warning: {line}" for line in clock_warnings(job, alignment)]
    lines.append(f"{PREFIX}{causality_line(alignment.causality, alignment.method)}")
    heads = [i.path for i in job.infos if i.partial]
    if heads:
        lines.append(f"{PREFIX}note: {len(heads)} of {len(job.infos)} files were read from their heads "
                     "(the clock records); their events were not read, so a bad event in them is not found here "
                     "(`tracemerge info` reads them)")
    return lines + file_warnings(i for i in job.infos if not i.partial)


def rank_lines(i: Any) -> List[str]:
    """``info``'s description of one rank (``RankInfo``)."""
    span_ms = (i.last_ns - i.first_ns) / 1e6
    meta = []
    if i.has_block:
        meta.append(f"tracemerge ({len(i.rpcs)} rpc records, {len(i.collectives)} collective records)")
    if i.base_ns is not None:
        meta.append("baseTimeNanoseconds")
    if i.rank_source == "distributedInfo":
        meta.append("distributedInfo")
    lines = [f"{i.path}",
             f"  rank {i.rank} (from {i.rank_source}) · worker {i.worker_name} · host {i.hostname}",
             f"  {i.events} events · {i.threads} threads · span {span_ms:.3f} ms · profiler start from {i.start_source}",
             f"  metadata: {', '.join(meta) or 'none'}"]
    if i.parts:
        lines.append(f"  {len(i.parts)} schedule cycles, one process: "
                     + ", ".join(f"cycle {p.cycle} {p.path} ({p.events} events)" for p in i.parts))
    return lines + [f"  warning: {w}" for w in i.warnings]


def _sources(entry: Dict[str, Any]) -> Any:
    """The files a merged trace's input entry came from: its path, or each of its cycle files."""
    cycles = entry.get("cycles") or []
    if not cycles:
        return entry.get("path")
    return f"{len(cycles)} cycle files: " + ", ".join(str(c.get("path")) for c in cycles)


def merged_lines(path: str, trace: Any) -> List[str]:
    """``info``'s description of a merged trace, from its summary."""
    block = trace.tracemerge
    inputs = block.get("inputs") or []
    clocks = {c.get("rank"): c for c in block.get("alignment") or []}
    span = trace.time_span()
    span_ms = (span[1] - span[0]) / 1e6 if span else 0.0
    events = block.get("events") or {}
    lines = [f"{path}",
             f"  merged trace (tracemerge {block.get('version', '?')}) of {len(inputs)} ranks · aligned by "
             f"{block.get('align', '?')} to rank {block.get('reference', '?')} · {events.get('out', len(trace))} events "
             f"· span {span_ms:.3f} ms"]
    for i in inputs:
        c = clocks.get(i.get("rank"), {})
        bound = c.get("error_bound_ns")
        lines.append(f"  rank {i.get('rank')} · worker {i.get('worker_name')} · host {i.get('hostname')} · "
                     f"{i.get('events')} events · from {_sources(i)} · clock {c.get('method', '?')} offset "
                     f"{c.get('offset_ns', 0) / 1e3:.1f} µs" + (f" ± {bound / 1e3:.1f} µs" if bound is not None else ""))
    records = block.get("records")
    if records is not None:
        lines.append(f"  records: {sum(len(r.get('rpcs') or []) for r in records)} rpc, "
                     f"{sum(len(r.get('collectives') or []) for r in records)} collective")
    lines += [f"  warning: {w}" for w in block.get("warnings") or []]
    return lines
