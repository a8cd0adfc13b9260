"""The ``tracemerge`` command: a thin click layer over the library API."""

import os
import sys

import click

import tracemerge
from tracemerge.clocks.methods import METHODS
from tracemerge.clocks.text import causality_line, clock_notes, offsets_json, offsets_table
from tracemerge.merge.combine import combine as combine_session
from tracemerge.merge.executors import LocalEngine, make_engine
from tracemerge.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_USAGE, TracemergeError
from tracemerge.report.render.htmlpage import render_html
from tracemerge.report import model as reports
from tracemerge.report.render import FORMATS as REPORT_FORMATS
from tracemerge.report.render import render as render_report
from tracemerge.report.write import combine_report_path, write_combine_report, write_text
from tracemerge.merge.selection import Selection, parse_ranks, parse_window, size_warning
from tracemerge.serve import DEFAULT_PORT, serve
from tracemerge.session import Session


class Group(click.Group):
    """Turns every failure into one line on stderr and its documented exit code (docs/errors.md);
    TRACEMERGE_DEBUG=1 adds the traceback of an internal error."""

    def make_context(self, info_name, args, parent=None, **extra):
        # errors in the top-level options, before any subcommand runs
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            usage_error(e, info_name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            usage_error(e, ctx.command_path)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except TracemergeError as e:
            fail(ctx, str(e), e.exit_code)
        except MemoryError:
            fail(ctx, "out of memory", EXIT_INPUT)
        except KeyboardInterrupt:
            fail(ctx, "interrupted; no output was written", EXIT_INTERRUPTED)
        except BrokenPipeError:
            # the reader of stdout went away: nothing more can be written there
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            fail(ctx, "the output pipe was closed before everything was written", EXIT_OUTPUT)
        except OSError as e:
            # reading inputs raises TraceError, so a bare OSError comes from writing
            fail(ctx, f"{e.filename + ': ' if e.filename else ''}cannot write: {e.strerror or e}", EXIT_OUTPUT)
        except Exception as e:
            if os.environ.get("TRACEMERGE_DEBUG"):
                raise
            fail(ctx, f"internal error ({type(e).__name__}: {e}); this is a bug, please report it with "
                      "TRACEMERGE_DEBUG=1 set", EXIT_INTERNAL)


# click >= 8.2 signals "no arguments: show the help" as a usage error; older click has no such class
NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def usage_error(e, where):
    """One line like every other failure (click's own takes three), still exit 2."""
    if isinstance(e, NO_ARGS_IS_HELP):  # bare `tracemerge`: click shows the help
        raise e
    where = e.ctx.command_path if e.ctx else where
    click.echo(f"tracemerge: error: {e.format_message()} (see '{where} --help')", err=True)
    raise click.exceptions.Exit(EXIT_USAGE)


def fail(ctx, message, code):
    click.echo(f"tracemerge: error: {message}", err=True)
    ctx.exit(code)


def input_options(fn):
    fn = click.option("--strict", is_flag=True,
                      help="Refuse files of different jobs (job_id, world_size or backend differ) instead of warning.")(fn)
    fn = click.option("--skip-bad", is_flag=True,
                      help="Leave out files that cannot be read and go on with the rest (each is named, with why).")(fn)
    return fn


def open_inputs(files, rank_from, skip_bad, strict, **kw):
    """Session.open, then say on stderr which files were skipped and what looks wrong."""
    session = Session.open(files, rank_from, skip_bad=skip_bad, strict=strict, **kw)
    for path, problem in session.skipped:
        click.echo(f"tracemerge: warning: skipped {path}: {problem}", err=True)
    for w in session.warnings:
        click.echo(f"tracemerge: warning: {w}", err=True)
    return session


def parse_offsets(ctx, param, values):
    offsets = {}
    for v in values:
        rank, sep, ns = v.partition("=")
        try:
            offsets[int(rank)] = int(ns)
        except ValueError:
            raise click.BadParameter(f"{v!r} is not RANK=NS (e.g. 1=-250000)") from None
        if not sep:
            raise click.BadParameter(f"{v!r} is not RANK=NS (e.g. 1=-250000)")
    return offsets


files_argument = click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
rank_from_option = click.option(
    "--rank-from", type=click.Choice(["auto", "order"]), default="auto", show_default=True,
    help="auto: the rank file's metadata, Kineto distributedInfo.rank, then the file name; "
         "order: number the files 0, 1, … in the order given.")


def _parsed(parse):
    def callback(ctx, param, value):
        try:
            return None if value is None else parse(value)
        except TracemergeError as e:
            raise click.BadParameter(str(e)) from None
    return callback


def selection_options(fn):
    fn = click.option("--drop-category", "drop_categories", multiple=True, metavar="CAT",
                      help="Leave out events of this category (e.g. python_function). Repeatable.")(fn)
    fn = click.option("--min-duration", type=click.FloatRange(min=0), default=None, metavar="US",
                      help="Leave out complete events shorter than US microseconds.")(fn)
    fn = click.option("--window", callback=_parsed(parse_window), default=None, metavar="START:END",
                      help="Keep events overlapping START..END ms after the first aligned event "
                           "(either side may be empty).")(fn)
    fn = click.option("--ranks", callback=_parsed(parse_ranks), default=None, metavar="LIST",
                      help="Keep only these ranks, e.g. 0-3,7.")(fn)
    fn = click.option("--format", "fmt", type=click.Choice(["json", "perfetto"]), default=None,
                      help="Output format (default: perfetto for .pftrace names, else Chrome JSON).")(fn)
    return fn


def engine_options(fn):
    fn = click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
                      help="Dask scheduler to run on (with --engine dask; default: a LocalCluster).")(fn)
    fn = click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
                      help="Worker processes for per-rank work (default: all cores).")(fn)
    fn = click.option("--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
                      help="Where per-rank work runs: local processes, or Dask workers.")(fn)
    return fn


