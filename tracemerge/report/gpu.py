"""GPU time per rank, from a rank's device events (what Holistic Trace Analysis answers for
one rank at a time, here for every rank of the report).

Per rank, over its GPU window (first device event's start to last one's end, all its
devices and streams together):

- **compute**, **communication**, **memory**: the time at least one kernel of that kind
  ran (the union of their intervals, so concurrent streams count once). A kernel is
  communication when its name matches one of the known families of communication
  kernels (:data:`COMM_FAMILIES`: NCCL, RCCL, DeepEP, custom all-reduce kernels such as
  vLLM's ``cross_device_reduce``, …) or a ``--comm-kernel`` regex, memory for memcpy /
  memset events, compute otherwise; ``communication_by`` says which rule took how many
  kernels and how much time (the first rule that matches a name takes it);
- **idle**: the window minus the union of all device activity;
- **overlap**: the time communication and compute ran at once, and its share of the
  communication time (how much of it was hidden behind compute);
- **launch delay**: per kernel linked to its runtime call (``args.correlation``), the
  kernel's start minus the call's start — the CPU → GPU queueing (mean, p50, p95, max);
- **top kernels**: the device rows (name, count, total) with the most time.

Times are on the rank's own clock: only differences within the rank are taken, so the
alignment does not change them.
"""

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from msgspec import UNSET

from tracemerge.algorithms.arrays import distinct, percentiles
from tracemerge.algorithms.nesting import category_codes
from tracemerge.model import RankTrace
from tracemerge.report.keyavg import Correlations, correlations, device_events

# the known families of communication kernels, by name (case-insensitive search): (rule, regex)
COMM_FAMILIES: Tuple[Tuple[str, str], ...] = (
    ("nccl", r"nccl"),
    ("rccl", r"rccl"),
    ("deepep", r"deep_?ep"),                                   # DeepEP's dispatch/combine kernels
    ("custom all-reduce", r"cross_device_reduce|custom_?all_?reduce|(?:one|two)_?shot_?all_?reduce"
                          r"|allreduce_fusion|all_?reduce_kernel"),  # vLLM, TensorRT-LLM, SGLang
    ("nvshmem", r"nvshmem"),
    ("msccl", r"msccl"),
)
MEMORY_CATS = frozenset(("gpu_memcpy", "gpu_memset", "memcpy", "memset"))
# device events that are not GPU work of their own: a user annotation's GPU copy spans the
# kernels it encloses, a sync is the host waiting, a profiler range is a marker
NOT_WORK_CATS = frozenset(("gpu_user_annotation", "cuda_sync", "cuda_profiler_range"))
TOP_KERNELS = 5


@dataclass
class GpuRank:
    """One rank's GPU time (µs)."""

    rank: int
    window_us: float
    compute_us: float
    communication_us: float
    memory_us: float
    idle_us: float
    overlap_us: float                       # communication while compute ran
    launch_delay_us: Dict[str, float] = field(default_factory=dict)   # {mean, p50, p95, max, count}
    top_kernels: List[dict] = field(default_factory=list)            # [{name, count, total_us}]
    # {rule: {kernels, count, total_us}}: what each communication rule classified
    communication_by: Dict[str, dict] = field(default_factory=dict)

    @property
    def overlap_share(self) -> Optional[float]:
        """The share of communication time hidden behind compute (None without communication)."""
        return self.overlap_us / self.communication_us if self.communication_us > 0 else None


