"""The aligned job as tables: pandas DataFrames in a notebook, Arrow, Parquet for SQL and clusters.

:func:`load` opens a job (:meth:`tracemerge.job.Job.open`, aligned once), reads each rank
once and returns :class:`Tables`; :func:`tracemerge.tables.export.export` writes the same
tables as Parquet, ``events`` partitioned by rank (``tracemerge export``). docs/tables.md
describes every column and answers questions on the bundled samples with them.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Union

from tracemerge.job import Alignment, AlignRequest, Job, reads
from tracemerge.place.selection import Selection
from tracemerge.tables.events import EVENT_COLUMNS, event_schema, require_arrow
from tracemerge.tables.parts import JOB_TABLES, build

if TYPE_CHECKING:
    import os

    import pandas as pd
    import pyarrow as pa

TABLES = ("events",) + JOB_TABLES


@dataclass(frozen=True, repr=False)
class Tables:
    """Every table of one job as Arrow (``arrow[name]``), and as pandas DataFrames by
    attribute (``tables.events``, ``tables.rpcs``, …; pandas is the optional extra)."""

    arrow: Mapping[str, "pa.Table"]
    job: Job = field(repr=False)
    alignment: Alignment = field(repr=False)

    def __repr__(self) -> str:
        return "Tables(" + ", ".join(f"{name}: {len(table)} rows" for name, table in self.arrow.items()) + ")"

    def df(self, name: str) -> "pd.DataFrame":
        """Table ``name`` as a pandas DataFrame (nullable integer columns stay integers)."""
        try:
            import pandas as pd
        except ImportError:
            from tracemerge.errors import UsageError
            raise UsageError("DataFrames need pandas: pip install 'tracemerge[tables]'") from None
        table = self.arrow[name]
        # ns times with nulls must not become floats: pandas' nullable Int64 keeps every ns
        return table.to_pandas(types_mapper={require_arrow().int64(): pd.Int64Dtype(),
                                             require_arrow().int32(): pd.Int32Dtype()}.get)

    def __getattr__(self, name: str) -> "pd.DataFrame":
        if name == "arrow":  # not set yet (copy, pickle): no table
            raise AttributeError(name)
        # the tables it holds, not TABLES: a section registered after import adds one
        if name in self.arrow:
            return self.df(name)
        raise AttributeError(f"no table {name!r}; the tables are {', '.join(self.arrow)}")

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self.arrow))


def load(paths: Union[str, "os.PathLike[str]", Iterable[Union[str, "os.PathLike[str]"]]], align: str = "auto", reference: Optional[int] = None,
         offsets: Optional[Mapping[int, int]] = None, enforce_causality: bool = False, rank_from: str = "auto",
         cycle: Optional[int] = None, skip_bad: bool = False, strict: bool = False,
         ranks: Optional[Iterable[int]] = None, window_ms: Optional[tuple] = None,
         min_duration_us: Optional[float] = None, drop_categories: Iterable[str] = (),
         overview_us: Optional[float] = None, group_by: str = "name", critical_path: bool = True, gpu: bool = True, engine: Any = None) -> Tables:
    """The job of ``paths`` as :class:`Tables`, aligned as ``tracemerge combine`` aligns it
    (``align``/``reference``/``offsets``/``enforce_causality``) and selected as it selects
    (``ranks``, ``window_ms``, ``min_duration_us``, ``drop_categories``, ``overview_us``): ``events`` holds
    the merged trace's events. ``critical_path``, ``gpu``: find the cross-rank critical path
    and each rank's GPU time too (from the same read of each rank). Every rank's events are held in memory: for a job
    larger than memory, ``tracemerge export`` writes them rank by rank to Parquet."""
    job = Job.open(paths, rank_from, engine=engine, skip_bad=skip_bad, strict=strict, cycle=cycle, read=reads.columns,
                   align=AlignRequest(align, reference, dict(offsets or {}), enforce_causality))
    selection = Selection(ranks=None if ranks is None else frozenset(ranks), window_ms=window_ms,
                          min_duration_us=min_duration_us, drop_categories=frozenset(drop_categories),
                          overview_us=overview_us)
    built = build(job, None, selection, None, group_by, critical_path=critical_path, gpu=gpu)
    arrow = require_arrow()
    pieces = [p.events for p in sorted(built.parts, key=lambda p: (p.rank, p.part)) if p.events is not None]
    events = arrow.concat_tables(pieces) if pieces else event_schema().empty_table()
    tables: Dict[str, "pa.Table"] = {"events": events, **built.tables}
    return Tables(tables, job, built.alignment)


__all__ = ("EVENT_COLUMNS", "TABLES", "Tables", "load")
