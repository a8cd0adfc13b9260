"""The clock model of one rank relative to the reference rank.

``local = ref + offset_ns + drift_ppm * 1e-6 * (ref - anchor_ns)``: a rank's clock reads
``offset_ns`` more than the reference's at ``anchor_ns`` and gains ``drift_ppm``
microseconds per second after it. Mapping to the reference is exact integer arithmetic
when there is no drift and a single float multiply per event otherwise.
"""

from dataclasses import asdict, dataclass, field
from typing import Optional

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
    peers: list = field(default_factory=list)

    def to_reference(self, local_ns):
        """Reference-clock ns of local ns (int or int64 array)."""
        if not self.drift_ppm:
            return local_ns - self.offset_ns
        scale = 1.0 + self.drift_ppm * 1e-6
        delta = np.asarray(local_ns, dtype=np.int64) - (self.offset_ns + self.anchor_ns)
        out = self.anchor_ns + np.rint(delta / scale).astype(np.int64)
        return out if np.ndim(local_ns) else int(out)

    def to_local(self, ref_ns):
        """Local ns of reference-clock ns: the model itself."""
        delta = np.asarray(ref_ns, dtype=np.int64) - self.anchor_ns
        out = np.asarray(ref_ns, dtype=np.int64) + self.offset_ns + np.rint(delta * (self.drift_ppm * 1e-6)).astype(np.int64)
        return out if np.ndim(ref_ns) else int(out)

    def as_dict(self):
        return asdict(self)


def identity(rank, method="wall"):
    return ClockModel(rank=rank, method=method, error_bound_ns=None)
