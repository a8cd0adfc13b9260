"""The in-memory model: one columnar table of events per rank file.

Numeric columns are numpy arrays; strings (names, categories) and pids/tids are interned
into small lists and referenced by int32 codes, so per-event work is vectorised and a
rank costs a few dozen bytes per event plus its raw ``args``, which are kept untouched
for passthrough.
"""

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

NO_TS = np.iinfo(np.int64).min  # an event without "ts" (legal for "M" metadata)
NO_DUR = -1                     # an event without "dur"

# The keys held in columns; every other key of an event is kept in ``extra``.
COLUMN_KEYS = frozenset(("ph", "cat", "name", "pid", "tid", "ts", "dur", "args"))


@dataclass(eq=False)
class RankTrace:
    """One input file: its events as columns plus the file-level facts."""

    path: str
    meta: dict                      # top-level keys other than traceEvents / tracemerge
    tracemerge: Optional[dict]      # the rank-file block, None for plain traces
    base_ns: Optional[int]          # baseTimeNanoseconds, None when the file has none
    names: list                     # string table for ``name`` and ``cat`` codes
    pids: list                      # original pid values (int or str), by pid code
    tids: list                      # original tid values, by tid code
    ph: np.ndarray                  # uint8, ord(ph)
    name: np.ndarray                # int32 code into names
    cat: np.ndarray                 # int32 code into names, -1 when absent
    pid: np.ndarray                 # int32 code into pids
    tid: np.ndarray                 # int32 code into tids
    ts: np.ndarray                  # int64 ns on the file's own clock, NO_TS when absent
    dur: np.ndarray                 # int64 ns, NO_DUR when absent
    args: list                      # raw args dict (or None) per event
    extra: list                     # dict of the event's other keys (or None) per event
    warnings: list = field(default_factory=list)
    truncated: bool = False         # read up to the last complete event of a cut file

    def __len__(self):
        return len(self.ph)

    @property
    def timed(self):
        """Mask of events that carry a timestamp."""
        return self.ts != NO_TS

    def time_span(self):
        """(first, last) ns over timed events, ends of complete events included."""
        mask = self.timed
        if not mask.any():
            return None
        ts = self.ts[mask]
        ends = ts + np.maximum(self.dur[mask], 0)
        return int(ts.min()), int(ends.max())

    def metadata(self, kind):
        """{(pid code, tid code): name} of the "M" events named ``kind`` (the last one wins)."""
        code = self.code_of(kind)
        out = {}
        if code is None:
            return out
        for i in np.flatnonzero((self.ph == ord("M")) & (self.name == code)):
            a = self.args[i] or {}
            if "name" in a:
                out[(int(self.pid[i]), int(self.tid[i]))] = a["name"]
        return out

    def code_of(self, name):
        try:
            return self.names.index(name)
        except ValueError:
            return None