def _union_ns(start: np.ndarray, end: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The disjoint intervals covering [start, end) intervals, sorted."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    # a new interval begins where a start lies past every earlier end
    new = np.concatenate(([True], s[1:] > e[:-1]))
    firsts = np.flatnonzero(new)
    lasts = np.concatenate((firsts[1:] - 1, [len(s) - 1]))
    return s[firsts], e[lasts]


def _length(start: np.ndarray, end: np.ndarray) -> int:
    s, e = _union_ns(start, end)
    return int((e - s).sum())


MAX_PATTERN = 10_000  # characters of a --comm-kernel regex: a kernel's name, or an alternation of a few hundred


def comm_kernel_pattern(rx: str) -> "re.Pattern[str]":
    """``rx`` compiled, under the regex engine's own bounds: a repeat count past its limit
    (``a{4294967296}``: OverflowError) or ~1,000 nested groups (RecursionError) ended the
    command in an internal error; each is a ValueError naming the pattern, as a syntax error is."""
    if len(rx) > MAX_PATTERN:
        raise ValueError(f"{rx[:40]!r}... is longer than {MAX_PATTERN} characters")
    try:
        return re.compile(rx)
    except re.error as e:
        raise ValueError(f"{rx!r} is no regular expression: {e}") from None
    except OverflowError as e:
        raise ValueError(f"{rx!r} asks more than the regex engine holds ({e})") from None
    except RecursionError:
        raise ValueError(f"{rx[:40]!r}{'...' if len(rx) > 40 else ''} nests its groups deeper than the regex "
                         "engine follows") from None


def comm_rules(extra: Sequence[str] = ()) -> List[Tuple[str, "re.Pattern[str]"]]:
    """The communication rules: :data:`COMM_FAMILIES`, then each ``--comm-kernel`` regex
    (named by itself)."""
    return ([(name, re.compile(rx, re.IGNORECASE)) for name, rx in COMM_FAMILIES]
            + [(f"--comm-kernel {rx}", comm_kernel_pattern(rx)) for rx in extra])


def gpu_rank(trace: RankTrace, rank: int, pids: Optional[np.ndarray] = None,
             comm_kernels: Sequence[str] = (), links: Optional[Correlations] = None) -> Optional[GpuRank]:
    """The :class:`GpuRank` of one rank's trace (of a merged trace: of its events on the
    pid codes ``pids``); None when it has no device activity. ``comm_kernels``: regexes of
    further communication kernels' names (``--comm-kernel``); ``links``: the trace's
    correlations when the caller has them (the key averages read them too)."""
    dev = device_events(trace)
    if pids is not None:
        dev = dev[np.isin(trace.pid[dev], pids)]
    work = dev[~np.isin(trace.cat[dev], category_codes(trace, NOT_WORK_CATS.__contains__))]
    if not len(work):
        return None
    start = trace.ts[work]
    end = start + trace.dur[work]
    memory = np.isin(trace.cat[work], category_codes(trace, MEMORY_CATS.__contains__))
    rules = comm_rules(comm_kernels)
    rule_of = np.full(len(trace.names), -1, np.int64)   # by name code: the first rule that matches it
    for code in distinct(trace.name[work]).tolist():
        name = trace.names[code]
        rule_of[code] = next((k for k, (_, rx) in enumerate(rules) if isinstance(name, str) and rx.search(name)), -1)
    which = np.where(memory, -1, rule_of[trace.name[work]])
    comm = which >= 0
    compute = ~memory & ~comm
    window = int(end.max() - start.min())
    busy = _length(start, end)
    t_compute, t_comm = _length(start[compute], end[compute]), _length(start[comm], end[comm])
    both = compute | comm
    overlap = t_compute + t_comm - _length(start[both], end[both])
    out = GpuRank(rank=rank, window_us=window / 1000, compute_us=t_compute / 1000, communication_us=t_comm / 1000,
                  memory_us=_length(start[memory], end[memory]) / 1000, idle_us=(window - busy) / 1000,
                  overlap_us=overlap / 1000, launch_delay_us=_launch_delays(trace, work, links), top_kernels=[])
    for k, (rule, _) in enumerate(rules):
        mine = which == k
        if mine.any():
            out.communication_by[rule] = {"kernels": int(len(distinct(trace.name[work][mine]))),
                                          "count": int(mine.sum()), "total_us": float(trace.dur[work][mine].sum()) / 1000}
    names, inv = np.unique(trace.name[work], return_inverse=True)
    total = np.bincount(inv, weights=trace.dur[work], minlength=len(names))
    count = np.bincount(inv, minlength=len(names))
    for i in np.argsort(-total, kind="stable")[:TOP_KERNELS]:
        out.top_kernels.append({"name": trace.names[names[i]], "count": int(count[i]), "total_us": float(total[i]) / 1000})
    return out


def _launch_delays(trace: RankTrace, work: np.ndarray, links: Optional[Correlations] = None) -> Dict[str, float]:
    """Kernel start minus its runtime call's start, over the device events linked to one."""
    links = correlations(trace) if links is None else links
    call_start: Dict[object, int] = {}
    for ts, v in zip(trace.ts[links.runtime].tolist(), links.of(links.runtime.tolist())):
        if v is not UNSET:
            call_start[v] = ts
    delays = [ts - call_start[v]
              for ts, v in zip(trace.ts[work].tolist(), links.of(work.tolist(), missing=None))
              if v is not UNSET and v in call_start]
    if not delays:
        return {}
    d = np.array(delays, dtype=np.float64) / 1000
    p50, p95 = percentiles(d, (50, 95))
    return {"count": len(delays), "mean": float(d.mean()), "p50": p50, "p95": p95, "max": float(d.max())}


def gpu_rows(ranks: List[GpuRank]) -> Tuple[List[str], List[list]]:
    """The GPU section's table: one row per rank."""
    head = ["Rank", "GPU window ms", "Compute %", "Communication %", "Memory %", "Idle %", "Comm overlapped %",
            "Launch delay p50 us", "p95 us", "Top kernel", "Communication by"]

    def pct(us: float, of: float) -> str:
        return f"{100 * us / of:.1f}" if of > 0 else "-"

    body = []
    for g in ranks:
        d = g.launch_delay_us
        share = g.overlap_share
        top = g.top_kernels[0]["name"] if g.top_kernels else "-"
        body.append([g.rank, f"{g.window_us / 1000:.3f}", pct(g.compute_us, g.window_us),
                     pct(g.communication_us, g.window_us), pct(g.memory_us, g.window_us), pct(g.idle_us, g.window_us),
                     f"{100 * share:.1f}" if share is not None else "-",
                     f"{d['p50']:.1f}" if d else "-", f"{d['p95']:.1f}" if d else "-",
                     top if len(top) <= 60 else top[:57] + "...",
                     ", ".join(f"{rule}: {c['count']}" for rule, c in g.communication_by.items()) or "-"])
    return head, body