def align_options(fn):
    fn = click.option("--offset", "offsets", multiple=True, callback=parse_offsets, metavar="RANK=NS",
                      help="Force a known clock offset for a rank (its clock minus the reference's, ns). Repeatable.")(fn)
    fn = click.option("--reference", type=int, default=None, metavar="RANK",
                      help="Rank whose clock the others are aligned to (default: the lowest).")(fn)
    fn = click.option("--align", "method", type=click.Choice(list(METHODS)), default="auto", show_default=True,
                      help="Clock alignment: none = timestamps as written; wall = each file's wall clock; "
                           "start = profiler starts coincide; rpc = NTP-style offsets and drift from matched "
                           "RPCs; collective = from matched collectives; auto = every exchange the data has, "
                           "per rank, wall clock for ranks with none (see docs/alignment.md).")(fn)
    return fn


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(tracemerge.__version__, prog_name="tracemerge")
def main():
    """Merge the per-rank profiler traces of a distributed PyTorch job into one aligned timeline.

    \b
    Examples:
      tracemerge combine samples/rpc_profiling/rank*.json.gz -o trace.json
      tracemerge info rank*.json.gz
    """


@main.command()
@files_argument
@click.option("-o", "--output", required=True, metavar="PATH",
              help="Merged trace: .json, .json.gz (gzip), .json.zst (zstd), .pftrace (Perfetto protobuf; "
                   "also .gz, .zst), or - for stdout.")
@align_options
@rank_from_option
@click.option("--force", is_flag=True, help="Overwrite the output if it exists.")
@input_options
@click.option("--enforce-causality", is_flag=True,
              help="Remove the causality violations left after alignment with the smallest local clock "
                   "correction (controlled logical clock) and report the time moved.")
@selection_options
@engine_options
@click.option("--report", "report_path", is_flag=False, flag_value="", default=None, metavar="[PATH]",
              help="Also write the report of all inputs (see `tracemerge report`) to PATH, or beside the "
                   "output as <output>.report.txt; .json/.csv/.md pick the format.")
