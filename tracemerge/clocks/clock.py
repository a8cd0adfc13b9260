"""The clock model of one rank relative to the reference rank.

``local = ref + offset_ns + drift_ppm * 1e-6 * (ref - anchor_ns)``: a rank's clock reads
``offset_ns`` more than the reference's at ``anchor_ns`` and gains ``drift_ppm``
microseconds per second after it. Mapping to the reference is exact integer arithmetic
when there is no drift and a single float multiply per event otherwise.

``corrections`` are knots ``[ref_ns, shift_ns]`` of a piecewise-linear, monotone shift of
the aligned time, read from the summaries of merged traces written before round 9 (their
``--enforce-causality`` warped time between exchanges); today's enforcement moves a rank by
one constant shift of its ``offset_ns`` and ``anchor_ns`` instead, and leaves them empty.
"""

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

import numpy as np


@dataclass
class ClockModel:
    rank: int
    method: str                          # the method that produced the estimate
    offset_ns: int = 0
    drift_ppm: float = 0.0
    anchor_ns: int = 0
    error_bound_ns: Optional[int] = None  # |true - estimate| never exceeds it; None = unknown
    samples: int = 0
    peers: List[int] = field(default_factory=list)
    note: str = ""                        # why the estimate is weaker than asked (fallbacks, conflicts)
    corrections: List[List[int]] = field(default_factory=list)

    def to_reference(self, local_ns: Any) -> Any:
        """Reference-clock ns of local ns (int or int64 array)."""
        if not self.drift_ppm:
            out = local_ns - self.offset_ns
        else:
            scale = 1.0 + self.drift_ppm * 1e-6
            delta = np.asarray(local_ns, dtype=np.int64) - (self.offset_ns + self.anchor_ns)
            out = self.anchor_ns + np.rint(delta / scale).astype(np.int64)
            out = out if np.ndim(local_ns) else int(out)
        return out + self._shift(out, inverse=False) if self.corrections else out

    def to_local(self, ref_ns: Any) -> Any:
        """Local ns of reference-clock ns: the model itself."""
        if self.corrections:
            ref_ns = ref_ns - self._shift(ref_ns, inverse=True)
        delta = np.asarray(ref_ns, dtype=np.int64) - self.anchor_ns
        out = np.asarray(ref_ns, dtype=np.int64) + self.offset_ns + np.rint(delta * (self.drift_ppm * 1e-6)).astype(np.int64)
        return out if np.ndim(ref_ns) else int(out)

    def _shift(self, ref_ns: Any, inverse: bool) -> Any:
        """The correction at aligned ns (``inverse``: at corrected ns); float math relative to
        the first knot, since epoch ns do not fit a double."""
        knots = np.asarray(self.corrections, dtype=np.int64)
        base = knots[0, 0]
        xs = knots[:, 0] - base + (knots[:, 1] if inverse else 0)
        at = (np.asarray(ref_ns, dtype=np.int64) - base).astype(np.float64)
        out = np.rint(np.interp(at, xs.astype(np.float64), knots[:, 1].astype(np.float64))).astype(np.int64)
        return out if np.ndim(ref_ns) else int(out)

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def identity(rank: int, method: str = "wall") -> ClockModel:
    return ClockModel(rank=rank, method=method, error_bound_ns=None)


def to_reference_by_rank(clocks: Mapping[int, ClockModel], ranks: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``times`` (each on its rank's clock, ``ranks`` an int array beside it) on the reference
    clock: one sort, then a slice per rank, so the cost grows with the points, not with
    points times ranks (each slice as :meth:`ClockModel.to_reference` converts an array)."""
    out = np.empty_like(times)
    order = np.argsort(ranks, kind="stable")
    sorted_ranks = ranks[order]
    edges = np.flatnonzero(np.diff(sorted_ranks)) + 1
    for part in np.split(order, edges) if len(order) else []:
        out[part] = clocks[int(ranks[part[0]])].to_reference(times[part])
    return out
