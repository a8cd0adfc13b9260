"""A job's output directory as inputs: every file in it that some input format reads, told
by content, not by name — rank files, schedule cycle files, Kineto traces, journals,
Flight Recorder dumps (any name) —, and what is left out, each with why.

The algorithm: walk the directory (its subdirectories too: a launcher's or a watchdog's
files may sit one level down), in name order, and classify each regular file by its first
decompressed bytes: a journal's or a dump's first bytes are their own (the formats'
sniffs); else a file that opens no JSON document is left out ("not a trace"); a JSON
document whose head is a merged trace's (``combine``'s output) is held back, and taken
only when the directory holds no other trace (it holds their events again); a document
with ``traceEvents`` (or a bare event array) is a trace; any other JSON (a config, a
report, a planted truth) is left out. Hidden files (the capture's temporary exports) are
left out unread.
"""

import os
from dataclasses import dataclass, field
from typing import List, Tuple

from tracemerge.errors import TraceError
from tracemerge.inputs import READERS, _first_bytes
from tracemerge.inputs.admit import MERGED_HEAD
from tracemerge.inputs.head import first_bytes, read_head


@dataclass
class DirectoryFiles:
    """The inputs a directory holds, and the files left out (path, why)."""

    files: List[str]
    left_out: List[Tuple[str, str]] = field(default_factory=list)
    merged: List[str] = field(default_factory=list)   # merged traces found (taken only when alone)


MERGED_BESIDE = "a merged trace (tracemerge combine's output): its inputs are here, and it holds their events again"


def job_files(directory: str) -> DirectoryFiles:
    """The files of ``directory`` (the module's doc); the merged traces are taken only where
    no other input is there."""
    found = DirectoryFiles([])
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.startswith("."):
                found.left_out.append((path, "a hidden file"))
                continue
            if not os.path.isfile(path):
                found.left_out.append((path, "not a regular file"))
                continue
            kind = kind_of(path)
            if kind == "input":
                found.files.append(path)
            elif kind == "merged":
                found.merged.append(path)
            else:
                found.left_out.append((path, kind))
    if found.files:
        found.left_out += [(p, MERGED_BESIDE) for p in found.merged]
    else:
        found.files = list(found.merged)
    return found


def kind_of(path: str) -> str:
    """"input", "merged", or why ``path`` is no input."""
    try:
        first = _first_bytes(path)
    except TraceError as e:
        return e.problem
    if any(form.sniff is not None and form.sniff(first) for form in READERS):
        return "input"
    start = first.lstrip()[:1]
    if start not in (b"{", b"["):
        return "not a trace (not JSON, not a journal or a Flight Recorder dump)"
    if start == b"[":
        return "input"  # a bare event array
    head = read_head(path)
    if head is not None and set(head) == MERGED_HEAD:
        return "merged"
    if head is not None or b'"traceEvents"' in first_bytes(path):
        return "input"
    return "JSON that is no trace (no traceEvents)"


def note(directory: str, left_out: List[Tuple[str, str]]) -> str:
    """The one line that names what ``directory`` held and was left out."""
    return (f"{directory}: left out {len(left_out)} file{'s' if len(left_out) != 1 else ''}: "
            + "; ".join(f"{os.path.relpath(p, directory)} ({why})" for p, why in left_out))