def combine(files, output, method, reference, offsets, rank_from, force, enforce_causality, fmt, ranks, window,
            min_duration, drop_categories, engine, jobs, scheduler, report_path, skip_bad, strict):
    """Merge FILES (rank files, Kineto/Chrome JSON, .json.gz, .json.zst) into one Chrome trace or Perfetto protobuf.

    Every rank becomes its own process group, named "rank N · worker · host", with pids,
    flow and correlation ids made unique per rank. Every input event is kept exactly once
    unless --ranks/--window/--min-duration/--drop-category leave it out (counted in the
    summary); RPC spans get flow arrows caller -> callee -> caller.

    \b
    Examples:
      tracemerge combine rank*.json.gz -o trace.json
      tracemerge combine w0.json w1.json --rank-from order --align start -o - | gzip > t.json.gz
      tracemerge combine rank*.json.gz -o trace.pftrace --window 100:350 --drop-category python_function
    """
    if report_path is not None:
        report_path = combine_report_path(output, report_path, files, force)
    if scheduler:
        # workers on other machines resolve relative paths against their own directory
        files = [os.path.abspath(f) for f in files]
    runner = make_engine(engine, jobs, scheduler)
    try:
        # the merge reads every rank anyway: rank files are described from their heads
        session = open_inputs(files, rank_from, skip_bad, strict, engine=runner, head=True)
        alignment = session.align(method, reference, offsets, enforce_causality)
        selection = Selection(ranks=ranks, window_ms=window, min_duration_us=min_duration,
                              drop_categories=frozenset(drop_categories))
        summary = combine_session(session, alignment, output, force, fmt, selection)
        if report_path is not None:
            report_path = write_combine_report(session, alignment, output, report_path, files)
    finally:
        runner.close()
    ev = summary["events"]
    click.echo(f"tracemerge: {len(session.infos)} ranks, {ev['in']} events in, {ev['out']} out "
               f"({ev['added']} added, {ev['filtered']} filtered{_by(ev.get('filtered_by'))}, "
               f"{ev['dropped']} dropped{_by(ev.get('dropped_by'))}), "
               f"aligned by {alignment.method} to rank {alignment.reference} -> {output}"
               + (f", report -> {report_path}" if report_path is not None else ""), err=True)
    click.echo(f"tracemerge: {causality_line(alignment.causality)}", err=True)
    for line in clock_notes(alignment):
        click.echo(f"tracemerge: warning: {line}", err=True)
    for info in session.infos:
        for w in info.warnings:
            click.echo(f"tracemerge: warning: {info.path}: {w}", err=True)
    unaccounted = ev["in"] + ev["added"] - ev["out"] - ev["filtered"] - ev["dropped"]
    if unaccounted:
        click.echo(f"tracemerge: warning: {unaccounted} events are not accounted for (in + added != out + "
                   "filtered + dropped); this is a bug, please report it", err=True)
    for w in size_warning(output, summary):
        click.echo(f"tracemerge: warning: {w}", err=True)


@main.command()
@files_argument
@align_options
@rank_from_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help='table for reading; json: {"reference": R, "ranks": [{rank, method, offset_ns, drift_ppm, '
                   'anchor_ns, error_bound_ns, samples, peers}, ...]}.')
def offsets(files, method, reference, offsets, rank_from, fmt):
    """Estimate each rank's clock against the reference rank, with error bounds.

    Per rank: the method that produced it, offset_ns (its clock minus the reference's at
    anchor_ns), drift_ppm, error_bound_ns (the true error never exceeds it; "-" when
    unknown), samples, and the ranks it was measured against (peers).

    \b
    Examples:
      tracemerge offsets samples/rpc_profiling/rank*.json.gz
      tracemerge offsets rank*.json.gz --align rpc --reference 1 --format json
    """
    # only the clocks are needed: rank files' heads, other files' light scans, in parallel
    session = Session.open(files, rank_from, engine=LocalEngine(), head=True)
    alignment = session.align(method, reference, offsets)
    click.echo(offsets_json(alignment) if fmt == "json" else offsets_table(alignment))
    for line in clock_notes(alignment):
        click.echo(f"tracemerge: warning: {line}", err=True)
    click.echo(f"tracemerge: {causality_line(alignment.causality)}", err=True)


def _by(reasons):
    return f" ({', '.join(f'{k}: {v}' for k, v in reasons.items())})" if reasons else ""


@main.command("open")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1 (the Perfetto UI only fetches from 9001; 0 picks a free one).")
@click.option("--browser", is_flag=True, help="Open the link in the default web browser.")
def open_trace(trace, port, browser):
    """Serve TRACE once to ui.perfetto.dev and print the link that opens it.

    Exits after the UI fetched the file, or on Ctrl-C.
    """
    def ready(link):
        click.echo(link)
        sys.stdout.flush()

    fetched = serve(trace, port, browser, on_ready=ready, log=lambda line: click.echo(f"tracemerge: {line}", err=True))
    click.echo(f"tracemerge: {'sent' if fetched else 'stopped before sending'} {trace}", err=True)


