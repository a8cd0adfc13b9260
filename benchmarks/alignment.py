"""Clock recovery per alignment method against synthetic truth.

For each job (known offsets up to ±10 s, drift up to ±200 ppm, asymmetric heavy-tailed
delays) and each method — wall, start, rpc (drift held at 0), rpc+drift — prints the
worst clock error over the whole trace against the truth, the largest error bound the
method reported, and the theoretical bound: min δ/2 of the rank's best path to the
reference (the NTP limit of one exchange), summed along the path.

    python benchmarks/alignment.py [--ranks 4] [--seconds 120] [--calls 200] [--seeds 5]
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests.support import synth  # noqa: E402
from tracemerge.clocks.bands import rpc_constraints  # noqa: E402
from tracemerge.clocks.causality import count  # noqa: E402
from tracemerge.clocks.methods import align, exchange_clocks  # noqa: E402
from tracemerge.correlate.match import match_rpcs  # noqa: E402
from tracemerge.job import Session  # noqa: E402


def theoretical(infos, reference):
    """{rank: Σ min δ/2 along the cheapest path to the reference}."""
    half = {pair: c.widths.min() / 2 for pair, c in rpc_constraints(match_rpcs(infos).calls).items()}
    best = {reference: 0.0}
    frontier = [reference]
    while frontier:  # Bellman-Ford style relaxation; graphs are small
        nxt = []
        for (a, b), h in half.items():
            for u, v in ((a, b), (b, a)):
                if u in best and best[u] + h < best.get(v, float("inf")):
                    best[v] = best[u] + h
                    nxt.append(v)
        frontier = nxt
    return best


def run(ranks, seconds, calls, seed, pairs):
    job = synth.generate(ranks=ranks, pairs=pairs, duration_s=seconds, calls=calls, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        infos = Session.open(job.write(tmp)).infos
    by_rank = {i.rank: i for i in infos}
    methods = {
        "wall": align(infos, "wall", 0)[1],
        "start": align(infos, "start", 0)[1],
        "rpc": exchange_clocks(by_rank, 0, ("rpc",), drift=False),
        "rpc+drift": exchange_clocks(by_rank, 0, ("rpc",), drift=True),
    }
    theory = theoretical(infos, 0)
    rows = []
    for name, clocks in methods.items():
        err = synth.true_error(clocks, job.truth, 0, job.span_true)
        others = [r for r in clocks if r != 0]
        bounds = [clocks[r].error_bound_ns for r in others]
        honest = all(b is None or err[r] <= b for r, b in zip(others, bounds))
        rows.append((name, max(err[r] for r in others), None if None in bounds else max(bounds),
                     max(theory.get(r, float("nan")) for r in others), honest, count(infos, clocks)["total"]))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--calls", type=int, default=200, help="RPCs per linked pair")
    p.add_argument("--seeds", type=int, default=5)
    args = p.parse_args()
    print(f"{args.ranks} ranks, {args.seconds:.0f} s, {args.calls} RPCs per pair; errors in µs, worst over ranks\n")
    for pairs in ("star", "chain"):
        print(f"topology {pairs}")
        print(f"  {'seed':>4} {'method':<10} {'worst error':>14} {'reported bound':>15} {'theory minδ/2':>14} "
              f"{'error<=bound':>12} {'violations':>10}")
        for seed in range(args.seeds):
            for name, err, bound, theory, honest, bad in run(args.ranks, args.seconds, args.calls, seed, pairs):
                b = "-" if bound is None else f"{bound / 1e3:.1f}"
                print(f"  {seed:>4} {name:<10} {err / 1e3:>14.1f} {b:>15} {theory / 1e3:>14.1f} "
                      f"{str(honest):>12} {bad:>10}")
        print()


if __name__ == "__main__":
    main()
