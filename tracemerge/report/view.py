"""What a report section shows, as a few primitives every report format draws.

A section's ``view`` (:class:`~tracemerge.report.sections.Section`) returns a list of these,
plain data only; each renderer draws them by their type and never by the section's name, so
a new section made of them shows in every format with no renderer changed:

- :class:`Findings`: lines said before anything else of the section (a failed job's).
- :class:`Table`: a titled table of plain cells, laid out ``ALIGNED`` (sized to its cells),
  ``FIXED`` (torch's fixed-width columns, the first sized to its names) or ``TORCH`` (torch's
  ``key_averages().table()``: no title line in the text table, names cut to fit), with the
  lines under it (``footer``).
- :class:`Figure`: plots with their caption, for the formats that draw (HTML); the text
  formats leave figures out. Its plots: :class:`Bars` (a value per label around zero, with
  error bars), :class:`Latency` (a distribution per label: p50–p99 box, p95 tick, max
  whisker, and the mean split into parts), :class:`Heat` (rows of bins shaded by value) and
  :class:`Spans` (windows of coloured segments, one row per lane).
"""

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

ALIGNED = "aligned"   # columns sized to their cells, numbers right and the last (a name) left
FIXED = "fixed"       # torch's fixed-width columns, the first sized to its longest cell
TORCH = "torch"       # torch's key-averages table: the first column's names cut to fit, no title line


@dataclass(frozen=True)
class Findings:
    """Lines said first, each a sentence; the text table prefixes each with ``label``."""

    label: str
    lines: List[str]


@dataclass(frozen=True)
class Table:
    """A titled table. ``heading``: its title where the format heads the section with the
    section's title (HTML), None for the title; a table whose heading is the section's title
    gets none of its own. ``code``: its first column's cells are names of code (ops, RPC
    keys), which Markdown quotes."""

    title: str
    head: List[str]
    body: List[List[Any]]
    layout: str = ALIGNED
    footer: Tuple[str, ...] = ()
    heading: Optional[str] = None
    code: bool = False

    @property
    def shown_heading(self) -> str:
        return self.title if self.heading is None else self.heading


@dataclass(frozen=True)
class Strong:
    """Words of a caption set in bold."""

    text: str


@dataclass(frozen=True)
class Bars:
    """One bar per label from a zero line (values may be negative), each with its value and
    ``unit`` beside it and, when ``errors`` gives one, its error bar."""

    labels: List[str]
    values: List[float]
    unit: str
    errors: Optional[List[float]] = None


@dataclass(frozen=True)
class Distribution:
    """One label's distribution, µs: quantiles, and its mean split into ``parts`` (in the
    order of :attr:`Latency.parts`)."""

    label: str
    p50: float
    p95: float
    p99: float
    max: float
    mean: float
    parts: Tuple[float, ...]


@dataclass(frozen=True)
class Latency:
    """Distributions on one axis from 0 (``axis`` its title, in ms); ``parts`` names the
    parts of each mean, ``split`` says them under each row."""

    rows: List[Distribution]
    parts: Tuple[str, ...]
    split: str
    axis: str


@dataclass(frozen=True)
class Heat:
    """Rows of equal bins from one start, each bin shaded by its value over ``peak``;
    ``span_ms`` the bins' whole span, ``axis`` its title."""

    rows: List[Tuple[str, List[float]]]
    peak: float
    span_ms: float
    axis: str


@dataclass(frozen=True)
class Span:
    """A segment of a window: its lane (an index into :attr:`SpanWindow.lanes`), its time,
    its kind (its colour; one not in :attr:`Spans.kinds` is drawn grey) and its tooltip."""

    lane: int
    start_ns: int
    end_ns: int
    kind: str
    tip: str


@dataclass(frozen=True)
class SpanWindow:
    label: str
    start_ns: int
    end_ns: int
    lanes: List[str]
    spans: List[Span]


@dataclass(frozen=True)
class Spans:
    """Windows of segments, each window on its own scale, its axis in ms from ``t0_ns``
    (``axis`` its title); the format draws the longest few. ``kinds``: the legend's, in order."""

    windows: List[SpanWindow]
    kinds: Tuple[str, ...]
    t0_ns: int
    axis: str


Plot = Union[Bars, Latency, Heat, Spans]
Caption = Tuple[Union[str, Strong], ...]


@dataclass(frozen=True)
class Figure:
    """Plots under their caption (``caption_class``: how the page styles it)."""

    plots: Tuple[Plot, ...]
    caption: Caption = ()
    caption_class: str = ""


Item = Union[Findings, Table, Figure]
View = Sequence[Item]
