"""Clocks from GPU completion: the kernels of one collective end together on every rank.

An all-reduce, all-gather, reduce-scatter or all-to-all kernel cannot finish on any rank
before every rank's data has arrived, and once it has, every rank finishes within the
last hop (a few µs on one host's NVLink, tens across a network): its end on each rank is
one instant, up to that hop. So for ranks ``a`` and ``b`` that both ran the kernel of a
matched collective, ``end_b - end_a`` (each on its own clock) is ``b``'s clock offset to
``a``'s plus the hop's noise. Over many collectives:

- the offset is the **median** of those differences, and the samples further from it than
  :data:`OUTLIER_MADS` scaled median absolute deviations (at least
  :data:`OUTLIER_FLOOR_NS`) are left out and said: a kernel that ended late on one rank
  (preempted, or its rank's copy-out was slow);
- the **error bound** is the spread of the samples kept (their range) plus the timestamps'
  resolution: the true offset lies within it as long as no collective's ends differ on
  the true clocks by more than the ends of the others did;
- **drift** is fitted (least squares over the samples kept) only where it is supported:
  at least :data:`DRIFT_MIN_SAMPLES` samples, and a slope more than :data:`DRIFT_SIGMAS`
  standard errors from none; the offset is then the median of the samples less the slope.

Ranks are joined through the pairs with the smallest bounds (one hub per collective:
the reference where it ran the kernel, else the lowest rank), so a rank that never ran a
collective with the reference is aligned through one that did. Only records read from
kernels (``kernel: True``: :mod:`tracemerge.inputs.kineto_collectives`) count; CPU records
end when the call was enqueued, not when the collective completed.
"""

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Set, Tuple

import numpy as np

from tracemerge.algorithms.arrays import median as median_of  # np.median imports numpy.ma
from tracemerge.clocks.bands import synchronising
from tracemerge.clocks.clock import ClockModel

METHOD = "nccl-kernel"
OUTLIER_MADS = 5.0            # samples further than this many scaled MADs from the median are outliers
OUTLIER_FLOOR_NS = 10_000     # ... and further than this: a few µs is the last hop, not an outlier
RESOLUTION_NS = 1_000         # timestamps of 2023 traces are whole µs
DRIFT_MIN_SAMPLES = 8         # fewer samples never support a slope
DRIFT_SIGMAS = 5.0            # ... nor one within this many standard errors of none


@dataclass
class KernelPair:
    """The offset line of ``b`` relative to ``a`` from their kernel ends:
    ``local_b = local_a + offset_ns + drift_ppm * 1e-6 * (local_a - anchor_ns)``."""

    a: int
    b: int
    offset_ns: float
    drift_ppm: float
    anchor_ns: int
    bound_ns: float
    samples: int
    outliers: List[Tuple[Any, int]] = field(default_factory=list)   # (collective key, ns off the median)


def is_kernel(record: Dict[str, Any]) -> bool:
    """A record read from an NCCL kernel: its end is the collective's completion on the GPU."""
    return bool(record.get("kernel"))


# which records' ends a method reads: (record) -> whether it counts
Counts = Callable[[Dict[str, Any]], bool]


