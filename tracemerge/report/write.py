"""Where reports go: ``report -o``, ``combine --report[=PATH]`` (by default beside the
merged trace), written atomically."""

import os
import sys
from typing import Iterable, Optional, Sequence

from tracemerge.errors import OutputError
from tracemerge.files import names
from tracemerge.files.codecs import plain_name
from tracemerge.files.output import atomic_output, check_output
from tracemerge.job import Alignment, Job
from tracemerge.report.build import job_report
from tracemerge.report.render import format_of, render


def write_text(path: str, text: str, inputs: Iterable[str] = (), force: bool = True) -> None:
    """Write ``text`` to ``path`` atomically ("-" is stdout)."""
    check_output(path, inputs, force)
    with atomic_output(path, force=force) as stream:
        stream.write(names.as_bytes(text))  # a name of any bytes written as the bytes it is


def report_path_for(output: str) -> str:
    """Where ``combine --report`` without a PATH puts the report: beside the merged trace."""
    if output == "-":
        return "-"
    stem = plain_name(output)
    stem = stem[:-5] if stem.endswith(".json") else stem
    return stem + ".report.txt"


def combine_report_path(output: str, path: Optional[str], inputs: Iterable[str], force: bool) -> str:
    """Where ``combine --report[=PATH]`` writes, refused before the merge runs when it is
    the merged trace itself, an input, or an existing file without ``force``."""
    path = path or report_path_for(output)
    if "-" not in (path, output) and os.path.realpath(path) == os.path.realpath(output):
        raise OutputError(f"{path}: the report would replace the merged trace; choose another --report=PATH")
    check_output(path, inputs, force)
    return path


def write_combine_report(job: Job, alignment: Optional[Alignment], output: str, path: Optional[str],
                         inputs: Iterable[str] = (), comm_kernels: Sequence[str] = ()) -> str:
    """``combine --report[=PATH]``: the table (or the format PATH's extension asks for) beside the output;
    ``comm_kernels``: regexes of further communication kernels for its GPU section."""
    path = path or report_path_for(output)
    text = render(job_report(job, alignment, comm_kernels=comm_kernels), format_of(path))
    if path == "-":
        sys.stderr.write(text)   # stdout carries the merged trace
    else:
        write_text(path, text, inputs)
    return path
