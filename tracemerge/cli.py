"""The ``tracemerge`` command: a thin click layer over the library API."""

import contextlib
import math
import os
import signal
import sys
import threading
import typing
from typing import TYPE_CHECKING

import click

import tracemerge
from tracemerge.errors import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    EXIT_TERMINATED,
    EXIT_USAGE,
    Terminated,
    TracemergeError,
)
from tracemerge.files import names

# What the commands use is imported when a command first uses it (tracemerge.runtime.deferred):
# `tracemerge --version` and `--help` load click and these few modules, not numpy, msgspec,
# orjson, the readers, the writers, the analyses or the HTTP server (docs/performance.md).
from tracemerge.place import ALIGN_NAME, OVERVIEW_US  # constants of the package's light __init__
from tracemerge.runtime import corestatus
from tracemerge.runtime.deferred import Deferred, RegistryChoice, RegistryOption

if TYPE_CHECKING:
    from tracemerge.clocks import METHODS
    from tracemerge.clocks.text import offsets_json, offsets_table
    from tracemerge.commands import serve as serving
    from tracemerge.commands import summary_lines as lines
    from tracemerge.commands.compose import write as write_trace
    from tracemerge.commands.serve import serve
    from tracemerge.files.output import check_output
    from tracemerge.formats import FORMATS as OUTPUT_FORMATS
    from tracemerge.job import AlignRequest, Job, reads
    from tracemerge.merge.per_rank import align as align_ranks
    from tracemerge.merge.per_rank import check_request as check_align_output
    from tracemerge.place.selection import Selection, parse_ranks, parse_window
    from tracemerge.report import GROUP_BY, SORT_KEYS
    from tracemerge.report import build as reports
    from tracemerge.report.diff import diff_reports
    from tracemerge.report.render import FORMATS as REPORT_FORMATS
    from tracemerge.report.render import csv_needs_analysis, csv_sections, render_diff
    from tracemerge.report.render import render as render_report
    from tracemerge.report.write import combine_report_path, write_combine_report, write_text
    from tracemerge.runtime.engine import LocalEngine, make_engine
    from tracemerge.runtime.progress import Progress
else:
    serving = Deferred("tracemerge.commands.serve")
    lines = Deferred("tracemerge.commands.summary_lines")
    METHODS = Deferred("tracemerge.clocks", "METHODS")
    offsets_json = Deferred("tracemerge.clocks.text", "offsets_json")
    offsets_table = Deferred("tracemerge.clocks.text", "offsets_table")
    LocalEngine = Deferred("tracemerge.runtime.engine", "LocalEngine")
    make_engine = Deferred("tracemerge.runtime.engine", "make_engine")
    OUTPUT_FORMATS = Deferred("tracemerge.formats", "FORMATS")
    AlignRequest = Deferred("tracemerge.job", "AlignRequest")
    Job = Deferred("tracemerge.job", "Job")
    reads = Deferred("tracemerge.job.reads")  # the read strategies each command picks for Job.open
    align_ranks = Deferred("tracemerge.merge.per_rank", "align")
    check_align_output = Deferred("tracemerge.merge.per_rank", "check_request")
    write_trace = Deferred("tracemerge.commands.compose", "write")
    check_output = Deferred("tracemerge.files.output", "check_output")
    Selection = Deferred("tracemerge.place.selection", "Selection")
    parse_ranks = Deferred("tracemerge.place.selection", "parse_ranks")
    parse_window = Deferred("tracemerge.place.selection", "parse_window")
    Progress = Deferred("tracemerge.runtime.progress", "Progress")
    GROUP_BY = Deferred("tracemerge.report", "GROUP_BY")
    SORT_KEYS = Deferred("tracemerge.report", "SORT_KEYS")
    reports = Deferred("tracemerge.report.build")
    diff_reports = Deferred("tracemerge.report.diff", "diff_reports")
    REPORT_FORMATS = Deferred("tracemerge.report.render", "FORMATS")
    csv_sections = Deferred("tracemerge.report.render", "csv_sections")
    csv_needs_analysis = Deferred("tracemerge.report.render", "csv_needs_analysis")
    render_report = Deferred("tracemerge.report.render", "render")
    render_diff = Deferred("tracemerge.report.render", "render_diff")
    combine_report_path = Deferred("tracemerge.report.write", "combine_report_path")
    write_combine_report = Deferred("tracemerge.report.write", "write_combine_report")
    write_text = Deferred("tracemerge.report.write", "write_text")
    serve = Deferred("tracemerge.commands.serve", "serve")


def _orjson_whole() -> None:
    """Imports orjson with Ctrl-C and SIGTERM held until it is in (~4 ms). Its module init
    does not check the imports it makes, so one that a signal's exception interrupts crashes
    the process (a segfault; ijl/orjson#310, found by the adversarial sweep). Called where a
    command's work begins (its FILES, its body), not for --help, which needs no orjson."""
    if "orjson" in sys.modules:
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        import orjson  # noqa: F401
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _optional_value_taken(option: click.Option, word: str) -> bool:
    """Whether ``--opt WORD`` gives an optional-value option its value (docs/errors.md,
    "Optional values"): a number option takes the next word only when it reads as a number;
    any other takes its value only as ``--opt=VALUE``, because the next word is then an input
    (``--report rank0.json.gz`` once took that rank file as the report's path and, with
    --force, overwrote it)."""
    if isinstance(option.type, (click.types.FloatParamType, click.types.IntParamType)):
        try:
            float(word)  # nan or inf too: the option's type then refuses it by name (exit 2)
        except ValueError:
            return False
        return True
    return False


def optional_values_bound(command: click.Command, args: "list[str]",
                          after_bare: "dict[str, str] | None" = None) -> "list[str]":
    """``args`` with every bare optional-value option that does not take the next word (see
    :func:`_optional_value_taken`) written ``--opt=<its value when given alone>``, so that
    click never takes an input for its value. The values of other options are skipped as
    click reads them (``-o --report`` names an output), and nothing after ``--`` is an option.
    ``after_bare`` collects each word that followed such an option, by the option's name, for
    the hint an error about that word gets."""
    optional: "dict[str, click.Option]" = {}
    valued: "dict[str, int]" = {}
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        for name in param.opts + param.secondary_opts:
            if param._flag_needs_value:  # is_flag=False with a flag_value: the value may be left out
                optional[name] = param
            elif not param.is_flag and not param.count:
                valued[name] = param.nargs
    out: "list[str]" = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            out.extend(args[i - 1:])
            break
        if word in optional:
            option = optional[word]
            if not (i < len(args) and _optional_value_taken(option, args[i])):
                if after_bare is not None and i < len(args):
                    after_bare[args[i]] = word
                word = f"{word}={option.flag_value}"
        elif word in valued:
            out.extend(args[i - 1:i + valued[word]])
            i += valued[word]
            continue
        elif word[:1] == "-" and word[:2] != "--" and len(word) > 2:
            # a cluster of short options (-qo OUT): a value option's value is the rest of the
            # word, or the next word when it ends the cluster
            letter = next((c for c in word[1:] if f"-{c}" in valued), None)
            if letter is not None and word.index(letter) == len(word) - 1:
                out.extend(args[i - 1:i + 1])
                i += 1
                continue
        out.append(word)
    return out


