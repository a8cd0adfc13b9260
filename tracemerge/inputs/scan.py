"""Pass 1 over the inputs: what the clock model needs of a rank (a :class:`RankInfo`): a
rank file's head alone when it carries its block, else the typed reader without the extra
keys. Anything the typed reader does not accept goes through the full reader, so errors,
salvage and warnings are the reader's own."""

import os

from tracemerge.inputs.chrome import read_data, read_trace, read_typed
from tracemerge.inputs.head import read_head
from tracemerge.inputs.rankinfo import describe, describe_head
from tracemerge.merge.executors import gc_paused


def scan_head(path):
    """The partial :class:`RankInfo` of a rank file whose head carries its block
    (:func:`rankinfo.describe_head`), without decoding its events; None for other files."""
    path = os.fspath(path)
    found = read_head(path)
    return describe_head(path, found) if found is not None else None


def scan(path):
    """The :class:`RankInfo` of ``path``, equal to ``describe(read_trace(path))``: the typed
    reader without the keys describe() does not use (flow ids, scopes); a file it does not
    take goes through the full reader, which explains or salvages it."""
    path = os.fspath(path)
    with gc_paused():
        data, cut = read_data(path)
        trace = None if cut else read_typed(path, data, extra=False, describing=True)
        del data
        return describe(trace if trace is not None else read_trace(path))