def kernel_ends(collectives: Any, counts: Counts = is_kernel) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(collective, rank, end ns) of every member entry of a
    :class:`~tracemerge.correlate.match.Collectives` whose record ``counts`` (a kernel, by
    default) of a synchronising collective that it saw end, by collective then rank."""
    if not len(collectives):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    records = collectives.records
    is_kernel = np.fromiter((counts(records[i]) for i in collectives.member_record.tolist()), bool,
                            len(collectives.member_record))
    sync = np.fromiter(map(synchronising, collectives.ops), bool, len(collectives))
    keep = collectives.member_ended & is_kernel & sync[collectives.member_row]
    row = collectives.member_row[keep]
    rank = np.array(collectives.ranks, np.int64)[collectives.member_col[keep]]
    order = np.lexsort((rank, row))
    return row[order], rank[order], collectives.member_end[keep][order]


def kernel_pairs(collectives: Any, reference: int, counts: Counts = is_kernel) -> Dict[Tuple[int, int], KernelPair]:
    """{(hub, rank): KernelPair}: every rank against the hub of each collective it ran
    (the reference where it ran it, else the collective's lowest rank)."""
    row, rank, end = kernel_ends(collectives, counts)
    samples: Dict[Tuple[int, int], List[Tuple[int, int, Any]]] = {}
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if len(row) else np.zeros(0, np.int64)
    bounds = np.r_[starts, len(row)].tolist()
    keys = collectives.keys
    for k in range(len(starts)):
        lo, hi = bounds[k], bounds[k + 1]
        if hi - lo < 2:
            continue
        ranks, ends = rank[lo:hi].tolist(), end[lo:hi].tolist()
        hub = ranks.index(reference) if reference in ranks else 0
        for r, e in zip(ranks, ends):
            if r != ranks[hub]:
                samples.setdefault((ranks[hub], r), []).append((ends[hub], e - ends[hub], keys[int(row[lo])]))
    return {pair: fit_pair(pair, found) for pair, found in samples.items()}


def fit_pair(pair: Tuple[int, int], samples: List[Tuple[int, int, Any]]) -> KernelPair:
    """The :class:`KernelPair` of ``samples`` [(a's end, b's end - a's end, collective key)]."""
    x = np.array([s[0] for s in samples], np.int64)
    d = np.array([s[1] for s in samples], np.float64)
    median = float(median_of(d))
    mad = float(median_of(np.abs(d - median))) * 1.4826
    off = np.abs(d - median) > max(OUTLIER_MADS * mad, OUTLIER_FLOOR_NS)
    outliers = [(samples[i][2], int(d[i] - median)) for i in np.flatnonzero(off).tolist()]
    x, d = x[~off], d[~off]
    anchor = int(median_of(x))
    offset, drift = float(median_of(d)), 0.0
    spread = float(d.max() - d.min())
    if len(d) >= DRIFT_MIN_SAMPLES:
        t = (x - anchor).astype(np.float64)
        spread_t = float(((t - t.mean()) ** 2).sum())
        if spread_t > 0:
            slope, intercept = np.polyfit(t, d, 1)
            rest = d - (intercept + slope * t)
            # the slope's standard error from the residuals: a drift is kept only where it is
            # many times that, so noise never passes for one
            error = math.sqrt(float((rest ** 2).sum()) / max(len(d) - 2, 1) / spread_t)
            if abs(slope) > DRIFT_SIGMAS * error:
                level = float(median_of(d - slope * t))
                rest = d - (level + slope * t)
                offset, drift, spread = level, float(slope) * 1e6, float(rest.max() - rest.min())
    return KernelPair(pair[0], pair[1], offset, drift, anchor, spread + RESOLUTION_NS, int(len(d)), outliers)


def align_nccl_kernel(infos: Mapping[int, Any], reference: int, links: Any = None) -> Dict[int, ClockModel]:
    """{rank: ClockModel} from the kernel ends of matched collectives; ranks no kernel joins
    to the reference keep their wall clock and say so."""
    return align_from_ends(infos, reference, links, is_kernel, METHOD, "kernel ends", "NCCL kernel")


def align_from_ends(infos: Mapping[int, Any], reference: int, links: Any, counts: Counts, method: str, what: str,
                    which: str, widen: Callable[[Any], int] = lambda collectives: 0) -> Dict[int, ClockModel]:
    """{rank: ClockModel} from the ends of the matched collectives' records that ``counts``
    (``what``: how the notes name those ends; ``which``: one such record; ``widen``: ns added
    to every pair's bound, from the matched collectives); ranks none joins to the reference
    keep their wall clock and say so."""
    if links is None:
        from tracemerge.correlate.match import correlate  # only when called without the job's links

        links = correlate(list(infos.values()))
    pairs = widened(kernel_pairs(links.collectives, reference, counts), widen(links.collectives))
    found = solve_kernel_pairs(sorted(infos), reference, pairs, infos[reference].start_ns, method, what)
    out: Dict[int, ClockModel] = {}
    for r in sorted(infos):
        if r in found:
            out[r] = found[r]
        elif r == reference:
            out[r] = ClockModel(rank=r, method="reference", error_bound_ns=0)
        else:
            out[r] = ClockModel(rank=r, method="wall", note=(
                f"no {which} of a matched collective links rank {r} to reference rank {reference}; "
                "its wall clock is trusted."))
    return out


def widened(pairs: Dict[Tuple[int, int], KernelPair], extra_ns: int) -> Dict[Tuple[int, int], KernelPair]:
    """``pairs`` with ``extra_ns`` added to each bound."""
    if extra_ns:
        for p in pairs.values():
            p.bound_ns += extra_ns
    return pairs


def solve_kernel_pairs(ranks: List[int], root: int, pairs: Mapping[Tuple[int, int], KernelPair],
                       anchor_ns: int, method: str = METHOD, what: str = "kernel ends") -> Dict[int, ClockModel]:
    """{rank: ClockModel} of the ranks ``pairs`` join to ``root`` (``root`` included, at 0),
    along the paths of least total bound (Dijkstra)."""
    near: Dict[int, List[Tuple[int, KernelPair, int]]] = {r: [] for r in ranks}
    for (a, b), p in pairs.items():
        if a in near and b in near:
            near[a].append((b, p, 1))
            near[b].append((a, p, -1))
    if root not in near or not near[root]:
        return {}
    # (offset at anchor_ns, drift ppm, bound, samples, notes) per rank
    state: Dict[int, Tuple[float, float, float, int, List[str]]] = {root: (0.0, 0.0, 0.0, 0, [])}
    best = {root: 0.0}
    heap: List[Tuple[float, int, int, int]] = []
    done: Set[int] = set()
    order: List[Tuple[int, int, KernelPair, int]] = []

    def push(r: int) -> None:
        for n, (p_rank, p, sign) in enumerate(near[r]):
            length = best[r] + p.bound_ns
            if p_rank not in done and length < best.get(p_rank, math.inf):
                best[p_rank] = length
                heapq.heappush(heap, (length, p_rank, r, n))

    done.add(root)
    push(root)
    while heap:
        length, r, parent, n = heapq.heappop(heap)
        if r in done or length > best[r]:
            continue
        done.add(r)
        _, p, sign = near[parent][n]
        order.append((r, parent, p, sign))
        o, s, bound, samples, notes = state[parent]
        local_a = anchor_ns + o   # the parent's clock at the anchor (drift terms of second order dropped)
        if sign > 0:   # parent is a: b = a + line(local_a)
            o_r = o + p.offset_ns + p.drift_ppm * 1e-6 * (local_a - p.anchor_ns)
            s_r = s + p.drift_ppm
        else:          # parent is b: a = b - line(local_a), the line read at a's own clock
            o_r = o - p.offset_ns - p.drift_ppm * 1e-6 * (local_a - p.offset_ns - p.anchor_ns)
            s_r = s - p.drift_ppm
        said = list(notes)
        if p.outliers:
            worst = max(p.outliers, key=lambda k: abs(k[1]))
            said.append(f"{len(p.outliers)} of {p.samples + len(p.outliers)} {what} with rank "
                        f"{parent} left out as outliers (the furthest: collective {worst[0][-2]} #{worst[0][-1]}, "
                        f"{worst[1] / 1000:+.1f} µs off the median).")
        state[r] = (o_r, s_r, bound + p.bound_ns, samples + p.samples, said)
        push(r)
    out = {}
    for r, (o, s, bound, samples, notes) in state.items():
        if r == root:
            out[r] = ClockModel(rank=r, method="reference", error_bound_ns=0, peers=sorted(n for n, _, _ in near[r]))
            continue
        out[r] = ClockModel(rank=r, method=method, offset_ns=int(round(o)), drift_ppm=float(s), anchor_ns=int(anchor_ns),
                            error_bound_ns=int(math.ceil(bound)), samples=samples,
                            peers=sorted({n for n, _, _ in near[r]}), note=" ".join(notes))
    return out


def kernel_linked(links: Any, counts: Counts = is_kernel) -> bool:
    """Some matched collective has the kernel ends (``counts``' ends) of two ranks."""
    row, _, _ = kernel_ends(links.collectives, counts)
    return bool(len(row)) and bool((np.bincount(row) >= 2).any())


def prefer_kernels(cpu: Dict[int, ClockModel], kernel: Dict[int, ClockModel], method: str = METHOD,
                   what: str = "NCCL kernel ends") -> Dict[int, ClockModel]:
    """``cpu`` (the clocks of the other exchanges) with every rank the kernels reach replaced by
    its kernel clock, unless the two agree (within both bounds) and the other's bound is no
    wider: kernel ends that spread widely (hundreds of µs) say less than a tight band. Where
    they disagree the kernel ends win, and that is said. A rank on the reference's machine
    (``shared-clock``: exact) keeps it unless the kernel ends contradict it."""
    out = dict(cpu)
    for r, k in kernel.items():
        if k.method != method or r not in cpu:
            continue
        c = cpu[r]
        at = [k.anchor_ns, c.anchor_ns]   # compared where each is anchored: their drifts may differ
        gap = max(abs(int(k.to_local(t)) - int(c.to_local(t))) for t in at)
        slack = (c.error_bound_ns if c.error_bound_ns is not None else math.inf) + (k.error_bound_ns or 0)
        tighter = c.error_bound_ns is not None and (k.error_bound_ns is None or c.error_bound_ns <= k.error_bound_ns)
        if (c.method == "shared-clock" or tighter) and gap <= slack:
            continue   # they agree, and the other clock is known at least as well
        note = k.note
        if c.method not in ("wall", "reference") and gap > slack:
            cpu_bound = "?" if c.error_bound_ns is None else f"{c.error_bound_ns / 1000:.1f}"
            note = " ".join(filter(None, (note, (
                f"the CPU-side records ({c.method}) put its clock at "
                f"{(int(c.to_local(k.anchor_ns)) - k.anchor_ns) / 1000:+.1f} ± {cpu_bound} µs, its {what} at "
                f"{k.offset_ns / 1000:+.1f} ± {(k.error_bound_ns or 0) / 1000:.1f} µs: the {what} are used."))))
        out[r] = ClockModel(rank=r, method=method, offset_ns=k.offset_ns, drift_ppm=k.drift_ppm, anchor_ns=k.anchor_ns,
                            error_bound_ns=k.error_bound_ns, samples=k.samples, peers=k.peers, note=note)
    return out


def auto_with_kernels(infos: Mapping[int, Any], reference: int, links: Any, cpu: Dict[int, ClockModel],
                      counts: Counts = is_kernel, method: str = METHOD,
                      what: Tuple[str, str] = ("kernel ends", "NCCL kernel ends"),
                      widen: Callable[[Any], int] = lambda collectives: 0) -> Dict[int, ClockModel]:
    """``cpu`` (auto's clocks from every other exchange) with the kernel clocks preferred
    (:func:`prefer_kernels`); a group of ranks the kernels join but not to the reference is
    placed through its member whose ``cpu`` clock is best known."""
    pairs = widened(kernel_pairs(links.collectives, reference, counts), widen(links.collectives))
    ranks = sorted(infos)
    anchor = infos[reference].start_ns
    found = solve_kernel_pairs(ranks, reference, pairs, anchor, method, what[0])
    out = prefer_kernels(cpu, found, method, what[1])
    reached = set(found) | {reference}
    linked = {r for pair in pairs for r in pair} - reached
    while linked:
        root = min(linked, key=lambda r: (cpu[r].error_bound_ns is None, cpu[r].error_bound_ns or 0, r))
        base = cpu[root]
        at_anchor = int(base.to_local(anchor)) - anchor   # the root's offset where the kernel clocks are anchored
        group = solve_kernel_pairs(ranks, root, pairs, anchor + at_anchor, method, what[0])
        for r, m in group.items():
            if r == root:
                continue
            through = ClockModel(rank=r, method=method, offset_ns=at_anchor + m.offset_ns,
                                 drift_ppm=base.drift_ppm + m.drift_ppm, anchor_ns=anchor,
                                 error_bound_ns=None if base.error_bound_ns is None or m.error_bound_ns is None
                                 else base.error_bound_ns + m.error_bound_ns, samples=m.samples, peers=m.peers,
                                 note=" ".join(filter(None, (f"placed through rank {root}'s clock ({base.method}).",
                                                             m.note))))
            out[r] = prefer_kernels({r: cpu[r]}, {r: through}, method, what[1])[r]
        linked -= set(group) | {root}
    return out