class Command(click.Command):
    def parse_args(self, ctx: click.Context, args: "list[str]") -> "list[str]":
        after_bare: "dict[str, str]" = {}
        ctx.meta[_AFTER_BARE] = after_bare
        return super().parse_args(ctx, optional_values_bound(self, args, after_bare))

    def invoke(self, ctx: click.Context) -> typing.Any:
        _orjson_whole()
        try:
            return super().invoke(ctx)
        except TracemergeError as e:
            # `--report r.md` made r.md an input: the error about it says how a value is given
            word = next((w for w in ctx.meta.get(_AFTER_BARE, {}) if e.message.startswith(f"{w}: ")), None)
            if word is not None:
                option = ctx.meta[_AFTER_BARE][word]
                e.message += f" (read as an input: {option} takes a value only as {option}={word})"
            raise


_AFTER_BARE = "tracemerge.after_bare_optional"  # ctx.meta key: words that followed a bare optional-value option


class Group(click.Group):
    """Turns every failure into one line on stderr and its documented exit code (docs/errors.md);
    TRACEMERGE_DEBUG=1 adds the traceback of an internal error."""

    command_class = Command  # click >= 8.0: what @main.command() makes

    def make_context(self, info_name: "str | None", args: "list[str]", parent: "click.Context | None" = None,
                     **extra: typing.Any) -> click.Context:
        # errors in the top-level options, before any subcommand runs
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            usage_error(e, info_name)

    def invoke(self, ctx: click.Context) -> typing.Any:
        _one_blas_thread()
        try:
            with _signals_raise():
                return super().invoke(ctx)
        except click.UsageError as e:
            usage_error(e, ctx.command_path)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except TracemergeError as e:
            # an output put in place before another failed (a disk full) stays, and is said; not
            # the one the error is about (another run's, put there while this one worked)
            written = [p for p in _written(ctx) if not e.message.startswith(f"{p}: ")]
            fail(ctx, str(e) + (f" ({', '.join(written)} was written, complete)" if written else ""), e.exit_code)
        except MemoryError:
            fail(ctx, "out of memory", EXIT_INPUT)
        except KeyboardInterrupt:
            _stopped(ctx, "interrupted", EXIT_INTERRUPTED)
        except Terminated:
            _stopped(ctx, "terminated", EXIT_TERMINATED)
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


_OUTPUTS = "tracemerge.outputs"  # ctx.meta key: {output path: what was at it before the command ran}


def _identity(path: str) -> "tuple[int, int, int] | None":
    """What is at ``path`` now (device, inode, change time), None for nothing: an output put
    in place is a new inode there (linked or renamed into place, never written over)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def watch_outputs(paths: "typing.Iterable[str | None]") -> None:
    """Remember what is at each output path (None, "-": none) before the work, so that a
    signal's message can say which outputs were put in place before it landed."""
    ctx = click.get_current_context()
    watched = ctx.meta.setdefault(_OUTPUTS, {})
    for path in paths:
        if path is not None and path != "-":
            watched[path] = _identity(path)


def _written(ctx: click.Context) -> "list[str]":
    """The outputs this command put in place: a new file (or directory) at the path."""
    return [p for p, before in ctx.meta.get(_OUTPUTS, {}).items() if _identity(p) not in (None, before)]


def _stopped(ctx: click.Context, what: str, code: int) -> None:
    """Ctrl-C or SIGTERM (``what``, exit ``code``) ended the command, its temporary outputs
    removed. An output put in place before it stays, whole, and is said to be there: when
    every output is in place nothing was lost (exit 0, a warning), else ``code`` naming the
    written and the unwritten (docs/errors.md, "Processes and signals")."""
    watched = ctx.meta.get(_OUTPUTS, {})
    written = _written(ctx)
    if not written:
        fail(ctx, f"{what}; no output was written", code)
    missing = [p for p in watched if p not in written]
    if not missing:
        click.echo(names.shown(f"tracemerge: warning: {what} after the output was written: {', '.join(written)} "
                               "is complete"), err=True)
        ctx.exit(0)
    fail(ctx, f"{what}; {', '.join(written)} was written (complete), {', '.join(missing)} was not", code)


def _csv_section(value: "str | None") -> "str | None":
    """``--section``'s value checked against the section registry's CSV tables when the
    command runs (not when its help is shown: the sections import the analyses)."""
    if value is not None and value not in csv_sections():
        raise click.BadParameter(f"{value!r} is not one of {', '.join(map(repr, csv_sections()))}.",
                                 param_hint="'--section'")
    return value


# read by numpy's BLAS when numpy is first imported
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _one_blas_thread() -> None:
    """One BLAS thread unless the user set otherwise: tracemerge's matrix work is a few
    clock fits of a few hundred points, and OpenBLAS's thread pool spins after each call,
    on the cores the per-rank workers need (a combine -j 2 of 8 x 20 MB ranks on 2 cores:
    3 % of its CPU samples in OpenBLAS; docs/performance.md). Read only when numpy loads: a
    process that has numpy already (one that calls the CLI in-process) keeps its environment."""
    if "numpy" in sys.modules:
        return
    for name in BLAS_THREADS:
        os.environ.setdefault(name, "1")


