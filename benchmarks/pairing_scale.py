"""Builtins paired jointly with the clocks, from 8 ranks to 1,024: ``offsets`` and
``combine`` of a ring of machines joined by builtins alone (tests/support/native_ring.py:
each rank its own machine and clock, 100 calls to the next), wall time, peak memory and the
growth exponent in ranks, beside ``combine --align wall`` of the same files; every rank's
offset checked against the planted one and its bound. ``--previous DIR`` runs a checkout of
an earlier release (its core built) on the same files in the same rounds, rows beside.

    python benchmarks/pairing_scale.py [--ranks 8,32,128,512,1024] [--calls 100]
                                       [--previous DIR] [--dir DIR]

The figures of docs/performance.md, "Pairing at scale"."""

import argparse
import os
import sys
import tempfile
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

from scale import check_offsets, exponent, run  # noqa: E402

from tests.support.native_ring import write_ring  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="8,32,128,512,1024")
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--previous", help="a checkout of the release before (its core built)")
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tracemerge-pairing-scale"))
    args = p.parse_args()
    args.dir = os.path.abspath(args.dir)  # the commands run from each checkout
    roots = {"this": ROOT, **({"before": os.path.abspath(args.previous)} if args.previous else {})}
    growth: Dict[str, List[Tuple[int, float]]] = {}
    print("| ranks | command | " + " | ".join(f"{name} wall s / peak MB" for name in roots) + " |\n"
          "|---|---|" + "---|" * len(roots))
    for ranks in [int(r) for r in args.ranks.split(",")]:
        d = os.path.join(args.dir, f"ring{ranks}x{args.calls}")
        os.makedirs(d, exist_ok=True)
        files, offsets, _ = write_ring(d, ranks, args.calls)
        out = os.path.join(args.dir, "out")
        cmds = {"offsets": ["offsets", *files, "--format", "json", "-q"],
                "combine": ["combine", *files, "-o", out + ".json", "--force", "-q"],
                "combine --align wall": ["combine", *files, "-o", out + ".json", "--force", "-q", "--align", "wall"]}
        for label, cmd in cmds.items():
            cells = []
            for name, root in roots.items():
                wall, mem = run([sys.executable, "-m", "tracemerge", *cmd], root)
                growth.setdefault(f"{label} ({name})", []).append((ranks, wall))
                cells.append(f"{wall:.2f} / {mem:.0f}")
            print(f"| {ranks} | `{label}` | " + " | ".join(cells) + " |", flush=True)
        print(f"|  | offsets vs planted clocks: {check_offsets(files, offsets.__getitem__)} |" + " |" * len(roots),
              flush=True)
    print("\ngrowth exponent k (time ∝ ranks^k, ranks ≥ 32): " + ", ".join(
        f"{c} {exponent(v):.2f}" for c, v in growth.items()))


if __name__ == "__main__":
    main()
