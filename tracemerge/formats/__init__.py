"""Output formats of ``combine``: one module per format, each defining its ``FORMAT``
(:class:`~tracemerge.formats.base.Format`), and this registry listing them. A new format
is one new module and one line in :data:`FORMATS`; ``--format``'s choices and the
routing of output names by suffix come from here."""

from typing import Dict, Optional

from tracemerge.codecs import plain_name
from tracemerge.formats import chrome, perfetto
from tracemerge.formats.base import Format

FORMATS: Dict[str, Format] = {f.name: f for f in (
    chrome.FORMAT,
    perfetto.FORMAT,
)}
DEFAULT = chrome.FORMAT.name    # for outputs no format's suffix names (stdout, trace.txt)


def output_format(output: str, fmt: Optional[str] = None) -> str:
    """The format's name: ``fmt`` when given, else the one whose suffix ``output`` ends with
    (a compression suffix aside), else :data:`DEFAULT`."""
    if fmt:
        return fmt
    name = plain_name(output)
    return next((f.name for f in FORMATS.values() if f.suffixes and name.endswith(f.suffixes)), DEFAULT)
