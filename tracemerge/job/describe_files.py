"""Pass 1 over the inputs: what the clock model needs of a rank (a :class:`RankInfo`), by
the reader the registry picks (:mod:`tracemerge.inputs`): a rank file's head alone when
it carries its block, else the format's describing read. Anything a describing read does
not accept goes through the full reader, so errors, salvage and warnings are the reader's
own."""

import os
from typing import Optional, Union

from tracemerge import native
from tracemerge.errors import reading
from tracemerge.inputs import READERS, reader_for
from tracemerge.inputs.rankinfo import RankInfo, describe
from tracemerge.runtime.engine import gc_paused


def scan_head(path: Union[str, "os.PathLike[str]"]) -> Optional[RankInfo]:
    """The partial :class:`RankInfo` of a rank file whose head carries its block, without
    decoding its events; None for other files."""
    path = os.fspath(path)
    with reading(path):
        for form in READERS:
            if form.head is not None:
                info = form.head(path)
                if info is not None:
                    return info
    return None


def scan(path: Union[str, "os.PathLike[str]"]) -> RankInfo:
    """The :class:`RankInfo` of ``path``, equal to ``describe(read_trace(path))``."""
    path = os.fspath(path)
    form = reader_for(path)
    with gc_paused(), reading(path):
        if form.name == native.READS and native.active() == "native":
            # the compiled core reads every key faster than the format's narrow decode
            return describe(native.read_file(path))
        return form.describe(path)