@contextlib.contextmanager
def _signals_raise() -> "typing.Iterator[None]":
    """Ctrl-C and SIGTERM (kill, a batch system's time limit) unwind the command: temporary
    outputs are removed, the workers are stopped, exit 130 or 143. Until the command ran,
    the console script ends the process on them (tracemerge.commands.entry); a signal the process
    was started ignoring (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise Terminated()

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, terminated)):
        if before[sig] is not signal.SIG_IGN:
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in before.items():
            if old is not None:  # None: a handler not installed from Python, left as it is
                signal.signal(sig, old)


# click >= 8.2 signals "no arguments: show the help" as a usage error; older click has no such class
NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def usage_error(e: click.UsageError, where: "str | None") -> "typing.NoReturn":
    """One line like every other failure (click's own takes three), still exit 2."""
    if isinstance(e, NO_ARGS_IS_HELP):  # bare `tracemerge`: click shows the help
        raise e
    where = e.ctx.command_path if e.ctx else where
    click.echo(f"tracemerge: error: {names.shown(e.format_message())} (see '{where} --help')", err=True)
    raise click.exceptions.Exit(EXIT_USAGE)


def say(line: str, err: bool = True) -> None:
    """A line on stderr that is not an error (summary, warning, note, hint); ``--quiet``
    silences it."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or not ctx.find_root().meta.get("tracemerge.quiet"):
        click.echo(names.shown(line), err=err)


def say_all(lines: "typing.Iterable[str]") -> None:
    """Each line on stderr (tracemerge.commands.summary_lines made them), as :func:`say`."""
    for line in lines:
        say(line)


def _quiet() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().meta.get("tracemerge.quiet"))


def quiet_option(fn: "click.decorators.FC") -> "click.decorators.FC":
    def set_quiet(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.find_root().meta["tracemerge.quiet"] = True
        return value
    return click.option("-q", "--quiet", is_flag=True, expose_value=False, is_eager=True, callback=set_quiet,
                        help="Print nothing on stderr but errors: no summary, warnings, notes or progress.")(fn)


force_option = click.option("--force", is_flag=True, help="Overwrite an output (-o, --html) that exists.")


def check_outputs(paths: "typing.Iterable[str | None]", inputs: "typing.Iterable[str]", force: bool) -> None:
    """Each output a command will write (None: not asked for) refused before any input is read:
    an input, an existing file without --force, a name too long, two options naming one file."""
    given = [p for p in paths if p is not None]
    inputs = list(inputs)
    for n, path in enumerate(given):
        check_output(path, inputs, force)
        if path != "-" and any(os.path.realpath(path) == os.path.realpath(p) for p in given[:n]):
            raise click.UsageError(f"{path}: named by two outputs; give each its own")
    watch_outputs(given)


def fail(ctx: click.Context, message: str, code: int) -> None:
    click.echo(f"tracemerge: error: {names.shown(message)}", err=True)
    ctx.exit(code)


def max_inflate_option(fn: "click.decorators.FC") -> "click.decorators.FC":
    return click.option("--max-inflate", callback=_set_max_inflate, default=None, metavar="SIZE", expose_value=False,
                        is_eager=True,
                        help="Refuse a gzip/zstd input that inflates to more than SIZE (e.g. 8G; 0: no limit; "
                             "default: 64x its compressed size, at least 256M; also TRACEMERGE_MAX_INFLATE).")(fn)


def _set_max_inflate(ctx: click.Context, param: click.Parameter, value: "str | None") -> "str | None":
    """The bound travels in the environment: forked and Dask workers read it where they inflate.
    A TRACEMERGE_MAX_INFLATE that is not a size is refused here (exit 2), not ignored."""
    if value is None and os.environ.get("TRACEMERGE_MAX_INFLATE"):
        from tracemerge.files.codecs import inflate_limit

        try:
            inflate_limit(0)
        except TracemergeError as e:
            raise click.UsageError(str(e)) from None
    if value is not None:
        from tracemerge.files.codecs import MAX_INFLATE_ENV, parse_size  # here: gzip is not needed before

        try:
            parse_size(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None
        before = os.environ.get(MAX_INFLATE_ENV)
        os.environ[MAX_INFLATE_ENV] = value

        def restore() -> None:  # a command run inside another program leaves its environment as it was
            if before is None:
                os.environ.pop(MAX_INFLATE_ENV, None)
            else:
                os.environ[MAX_INFLATE_ENV] = before
        ctx.call_on_close(restore)
    return value


def input_options(fn: "click.decorators.FC") -> "click.decorators.FC":
    fn = max_inflate_option(fn)
    fn = click.option("--strict", is_flag=True,
                      help="Refuse files of different jobs (job_id, world_size or backend differ), ranks whose "
                           "profiling windows never meet and that no RPC or collective joins, or a rank that nothing "
                           "links to another (its clock taken on trust), instead of warning.")(fn)
    fn = click.option("--skip-bad", is_flag=True,
                      help="Leave out files that cannot be read and go on with the rest (each is named, with why).")(fn)
    return fn


def open_inputs(files: "list[str] | tuple[str, ...]", rank_from: str, skip_bad: bool, strict: bool,
                file_warnings: bool = False, **kw: typing.Any) -> Job:
    """Job.open (``read``, in ``kw``: the read strategy the command picks, tracemerge.job.reads),
    then say on stderr which files were skipped and what looks wrong
    (``file_warnings``: also each file's own warnings, a truncated file's salvage among
    them, for commands that do not print them later)."""
    job = Job.open(files, rank_from, skip_bad=skip_bad, strict=strict, **kw)
    say_all(lines.job_notes(job))
    if file_warnings:
        say_all(lines.file_warnings([i for i in job.infos if not i.partial]))  # a head says nothing of the events
    return job


def parse_offsets(ctx: click.Context, param: click.Parameter, values: "tuple[str, ...]") -> "dict[int, int]":
    offsets = {}
    for v in values:
        rank, sep, ns = v.partition("=")
        try:
            offsets[int(rank)] = int(ns)
        except ValueError:
            raise click.BadParameter(f"{v!r} is not RANK=NS (e.g. 1=-250000)") from None
        if not sep:
            raise click.BadParameter(f"{v!r} is not RANK=NS (e.g. 1=-250000)")
        if not 0 <= int(rank) < 1 << 31 or abs(int(ns)) >= 1 << 62:
            raise click.BadParameter(f"{v!r} is out of range (a rank >= 0; |NS| < 2**62)")
    return offsets


def _front_door(ctx: click.Context, param: click.Parameter, value: "tuple[str, ...]") -> "tuple[str, ...]":
    """FILES as the readers take them: quoted globs expanded, a pipe given here (process
    substitution, a FIFO) read whole into a temporary file that goes when the command ends
    (tracemerge.inputs.admit); anything else is judged by Job.open and the readers (exit 3,
    or left out by --skip-bad)."""
    _orjson_whole()  # the readers come in with it
    from tracemerge.inputs import admit

    try:
        files = admit.expand(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    try:
        admit.pipe_wait_s()  # TRACEMERGE_PIPE_WAIT set and mistyped: refused now, pipe or not
    except TracemergeError as e:
        raise click.UsageError(str(e)) from None
    files = _directories_read(files)
    pipes = [p for p in files if p in value and admit.is_pipe(p)]  # a FIFO a glob matched is not "given"
    if not pipes:
        return tuple(files)
    import shutil
    import tempfile

    directory = tempfile.mkdtemp(prefix="tracemerge-pipes-")
    ctx.call_on_close(lambda: shutil.rmtree(directory, ignore_errors=True))
    spooled = {}
    try:
        for p in pipes:
            spooled[p] = admit.spool(p, directory)
            say(f"tracemerge: note: {p} is a pipe: read whole into {spooled[p]}, named so below", err=True)
    except BaseException:  # the context is not closed when parsing fails: its cleanup would not run
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return tuple(spooled.get(p, p) for p in files)


def _directories_read(files: "list[str]") -> "list[str]":
    """``files`` with each directory replaced by the inputs it holds, told by content
    (tracemerge.inputs.directory); what it held and left out is named in one note."""
    if not any(os.path.isdir(p) for p in files):
        return files
    from tracemerge.inputs import directory

    out: "list[str]" = []
    for path in files:
        if not os.path.isdir(path):
            out.append(path)
            continue
        found = directory.job_files(path)
        if not found.files:
            raise click.BadParameter(f"{path}: no trace, journal or Flight Recorder dump in the directory"
                                     + (f" ({directory.note(path, found.left_out)})" if found.left_out else ""))
        if found.left_out:
            say(f"tracemerge: note: {directory.note(path, found.left_out)}", err=True)
        out += found.files
    return out


# readable=False: an unreadable file is the reader's error (exit 3, --skip-bad skips it), not click's exit 2;
# a directory stands for the inputs it holds (_directories_read)
files_argument = click.argument("files", nargs=-1, required=True, callback=_front_door,
                                type=click.Path(readable=False))


def rank_options(fn: "click.decorators.FC") -> "click.decorators.FC":
    fn = click.option("--cycle", type=click.IntRange(min=0), default=None, metavar="N",
                      help="Keep only cycle N of torch.profiler.schedule cycle files (rank{R}.cycle{N}.json.gz; "
                           "default: every cycle, the cycles of a rank joined into one process).")(fn)
    return click.option(
        "--rank-from", type=click.Choice(["auto", "order"]), default="auto", show_default=True,
        help="auto: the rank file's metadata, Kineto distributedInfo.rank, then the file name (a single "
             "file naming none is rank 0; several naming none take their order, with a warning); "
             "order: number the files 0, 1, … in the order given (cycle files too: not joined).")(fn)


def _parsed(parse: "typing.Callable[[str], object]") -> "typing.Callable[[click.Context, click.Parameter, str | None], object]":
    def callback(ctx: click.Context, param: click.Parameter, value: "str | None") -> object:
        try:
            return None if value is None else parse(value)
        except TracemergeError as e:
            raise click.BadParameter(str(e)) from None
    return callback


class FiniteFloatRange(click.FloatRange):
    """A FloatRange without NaN (it passes every range check, and a filter of NaN keeps
    everything) and without infinity."""

    def convert(self, value: "typing.Any", param: "click.Parameter | None", ctx: "click.Context | None") -> float:
        number: float = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def size_options(fn: "click.decorators.FC") -> "click.decorators.FC":
    """--ranks, --window, --min-duration, --drop-category, --overview: what a merge (or an
    export) keeps of the job."""
    fn = click.option("--overview", "overview", type=FiniteFloatRange(min=0), is_flag=False, flag_value=OVERVIEW_US,
                      default=None, metavar="[US]",
                      help="The first view of a large job: per rank its steps, RPC spans and collectives, and every "
                           f"other complete event at least US microseconds long (default {OVERVIEW_US:g}); the rest "
                           "is left out and counted. Then merge the ranks and window of interest in full "
                           "(--ranks, --window).")(fn)
    fn = click.option("--drop-category", "drop_categories", multiple=True, metavar="CAT",
                      help="Leave out events of this category (e.g. python_function). Repeatable.")(fn)
    fn = click.option("--min-duration", type=FiniteFloatRange(min=0), default=None, metavar="US",
                      help="Leave out complete events shorter than US microseconds.")(fn)
    fn = click.option("--window", callback=_parsed(parse_window), default=None, metavar="START:END",
                      help="Keep events overlapping START..END ms after the first aligned event "
                           "(either side may be empty).")(fn)
    return ranks_option(fn)


def ranks_option(fn: "click.decorators.FC") -> "click.decorators.FC":
    return click.option("--ranks", callback=_parsed(parse_ranks), default=None, metavar="LIST",
                        help="Keep only these ranks, e.g. 0-3,7.")(fn)


output_format_option = click.option(
    "--format", "fmt", type=RegistryChoice(lambda: OUTPUT_FORMATS), default=None,
    help="Output format (default: perfetto for .pftrace names, else Chrome JSON).")


def _scheduler(ctx: click.Context, param: click.Parameter, value: "str | None") -> "str | None":
    """``--scheduler`` parsed before any work (tracemerge.runtime.engine.parse_scheduler)."""
    if value is not None:
        from tracemerge.runtime.engine import parse_scheduler

        try:
            parse_scheduler(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None
    return value


def engine_options(fn: "click.decorators.FC") -> "click.decorators.FC":
    fn = click.option("--scheduler", default=None, metavar="tcp://HOST:PORT", callback=_scheduler,
                      help="Dask scheduler to run on (with --engine dask; default: a LocalCluster); tcp:// or "
                           "tls://, a port from 1 to 65535.")(fn)
    fn = click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
                      help="Worker processes for per-rank work (default: all cores).")(fn)
    fn = click.option("--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
                      help="Where per-rank work runs: local processes, or Dask workers.")(fn)
    return fn


Decorator = typing.Callable[[typing.Callable[..., typing.Any]], typing.Any]


def merge_options(force_help: str, causality_help: str, *between: Decorator) -> Decorator:
    """The options of a command that aligns and selects as a merge does (``combine``,
    ``export``), declared once: alignment, ranks, --force (``force_help``: what it replaces),
    the input options, --enforce-causality (``causality_help`` ends its help), ``between``
    (a command's own, e.g. combine's --format), what is kept, where the work runs."""
    def decorate(fn: "click.decorators.FC") -> "click.decorators.FC":
        fn = engine_options(fn)
        fn = size_options(fn)
        for option in reversed(between):
            fn = option(fn)
        fn = causality_option(causality_help)(fn)
        fn = input_options(fn)
        fn = click.option("--force", is_flag=True, help=force_help)(fn)
        fn = rank_options(fn)
        return align_options(fn)
    return decorate


def causality_option(causality_help: str) -> Decorator:
    """``--enforce-causality``; ``causality_help`` ends its help."""
    return click.option("--enforce-causality", is_flag=True,
                        help="Move each rank whose exchanges still contradict causality after alignment by the "
                             "smallest constant shift that removes the contradiction" + causality_help)


def merge_engine(engine: str, jobs: "int | None", scheduler: "str | None") -> "typing.Any":
    """The engine of ``--engine/--jobs/--scheduler``, with a progress line on a terminal."""
    if scheduler and engine != "dask":
        raise click.UsageError("--scheduler needs --engine dask")
    runner = make_engine(engine, jobs, scheduler)
    runner.progress = Progress.for_terminal(quiet=_quiet())
    return runner


def selection_of(ranks: "frozenset[int] | None", window: "tuple[float | None, float | None] | None",
                 min_duration: "float | None", drop_categories: "tuple[str, ...]", overview: "float | None"
                 ) -> Selection:
    """The :class:`Selection` of ``--ranks/--window/--min-duration/--drop-category/--overview``."""
    return Selection(ranks=ranks, window_ms=window, min_duration_us=min_duration,
                     drop_categories=frozenset(drop_categories), overview_us=overview)


def comm_kernel_option(fn: "click.decorators.FC") -> "click.decorators.FC":
    """``--comm-kernel REGEX`` (repeatable), wherever a GPU section is made: ``report``,
    ``combine --report``, ``export --gpu``."""
    return click.option(
        "--comm-kernel", "comm_kernels", multiple=True, metavar="REGEX", callback=lambda _c, _p, v: _regexes(v),
        help="Count device kernels whose name matches REGEX (Python re, repeatable) as communication in the "
             "GPU section (report's, combine --report's, export --gpu's gpu table), after the known families "
             "(NCCL, RCCL, DeepEP, custom all-reduce, NVSHMEM, MSCCL).")(fn)


def align_options(fn: "click.decorators.FC") -> "click.decorators.FC":
    fn = click.option("--offset", "offsets", multiple=True, callback=parse_offsets, metavar="RANK=NS",
                      help="Force a known clock offset for a rank (its clock minus the reference's, ns). Repeatable.")(fn)
    fn = click.option("--reference", type=int, default=None, metavar="RANK",
                      help="Rank whose clock the others are aligned to (default: the lowest).")(fn)
    fn = click.option("--align", "method", cls=RegistryOption, type=RegistryChoice(lambda: METHODS), default="auto",
                      show_default=True,
                      help_from=lambda: "Clock alignment: " + "; ".join(f"{m.name} = {m.summary}" for m in METHODS.values())
                      + " (see docs/alignment.md).")(fn)
    return fn


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    # the core that would run, without importing it (numpy, msgspec: most of the start-up)
    click.echo(f"tracemerge, version {tracemerge.__version__}\n{corestatus.describe(corestatus.built())}")
    ctx.exit()


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version and which core is active (compiled or Python), then exit.")
def main() -> None:
    """Merge the per-rank profiler traces of a distributed PyTorch job into one aligned timeline.

    \b
    Examples:
      tracemerge combine samples/rpc_profiling/rank*.json.gz -o trace.json
      tracemerge align samples/rpc_profiling/rank*.json.gz -o aligned/
      tracemerge info rank*.json.gz
    """


@main.command()
@quiet_option
@files_argument
@click.option("-o", "--output", required=True, metavar="PATH",
              help="Merged trace: .json, .json.gz (gzip), .json.zst (zstd), .pftrace (Perfetto protobuf; "
                   "also .gz, .zst), or - for stdout.")
@merge_options("Overwrite the output if it exists.", " (every duration kept); say what is left.",
               output_format_option)
@click.option("--report", "report_path", is_flag=False, flag_value="", default=None, metavar="[=PATH]",
              help="Also write the report of all inputs (see `tracemerge report`) beside the output as "
                   "<output>.report.txt, or to PATH given as --report=PATH (a bare --report never takes the "
                   "next word: that is an input); .json/.csv/.md pick the format.")
@click.option("--critical-path", "critical_path", is_flag=True,
              help="Also draw the cross-rank critical path (see `tracemerge report`): a 'critical path' process "
                   "with one slice per window (ProfilerStep#N of the ranks whose steps meet, 'ProfilerStep#N "
                   "(rank R)' for a rank whose step meets no other's, else the whole trace) and its "
                   "segments nested in it. Its timelines are made by the workers that hold the ranks (read once, "
                   "where memory allows).")
@comm_kernel_option
def combine(files: "tuple[str, ...] | list[str]", output: str, method: str, reference: "int | None",
            offsets: "dict[int, int]", rank_from: str, cycle: "int | None", force: bool, enforce_causality: bool,
            fmt: "str | None", ranks: "frozenset[int] | None", window: "tuple[float | None, float | None] | None",
            min_duration: "float | None", drop_categories: "tuple[str, ...]", overview: "float | None",
            engine: str, jobs: "int | None",
            scheduler: "str | None", report_path: "str | None", critical_path: bool, comm_kernels: "tuple[str, ...]",
            skip_bad: bool, strict: bool) -> None:
    """Merge FILES (rank files, Kineto/Chrome JSON, .json.gz, .json.zst, journals, Flight Recorder dumps; a
    directory: every such file in it) into one Chrome trace or Perfetto protobuf.

    Every rank becomes its own process group, named "rank N · worker · host", with pids,
    flow and correlation ids made unique per rank. Every input event is kept exactly once
    unless --ranks/--window/--min-duration/--drop-category leave it out (counted in the
    summary); RPC spans get flow arrows caller -> callee -> caller, and each matched
    send/recv pair one from the send to the receive (category p2p).

    \b
    Examples:
      tracemerge combine rank*.json.gz -o trace.json
      tracemerge combine w0.json w1.json --rank-from order --align start -o - | gzip > t.json.gz
      tracemerge combine rank*.json.gz -o trace.pftrace --window 100:350 --drop-category python_function
      tracemerge combine rank*.json.gz -o trace.pftrace --critical-path
    """
    if comm_kernels and report_path is None:
        raise click.BadParameter("only with --report (the GPU section is the report's)", param_hint="'--comm-kernel'")
    check_output(output, files, force)  # before any input is read: a long merge never ends in "cannot write"
    if report_path is not None:
        report_path = combine_report_path(output, report_path, files, force)
    watch_outputs((output, report_path))
    if scheduler:
        # workers on other machines resolve relative paths against their own directory
        files = [os.path.abspath(f) for f in files]
    runner = merge_engine(engine, jobs, scheduler)
    try:
        job = open_inputs(files, rank_from, skip_bad, strict, engine=runner, cycle=cycle, read=reads.events,
                          align=AlignRequest(method, reference, offsets, enforce_causality))
        alignment = job.clock_model()
        selection = selection_of(ranks, window, min_duration, drop_categories, overview)
        written = write_trace(job, alignment, output, force, fmt, selection, critical_path)
        if report_path is not None:
            report_path = write_combine_report(job, alignment, output, report_path, files, comm_kernels)
    finally:
        runner.close()
    say_all(lines.combine_lines(job, alignment, written, output, report_path))


@main.command("align")
@quiet_option
@files_argument
@click.option("-o", "--output", required=True, metavar="DIR",
              help="Directory to write one trace per rank into (made if missing; its other files are left alone).")
@click.option("--name", default=ALIGN_NAME, show_default=True, metavar="TEMPLATE",
              help="Each output's name, {rank} replaced by its rank; .json, .json.gz (gzip) or .json.zst (zstd) "
                   "picks the compression. The default is found by HTA (any .json/.gz), torch-tb-profiler "
                   "(*.pt.trace.json.gz, worker rankR) and TraceLens (rank regex); 'rank{rank}_trace.json' is "
                   "TraceLens's --trace_dir name.")
@align_options
@rank_options
@click.option("--force", is_flag=True, help="Replace outputs of the same names in DIR.")
@input_options
@causality_option(", as combine does.")
@ranks_option
def align_files(files: "tuple[str, ...]", output: str, name: str, method: str, reference: "int | None",
                offsets: "dict[int, int]", rank_from: str, cycle: "int | None", force: bool, skip_bad: bool,
                strict: bool, enforce_causality: bool, ranks: "frozenset[int] | None") -> None:
    """Write each rank's trace on the reference clock, one file per rank in DIR, for per-rank tools (HTA, TraceLens, tb-profiler).

    Every time is placed exactly as `tracemerge combine` places it (the same clock model:
    offset and drift; events, counters, flows and the rank-file block's *_ns fields), and
    everything else is kept as torch wrote it: top-level keys, distributedInfo, pids,
    metadata, every event. Each file's "tracemerge" block says what was applied
    (aligned: method, offset, drift_ppm, error_bound). The cycle files of a rank make one
    file; a rank read from its journal alone (it died unwritten) has no events and gets
    none. Inputs are never changed; the outputs appear together or not at all.

    \b
    Examples:
      tracemerge align rank*.json.gz -o aligned/
      tracemerge align *.pt.trace.json --align start -o aligned/ --name 'rank{rank}_trace.json'
    """
    check_align_output(output, name, files, force)  # before any input is read
    runner = LocalEngine()
    try:
        job = open_inputs(files, rank_from, skip_bad, strict, engine=runner, cycle=cycle, read=reads.descriptions,
                          align=AlignRequest(method, reference, offsets, enforce_causality))
        summary = align_ranks(job, output, None, force, name, ranks)
    finally:
        runner.close()
    say_all(lines.align_lines(job, job.clock_model(), summary))


@main.command()
@quiet_option
@files_argument
@max_inflate_option
@align_options
@rank_options
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help='table for reading; json: {"reference": R, "ranks": [{rank, method, offset_ns, drift_ppm, '
                   'anchor_ns, error_bound_ns, samples, peers, machine, hostname}, ...], "machines": [{machine, '
                   'hostname, boot_id, ranks}, ...]}.')
def offsets(files: "tuple[str, ...]", method: str, reference: "int | None", offsets: "dict[int, int]", rank_from: str,
            cycle: "int | None", fmt: str) -> None:
    """Estimate each rank's clock against the reference rank, with error bounds.

    Per rank: the method that produced it, offset_ns (its clock minus the reference's at
    anchor_ns), drift_ppm, error_bound_ns (the true error never exceeds it; "-" when
    unknown), samples, the ranks it was measured against (peers), and its machine
    (ranks of one boot_id read one wall clock); then one line per machine.

    \b
    Examples:
      tracemerge offsets samples/rpc_profiling/rank*.json.gz
      tracemerge offsets rank*.json.gz --align rpc --reference 1 --format json
    """
    # only the clocks are needed: rank files' heads, other files' light scans, in parallel
    # the job-wide warnings too (files of different runs, windows that never meet, absent peers)
    job = open_inputs(files, rank_from, skip_bad=False, strict=False, engine=LocalEngine(), read=reads.heads,
                      cycle=cycle, align=AlignRequest(method, reference, offsets))
    alignment = job.clock_model()
    render = offsets_json if fmt == "json" else offsets_table
    click.echo(names.as_bytes(render(alignment, list(job.infos)) + "\n"), nl=False)
    say_all(lines.offsets_notes(job, alignment))


@main.command("open")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--port", cls=RegistryOption, type=click.IntRange(0, 65535), default=lambda: serving.DEFAULT_PORT,
              show_default=True,
              help="Port on 127.0.0.1 (the Perfetto UI only fetches from 9001; 0 picks a free one).")
@click.option("--browser", is_flag=True, help="Open the link in the default web browser.")
def open_trace(trace: str, port: int, browser: bool) -> None:
    """Serve TRACE once to ui.perfetto.dev and print the link that opens it.

    Exits after the UI fetched the file, or on Ctrl-C.
    """
    def ready(link: str) -> None:
        click.echo(link)
        sys.stdout.flush()

    try:
        serve(trace, port, browser, on_ready=ready, log=lambda line: say(f"tracemerge: {line}", err=True))
    except KeyboardInterrupt:
        fail(click.get_current_context(), f"interrupted; {trace} was not sent", EXIT_INTERRUPTED)
    say(f"tracemerge: sent {trace}", err=True)


@main.command()
@quiet_option
@files_argument
@rank_options
@input_options
def info(files: "tuple[str, ...]", rank_from: str, cycle: "int | None", skip_bad: bool, strict: bool) -> None:
    """Describe each trace file: rank, worker, events, time span, threads, metadata, warnings.

    A merged trace written by `tracemerge combine` is described by its summary: its ranks,
    where they came from, their alignment.
    """
    merged = {}
    for path in files:
        trace = reports.read_merged(path)
        if trace is not None:
            merged[path] = lines.merged_lines(path, trace)
    rest = [f for f in files if f not in merged]
    job = None
    if rest:
        runner = LocalEngine(progress=Progress.for_terminal(quiet=_quiet()))
        try:
            job = open_inputs(rest, rank_from, skip_bad, strict, engine=runner, cycle=cycle,  # scans, in parallel
                              read=reads.descriptions)
        finally:
            runner.close()
    # every file of a rank names the rank; a rank of several cycle files is described once
    described = {part.path: i for i in job.infos for part in i.files} if job else {}
    shown = set()
    for path in files:
        if path in merged:
            click.echo(names.as_bytes("\n".join(merged[path]) + "\n"), nl=False)  # names as the bytes they are
            continue
        i = described.get(path)
        if i is None or id(i) in shown:
            continue  # left out by --skip-bad (named on stderr), or --cycle; or described already
        shown.add(id(i))
        click.echo(names.as_bytes("\n".join(lines.rank_lines(i)) + "\n"), nl=False)
    sys.stdout.flush()


@main.command()
@quiet_option
@files_argument
@click.option("--group-by", type=RegistryChoice(lambda: GROUP_BY), default="name", show_default=True,
              help="name: one row per op name over all ranks (Node ID -1 when several); name,rank: one row per rank.")
@click.option("--sort-by", type=RegistryChoice(lambda: SORT_KEYS), default="cpu_time_total", show_default=True,
              help="Key-averages order: times and counts descending, key ascending.")
@click.option("--row-limit", type=click.IntRange(min=0), default=100, show_default=True, help="Key-average rows shown; 0 for all.")
@click.option("--format", "fmt", type=RegistryChoice(lambda: REPORT_FORMATS), default="table", show_default=True)
@click.option("-o", "--output", default="-", metavar="PATH", help="Write the report here (default: stdout).")
@click.option("--remote-ops", is_flag=True,
              help="Name ops run on a callee by their RPC: rpc_async#aten::mul(worker0 -> worker1)#remote_op: mul.")
@click.option("--html", "html_path", default=None, metavar="PATH", help="Also write a self-contained HTML page with plots.")
@force_option
@click.option("--analysis", is_flag=True,
              help="Add the cross-rank analyses of rank files: the critical path per window (ProfilerStep#N "
                   "of the ranks whose steps meet, 'ProfilerStep#N (rank R)' for a rank whose step meets "
                   "no other's, else the whole trace; windows never overlap), wait states and stragglers, in every format (JSON: the "
                   "critical_path, critical_path_totals, wait_states and stragglers keys).")
@click.option("--section", metavar="NAME", default=None, callback=lambda ctx, param, value: _csv_section(value),
              help="With --format csv, the table the CSV holds: the key averages (key_averages, the default), "
                   "a failed job's post-mortem (postmortem), or (implying --analysis) the critical path's segments "
                   "(critical_path), the wait states (rpc_waits, collective_waits), per-step times (step_times) "
                   "or the stragglers (stragglers); an analysis added to the report adds its own.")
@comm_kernel_option
@align_options
@rank_options
@input_options
def report(files: "tuple[str, ...]", group_by: str, sort_by: str, row_limit: int, fmt: str, output: str,
           remote_ops: bool, html_path: "str | None", force: bool, analysis: bool, section: str,
           comm_kernels: "tuple[str, ...]",
           method: str, reference: "int | None", offsets: "dict[int, int]", rank_from: str, cycle: "int | None",
           skip_bad: bool, strict: bool) -> None:
    """Key averages (torch's table with a Node ID), RPC latency breakdown, callee saturation, collectives;
    with --analysis also the cross-rank critical path, wait states and stragglers.

    FILES are rank files, Kineto traces, journals, PyTorch Flight Recorder dumps (pickle or JSON),
    or one merged trace written by `tracemerge combine` (reported from its events and the records its
    summary keeps; --analysis needs the rank files). A directory stands for every such file in it,
    told by content, what is left out named in one note: `tracemerge report traces/`.

    \b
    Examples:
      tracemerge report rank*.json.gz --group-by name,rank --sort-by self_cpu_time_total
      tracemerge report rank*.json.gz --format json -o report.json --html report.html
      tracemerge report rank*.json.gz --analysis --format json -o report.json
      tracemerge report rank*.json.gz --format csv --section critical_path -o path.csv
    """
    key_averages = csv_sections()[0]  # the default table, the one every format holds
    section = section or key_averages
    if section != key_averages and fmt != "csv":
        raise click.BadParameter("only for --format csv (the other formats hold every section)",
                                 param_hint="'--section'")
    check_outputs((output, html_path), files, force)  # before any input is read

    align = AlignRequest(method, reference, offsets)
    # each rank read once, by the worker that keeps it for its report products
    runner = LocalEngine()

    def opener(paths: "list[str]") -> Job:
        return open_inputs(paths, rank_from, skip_bad, strict, file_warnings=True, read=reads.columns, cycle=cycle,
                           align=align, engine=runner)

    try:
        rep = reports.build_report(list(files), opener, align, group_by, remote_ops,
                                   analysis or csv_needs_analysis(section), comm_kernels)
    finally:
        runner.close()
    write_text(output, render_report(rep, fmt, sort_by, row_limit, section), files, force)
    if html_path:
        write_text(html_path, render_report(rep, "html", sort_by, row_limit), files, force)
    for note in rep.notes:
        if note.said:   # by its kind: hints and warnings are said on stderr too
            say(f"tracemerge: {note.said}: {note.text}", err=True)


def _regexes(values: "tuple[str, ...]") -> "tuple[str, ...]":
    """``values``, each compiled as the GPU section will (:func:`tracemerge.report.gpu.comm_kernel_pattern`:
    under the regex engine's bounds); a usage error names the bad one."""
    if not values:
        return values
    from tracemerge.report.gpu import comm_kernel_pattern

    for value in values:
        try:
            comm_kernel_pattern(value)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--comm-kernel'") from None
    return values


def run_files(arg: str) -> "list[str]":
    """The files of one run (:func:`tracemerge.report.diff.run_files`), each file a directory
    held and left out named on stderr."""
    from tracemerge.report.diff import run_files as files_of_run

    try:
        found = files_of_run(arg)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    for path, why in found.left_out:
        say(f"tracemerge: note: {arg}: left out {path}: {why}", err=True)
    return found.files


@main.command()
@quiet_option
@click.argument("before", metavar="BEFORE")
@click.argument("after", metavar="AFTER")
@click.option("--row-limit", type=click.IntRange(min=0), default=100, show_default=True,
              help="Rows shown in table, Markdown and HTML; 0 for all (CSV and JSON hold every row).")
@click.option("--format", "fmt", type=RegistryChoice(lambda: REPORT_FORMATS), default="table", show_default=True)
@click.option("-o", "--output", default="-", metavar="PATH", help="Write the diff here (default: stdout).")
@click.option("--html", "html_path", default=None, metavar="PATH", help="Also write a self-contained HTML page.")
@force_option
@align_options
@rank_options
@input_options
def diff(before: str, after: str, row_limit: int, fmt: str, output: str, html_path: "str | None", force: bool,
         method: str, reference: "int | None", offsets: "dict[int, int]", rank_from: str, cycle: "int | None",
         skip_bad: bool, strict: bool) -> None:
    """Compare two runs: key averages, RPC latency and callee rows matched by key, largest change first.

    BEFORE and AFTER are each a directory (its .json/.json.gz/.json.zst traces: one run's rank
    files, a merged trace beside them and JSON that is no trace left out and named; or its
    one merged trace), a quoted glob ('run1/rank*.json.gz'), or one file (a merged trace, or
    one rank). Each is reported as `tracemerge report` would; rows give before,
    after, delta (after - before) and relative (delta / before), times totalled over the run.

    \b
    Examples:
      tracemerge diff samples/threads_1 samples/threads_8
      tracemerge diff 'old/rank*.json.gz' new/merged.json --format markdown -o diff.md
    """
    sides = [run_files(before), run_files(after)]
    check_outputs((output, html_path), sides[0] + sides[1], force)  # before any input is read

    align = AlignRequest(method, reference, offsets)

    def opener(paths: "list[str]") -> Job:
        return open_inputs(paths, rank_from, skip_bad, strict, file_warnings=True, read=reads.columns, cycle=cycle,
                           align=align)

    runs = [reports.build_report(paths, opener, align) for paths in sides]
    result = diff_reports(runs[0], runs[1], sides[0], sides[1])
    inputs = sides[0] + sides[1]
    write_text(output, render_diff(result, fmt, row_limit), inputs, force)
    if html_path:
        write_text(html_path, render_diff(result, "html", row_limit), inputs, force)


@main.command()
@quiet_option
@files_argument
@click.option("--speedup", "speedups", multiple=True, required=True, metavar="NAME[@RANK]=K",
              help="Spans named NAME (on rank RANK; without @RANK on every rank) run K times faster (K from 0.001: "
                   "below 1 slower); K 0 or inf: they take no time. Repeatable, one per span: two naming the same "
                   "spans (NAME twice, NAME beside NAME@RANK) are refused, as is a NAME no span has or a RANK no "
                   "input has (exit 2).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("-o", "--output", default="-", metavar="PATH", help="Write the answer here (default: stdout).")
@force_option
@align_options
@rank_options
@input_options
def whatif(files: "tuple[str, ...]", speedups: "tuple[str, ...]", fmt: str, output: str, force: bool, method: str,
           reference: "int | None", offsets: "dict[int, int]", rank_from: str, cycle: "int | None", skip_bad: bool,
           strict: bool) -> None:
    """How long each window would take if some spans ran faster: per window (as the critical
    path's: ProfilerStep#N, per rank where steps do not meet, else the whole trace) the measured time, the time predicted by replaying the job's dependencies
    (thread order, RPCs, collectives, continuations) with the change, and the new critical
    path's largest segments.

    \b
    Examples:
      tracemerge whatif rank*.json.gz --speedup 'planted:udf@1=2'
      tracemerge whatif rank*.json.gz --speedup 'aten::mm=inf' --format json -o whatif.json
    """
    import json

    from tracemerge.analysis import whatif as what
    from tracemerge.analysis.job_timeline import job_timeline

    try:
        parsed = what.parse_all(list(speedups))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--speedup'") from None
    check_outputs((output,), files, force)  # before any input is read
    job = open_inputs(list(files), rank_from, skip_bad, strict, file_warnings=True, cycle=cycle, read=reads.events,
                      align=AlignRequest(method, reference, offsets))
    from tracemerge.analysis.critical_path import critical_path

    timeline = job_timeline(job)
    what.check(timeline, parsed)   # exit 2 before any work for a speed-up that names nothing
    predictions = what.whatif(timeline, parsed)
    if len(parsed) > 1 or all(p.predicted_ns == p.measured_ns for p in predictions):
        # a lone speed-up that changed a window is on its path: the walk is needed otherwise
        for note in what.check(timeline, parsed, critical_path(timeline)):
            say(f"tracemerge: warning: {note}", err=True)
    text = (json.dumps(names.json_safe(what.as_json(predictions, parsed)), indent=2) + "\n" if fmt == "json"
            else what.table(predictions, parsed))
    write_text(output, text, files, force)


@main.command("export")
@quiet_option
@files_argument
@click.option("-o", "--output", required=True, metavar="DIR",
              help="Directory of Parquet files to write: events/rank=N/part-K.parquet (one rank per folder), "
                   "rpcs, collectives, clocks, key_averages, rpc_latency, ... .parquet, tracemerge.json.")
@merge_options("Replace the output directory if it exists.", ", as combine does.")
@click.option("--group-by", type=RegistryChoice(lambda: GROUP_BY), default="name", show_default=True,
              help="key_averages: one row per op name over all ranks, or one per name and rank.")
@click.option("--critical-path", "critical_path", is_flag=True,
              help="Also find the cross-rank critical path (the critical_path table), from the same read of each rank.")
@click.option("--gpu", is_flag=True,
              help="Also each rank's GPU time (the gpu table: report's GPU section), from the same read of each rank.")
@comm_kernel_option
def export_tables(files: "tuple[str, ...] | list[str]", output: str, method: str, reference: "int | None",
                  offsets: "dict[int, int]", rank_from: str, cycle: "int | None", force: bool, enforce_causality: bool,
                  ranks: "frozenset[int] | None", window: "tuple[float | None, float | None] | None",
                  min_duration: "float | None", drop_categories: "tuple[str, ...]", overview: "float | None",
                  engine: str, jobs: "int | None", scheduler: "str | None", group_by: str, critical_path: bool,
                  gpu: bool, comm_kernels: "tuple[str, ...]", skip_bad: bool, strict: bool) -> None:
    """Write the aligned job as Parquet tables in DIR, for pandas, DuckDB, Dask or Spark.

    Events (one row per event of the merged trace, times in ns on the reference clock) are
    partitioned by rank and written by the worker that reads each rank; RPCs with both
    sides, collectives per rank, the clock table and the report's tables beside them.
    Selects and aligns as `tracemerge combine` does (docs/tables.md).

    \b
    Examples:
      tracemerge export samples/rpc_profiling/rank*.json.gz -o tables/
      tracemerge export rank*.json.gz -o tables/ --window 100:350 --jobs 8 --force
    """
    from tracemerge.tables.events import preload_arrow
    from tracemerge.tables.export import check_directory, export

    # Arrow's pool is chosen when pyarrow is first imported: the C library's malloc hands the
    # pages of each written batch back, the bundled mimalloc keeps them (~25 MB more per
    # worker). Imported here, before the local workers fork, its start-up is pages every
    # worker shares (tables.events.preload_arrow). Nothing before the workers end imports
    # pandas: pa.array() would (~50 MB), so the workers make their columns from buffers.
    pool = os.environ.get("ARROW_DEFAULT_MEMORY_POOL")
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = pool or "system"
    try:
        preload_arrow()
    finally:  # the environment as it was (the choice is made)
        if pool is None:
            os.environ.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    if comm_kernels and not gpu:
        raise click.BadParameter("only with --gpu (the gpu table is the GPU section)", param_hint="'--comm-kernel'")
    check_directory(output, force, files)  # before any input is read
    watch_outputs((output,))
    if scheduler:
        files = [os.path.abspath(f) for f in files]  # workers on other machines resolve paths themselves
        output = os.path.abspath(output)
    runner = merge_engine(engine, jobs, scheduler)
    try:
        # columns only, as a rank read again by the per-rank pass is (tables/parts.py): a rank
        # held since Job.open gives the same tables
        job = open_inputs(files, rank_from, skip_bad, strict, engine=runner, cycle=cycle, read=reads.columns,
                          align=AlignRequest(method, reference, offsets, enforce_causality))
        selection = selection_of(ranks, window, min_duration, drop_categories, overview)
        summary = export(job, output, None, selection, force, group_by, critical_path, gpu, comm_kernels)
    finally:
        runner.close()
    say_all(lines.export_lines(job, summary, output))
