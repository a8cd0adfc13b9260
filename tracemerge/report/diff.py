"""``tracemerge diff``: two runs compared, row by row, by what changed most.

Both runs are reports (:class:`tracemerge.report.Report`: key averages, RPC breakdown,
callee load). Rows are matched by key and compared metric by metric; every time is a
total over the run in µs, so deltas add up and can be ranked:

- ``rpc`` rows, per RPC key (kind, function, caller → callee): ``end-to-end``,
  ``execution``, ``queueing`` and ``transfer`` (the overhead δ without the queueing), each
  the per-call mean times the calls with both sides; and ``calls``.
- ``callee`` rows, per callee rank: ``queueing`` and ``execution`` over every call it served.
- ``key_averages`` rows, per key: ``cpu_time_total``, ``self_cpu_time_total`` and
  ``count``. RPC spans (``rpc_async#…``, ``…#remote``) are left out here: their wall time
  is what the ``rpc`` rows measure from the records, on both clocks, and would count twice.

delta = after − before; relative = delta / before (None when before is 0 or absent). Rows
are sorted by impact, |delta| of the time (counts have none), then by section and key.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from tracemerge.report.build import Report

RPC = "rpc"
CALLEE = "callee"
KEY_AVERAGES = "key_averages"
SECTIONS = (RPC, CALLEE, KEY_AVERAGES)
RPC_KINDS = ("rpc_async#", "rpc_sync#", "remote#")
TIME_METRICS = frozenset(("end-to-end", "execution", "queueing", "transfer", "cpu_time_total", "self_cpu_time_total"))


@dataclass
class DiffRow:
    section: str
    key: str
    metric: str
    before: Optional[float]      # µs (times) or a count; None: the key is not in that run
    after: Optional[float]
    delta: float
    relative: Optional[float]
    impact: float                # |delta| µs for times, 0 for counts


@dataclass
class Diff:
    before: list                 # the inputs of each run
    after: list
    rows: list = field(default_factory=list)    # [DiffRow], highest impact first
    notes: list = field(default_factory=list)


def _rpc_metrics(report):
    out = {}
    if report.rpc is None:
        return out
    for k in report.rpc.keys:
        n = k.complete
        m = {"calls": float(k.count)}
        if n and k.e2e_us:
            queue = k.queue_us.get("mean", 0.0) * n
            m.update({"end-to-end": k.e2e_us["mean"] * n, "execution": k.exec_us["mean"] * n, "queueing": queue,
                      "transfer": k.overhead_us["mean"] * n - queue})
        out[k.name] = m
    return out


def _callee_metrics(report):
    if report.rpc is None:
        return {}
    return {f"{c.name} (rank {c.callee})": {"queueing": c.queue_mean_us * c.calls, "execution": c.exec_mean_us * c.calls}
            for c in report.rpc.callees}


def _is_rpc_span(key):
    return isinstance(key, str) and key.startswith(RPC_KINDS)


def _key_metrics(report):
    out = {}
    for r in report.key_averages:
        if _is_rpc_span(r.key):
            continue
        key = r.key if not r.is_user_annotation else f"{r.key} (user annotation)"
        m = out.setdefault(key, {"cpu_time_total": 0.0, "self_cpu_time_total": 0.0, "count": 0.0})
        m["cpu_time_total"] += r.cpu_time_total
        m["self_cpu_time_total"] += r.self_cpu_time_total
        m["count"] += r.count
    return out


METRICS = {RPC: _rpc_metrics, CALLEE: _callee_metrics, KEY_AVERAGES: _key_metrics}


def diff_reports(before: "Report", after: "Report", before_inputs: Sequence[str] = (),
                 after_inputs: Sequence[str] = ()) -> Diff:
    """The :class:`Diff` of two reports."""
    out = Diff(before=list(before_inputs), after=list(after_inputs))
    for section in SECTIONS:
        b, a = METRICS[section](before), METRICS[section](after)
        for key in list(b) + [k for k in a if k not in b]:
            mb, ma = b.get(key, {}), a.get(key, {})
            for metric in list(mb) + [m for m in ma if m not in mb]:
                vb, va = mb.get(metric), ma.get(metric)
                delta = (va or 0.0) - (vb or 0.0)
                if vb is not None and va is not None and delta == 0:
                    continue
                relative = delta / vb if vb else None
                out.rows.append(DiffRow(section=section, key=key, metric=metric, before=vb, after=va, delta=delta,
                                        relative=relative, impact=abs(delta) if metric in TIME_METRICS else 0.0))
    order = {s: i for i, s in enumerate(SECTIONS)}
    out.rows.sort(key=lambda r: (-r.impact, order[r.section], r.key, r.metric))
    for side, report in (("before", before), ("after", after)):
        for note in report.notes:
            out.notes.append(f"{side}: {note}")
    return out