@main.command()
@files_argument
@rank_from_option
@input_options
def info(files, rank_from, skip_bad, strict):
    """Describe each trace file: rank, worker, events, time span, threads, metadata, warnings.

    A merged trace written by `tracemerge combine` is described by its summary: its ranks,
    where they came from, their alignment.
    """
    merged = {}
    for path in files:
        trace = reports.read_merged(path)
        if trace is not None:
            merged[path] = merged_lines(path, trace)
    rest = [f for f in files if f not in merged]
    session = open_inputs(rest, rank_from, skip_bad, strict, engine=LocalEngine()) if rest else None  # light scans
    described = {i.path: i for i in session.infos} if session else {}
    for path in files:
        if path in merged:
            click.echo("\n".join(merged[path]))
            continue
        i = described.get(path)
        if i is None:
            continue  # left out by --skip-bad (named on stderr)
        span_ms = (i.last_ns - i.first_ns) / 1e6
        meta = []
        if i.has_block:
            meta.append(f"tracemerge ({len(i.rpcs)} rpc records, {len(i.collectives)} collective records)")
        if i.base_ns is not None:
            meta.append("baseTimeNanoseconds")
        if i.rank_source == "distributedInfo":
            meta.append("distributedInfo")
        click.echo(f"{i.path}\n  rank {i.rank} (from {i.rank_source}) · worker {i.worker_name} · host {i.hostname}\n"
                   f"  {i.events} events · {i.threads} threads · span {span_ms:.3f} ms · profiler start from {i.start_source}\n"
                   f"  metadata: {', '.join(meta) or 'none'}")
        for w in i.warnings:
            click.echo(f"  warning: {w}")
    sys.stdout.flush()


def merged_lines(path, trace):
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
                     f"{i.get('events')} events · from {i.get('path')} · clock {c.get('method', '?')} offset "
                     f"{c.get('offset_ns', 0) / 1e3:.1f} µs" + (f" ± {bound / 1e3:.1f} µs" if bound is not None else ""))
    records = block.get("records")
    if records is not None:
        lines.append(f"  records: {sum(len(r.get('rpcs') or []) for r in records)} rpc, "
                     f"{sum(len(r.get('collectives') or []) for r in records)} collective")
    lines += [f"  warning: {w}" for w in block.get("warnings") or []]
    return lines


@main.command()
@files_argument
@click.option("--group-by", type=click.Choice(reports.GROUP_BY), default="name", show_default=True,
              help="name: one row per op name over all ranks (Node ID -1 when several); name,rank: one row per rank.")
@click.option("--sort-by", type=click.Choice(reports.SORT_KEYS), default="cpu_time_total", show_default=True,
              help="Key-averages order: times and counts descending, key ascending.")
@click.option("--row-limit", type=click.IntRange(min=0), default=100, show_default=True, help="Key-average rows shown; 0 for all.")
@click.option("--format", "fmt", type=click.Choice(REPORT_FORMATS), default="table", show_default=True)
@click.option("-o", "--output", default="-", metavar="PATH", help="Write the report here (default: stdout).")
@click.option("--remote-ops", is_flag=True,
              help="Name ops run on a callee by their RPC: rpc_async#aten::mul(worker0 -> worker1)#remote_op: mul.")
@click.option("--html", "html_path", default=None, metavar="PATH", help="Also write a self-contained HTML page with plots.")
@align_options
@rank_from_option
@input_options
def report(files, group_by, sort_by, row_limit, fmt, output, remote_ops, html_path, method, reference, offsets,
           rank_from, skip_bad, strict):
    """Key averages (torch's table with a Node ID), RPC latency breakdown, callee saturation, collectives.

    FILES are rank files, Kineto traces, or one merged trace written by `tracemerge combine`.

    \b
    Examples:
      tracemerge report rank*.json.gz --group-by name,rank --sort-by self_cpu_time_total
      tracemerge report rank*.json.gz --format json -o report.json --html report.html
    """
    rep = reports.build_report(list(files), lambda paths: open_inputs(paths, rank_from, skip_bad, strict),
                               (method, reference, offsets), group_by, remote_ops)
    write_text(output, render_report(rep, fmt, sort_by, row_limit), files)
    if html_path:
        write_text(html_path, render_html(rep, sort_by, row_limit), files)
    for note in rep.notes:
        if "thread-limited" in note:
            click.echo(f"tracemerge: hint: {note}", err=True)
