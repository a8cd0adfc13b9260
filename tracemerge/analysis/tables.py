"""The analyses as tables (head, body of plain values), which every report format lays out
its own way; the report's sections (``report/sections.py``) title them."""

from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

from tracemerge.analysis.critical_path import IDLE, KINDS, Window, totals
from tracemerge.analysis.stragglers import StepTimes
from tracemerge.analysis.waits import WaitStates

# (head, body): a titled table's column names and rows of plain values
Table = Tuple[List[str], List[List[Any]]]


class DiffRow(Protocol):
    """One row of a report diff (``report.diff.DiffRow``)."""

    @property
    def delta(self) -> float: ...
    @property
    def relative(self) -> Optional[float]: ...
    @property
    def before(self) -> Optional[float]: ...
    @property
    def after(self) -> Optional[float]: ...
    @property
    def section(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def key(self) -> str: ...


class Diff(Protocol):
    """A report diff (``report.diff.ReportDiff``): its rows, largest change first."""

    @property
    def rows(self) -> Sequence[DiffRow]: ...



def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _kinds(windows: List[Window]) -> Tuple[str, ...]:
    """The kinds shown: the five, and idle where some window starts with it."""
    return KINDS + (IDLE,) if any(w.by_kind.get(IDLE) for w in windows) else KINDS


def path_windows(windows: List[Window], limit: int = 0) -> Table:
    """One row per window: its duration and the time of each kind on its path."""
    KINDS = _kinds(windows)
    head = ["Window", "Start ms", "Duration ms"] + [f"{k} ms" for k in KINDS] + ["Ranks on path (ms)"]
    t0 = windows[0].start_ns if windows else 0
    body = [[w.window, _ms(w.start_ns - t0), _ms(w.end_ns - w.start_ns)] + [_ms(w.by_kind.get(k, 0)) for k in KINDS]
            + [" ".join(f"{r}:{_ms(v)}" for r, v in sorted(w.by_rank.items()))] for w in windows]
    return head, body[:limit] if limit and limit > 0 else body


def path_where(windows: List[Window], limit: int = 0) -> Table:
    """Where the path's time went over all windows: (rank, tid, name, kind) summed, largest first."""
    acc: Dict[Tuple[int, Any, str, str], int] = {}
    for w in windows:
        for s in w.segments:
            key = (s.rank, s.tid, s.name, s.kind)
            acc[key] = acc.get(key, 0) + s.end_ns - s.start_ns
    total = sum(w.end_ns - w.start_ns for w in windows) or 1
    rows = sorted(acc.items(), key=lambda kv: (-kv[1], str(kv[0])))
    body = [[kind, rank, tid, _ms(ns), f"{ns / total:.1%}", name] for (rank, tid, name, kind), ns in rows]
    return ["Kind", "Rank", "Thread", "Path ms", "Share", "Name"], body[:limit] if limit and limit > 0 else body


def path_totals(windows: List[Window]) -> Table:
    by_rank, by_kind = totals(windows)
    KINDS = _kinds(windows)
    head = ["Rank"] + [f"{k} ms" for k in KINDS] + ["Total ms"]
    per: Dict[int, Dict[str, int]] = {}
    for w in windows:
        for s in w.segments:
            row = per.setdefault(s.rank, dict.fromkeys(KINDS, 0))
            row[s.kind] += s.end_ns - s.start_ns
    body: List[List[Any]] = [[r] + [_ms(per[r][k]) for k in KINDS] + [_ms(by_rank[r])] for r in sorted(per)]
    body.append(["all"] + [_ms(by_kind.get(k, 0)) for k in KINDS] + [_ms(sum(by_kind.values()))])
    return head, body


def rpc_waits(waits: WaitStates) -> Table:
    head = ["RPC", "Calls", "Queueing total ms", "Queueing mean ms", "Callee idle total ms", "Callee idle mean ms"]
    body = [[w.name, w.calls, _ms(w.queueing_ns), _ms(w.queueing_mean_ns), _ms(w.callee_idle_ns),
             _ms(w.callee_idle_mean_ns)] for w in waits.rpc]
    return head, body


def collective_waits(waits: WaitStates) -> Table:
    head = ["Group", "Op", "Rank", "Count", "Wait total ms", "Wait mean ms", "Last arrivals"]
    body = [[w.group, w.op, w.rank, w.count, _ms(w.wait_ns), _ms(w.wait_mean_ns), w.last_arrivals]
            for w in waits.collectives]
    return head, body


def rank_waits(waits: WaitStates) -> Table:
    head = ["Rank", "Queueing ms", "Callee idle ms", "Collective wait ms"]
    body = [[r, _ms(v["queueing_ns"]), _ms(v["callee_idle_ns"]), _ms(v["collective_ns"])]
            for r, v in waits.by_rank.items()]
    return head, body


def step_ranks(steps: StepTimes) -> Table:
    """Per rank: steps run, median step duration, median robust z."""
    head = ["Rank", "Steps", "Median step ms", "Median z", "Straggler"]
    named = {s.rank for s in steps.stragglers}
    body: List[List[Any]] = []
    for j, rank in enumerate(steps.ranks):
        d = sorted(v for row in steps.duration_ns if (v := row[j]) is not None)
        z = sorted(x for row in steps.z if (x := row[j]) is not None)
        body.append([rank, len(d), _ms(_median(d)) if d else "-", f"{_median(z):.2f}" if z else "-",
                     "yes" if rank in named else ""])
    return head, body


def stragglers_table(steps: StepTimes) -> Table:
    """The stragglers: by step time (score: median robust z) and by arrival (score: the share
    of collectives it arrived at last; the others' wait for it per step; the spans that made
    it late, above the others')."""
    head = ["Rank", "By", "Score", "Slow steps", "Excess per step ms", "Others wait per step ms",
            "Kinds that make the difference (ms per step)"]
    body = [[s.rank, s.by, f"{s.score:.2f}", f"{s.slow_steps}/{s.steps}", _ms(s.excess_ns),
             _ms(s.waits_caused_ns) if "arrival" in s.by else "-",
             ", ".join(f"{k} +{_ms(v)}" for k, v in {**s.late_work, **s.kinds}.items()) or "-"]
            for s in steps.stragglers]
    return head, body


def _median(values: Sequence[float]) -> float:
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def diff_table(diff: Diff, limit: int = 0) -> Table:
    head = ["Delta", "Relative", "Before", "After", "Section", "Metric", "Key"]

    def value(v: Optional[float], metric: str) -> str:
        if v is None:
            return "-"
        return f"{v / 1000:.3f} ms" if metric != "calls" and metric != "count" else f"{v:g}"

    rows = diff.rows[:limit] if limit and limit > 0 else diff.rows
    body = [[("+" if r.delta > 0 else "") + value(r.delta, r.metric),
             "-" if r.relative is None else f"{r.relative:+.1%}", value(r.before, r.metric),
             value(r.after, r.metric), r.section, r.metric, r.key] for r in rows]
    return head, body
