"""Salvage speed: reading a truncated trace against reading the same trace intact.

A rank of Kineto-like events (tests/support/gen_kineto.py) is read whole, then cut inside
its last event (the common crashed-rank case) and read again, as
plain JSON and as gzip cut mid-stream. Both reads run side by side, best of N, GC off as
in every timing here; the figure that matters is the ratio salvage / intact, which the
single vectorised scan keeps close to 1 (one extra pass, never a parse per event).

    python benchmarks/salvage.py [--mb 60] [--repeat 3]
"""

import argparse
import gc
import gzip
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: tests/support
from tests.support.gen_kineto import write_rank  # noqa: E402

from tracemerge.inputs.chrome import read_trace  # noqa: E402


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
        gc.enable()
        del result
    return min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=60)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_rank(tmp, 0, 1, args.mb, 0, False, False)
        data = open(path, "rb").read()
        cut = os.path.join(tmp, "cut.json")
        with open(cut, "wb") as f:
            f.write(data[:data.rindex(b'"ph"') + 3])  # inside the last event
        gz, gz_cut = os.path.join(tmp, "whole.json.gz"), os.path.join(tmp, "cut.json.gz")
        packed = gzip.compress(data, 1)
        with open(gz, "wb") as f:
            f.write(packed)
        with open(gz_cut, "wb") as f:
            f.write(packed[:len(packed) * 9 // 10])
        n = len(read_trace(path))
        salvaged = read_trace(cut)
        assert salvaged.truncated and len(salvaged) >= n - 2, (len(salvaged), n)
        print(f"{len(data) / 1e6:.1f} MB, {n} events; cut file keeps {len(salvaged)}; "
              f"gzip cut at 90% keeps {len(read_trace(gz_cut))}")
        for label, whole, broken in (("json", path, cut), ("gzip", gz, gz_cut)):
            t_whole = best(lambda: read_trace(whole), args.repeat)
            t_cut = best(lambda: read_trace(broken), args.repeat)
            print(f"{label}: intact {t_whole:.3f} s, truncated {t_cut:.3f} s, ratio {t_cut / t_whole:.2f}")


if __name__ == "__main__":
    main()
