"""Builtins paired and clocks recovered across machines, on a real job's files.

The job is tests/test_pairing_real_job.py's (3 TensorPipe workers on loopback: two callers
sending builtins, rpc_sync and rpc_async in flight together, to one callee with 8 server
threads busy at the first call; Python functions and async_execution besides; every
builtin a tensor of its own size, shapes recorded: the planted truth of which op served
it). Its files are given other machines' clocks (the test's four skews) and read as:

- *mixed*: the files as captured, shapes taken out (time and serve order left);
- *mixed, shapes*: as captured, shapes kept;
- *builtin-only*: shapes out, every call but the builtins' taken out (records, callee
  sides, spans: the clocks rest on the readings, the paired calls and the gloo
  collectives of init_rpc and shutdown);
- *wrapped*: a capture with ``wrap_builtins=True`` (``--wrapped DIR``; another run).

Per row: builtins paired (none may be wrong: checked against the planted truth), those the
shared clock pairs, each moved rank's largest clock error over the trace and its bound,
causality violations (calls and spans; all). Prints a Markdown table.

    python benchmarks/pairing_across_machines.py [--capture DIR] [--wrapped DIR]
      (a DIR without rank files is captured into first: ~1 min each)
"""

import argparse
import glob
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import orjson

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import test_pairing_real_job as job_module  # noqa: E402

from tracemerge import AlignRequest, Job  # noqa: E402
from tracemerge.inputs.chrome import read_bytes  # noqa: E402


def capture(where, wrapped):
    if not glob.glob(os.path.join(where, "rank*.json.gz")):
        os.makedirs(where, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
        subprocess.run([sys.executable, job_module.__file__, where] + (["wrapped"] if wrapped else []),
                       check=True, env=env, timeout=job_module.JOB_TIMEOUT_S, capture_output=True)
    return pathlib.Path(where)


def builtin_only(docs):
    """The documents with every call but the builtins' taken out: records, callee sides and
    the spans naming them (the events' ``rpc_id``), so no wrapped call is an exchange."""
    native = {r["rpc_id"] for doc in docs for r in doc["tracemerge"]["rpcs"] if r.get("native")}
    out = []
    for doc in docs:
        block = dict(doc["tracemerge"], collectives=[], remote_sides=[])
        block["rpcs"] = [r for r in block["rpcs"] if r.get("native")]
        events = [e for e in doc["traceEvents"] if (e.get("args") or {}).get("rpc_id", next(iter(native))) in native]
        out.append(dict(doc, tracemerge=block, traceEvents=events))
    return out


def row(kind, docs, truth, shared, skew):
    paths, moved = job_module._moved(docs, pathlib.Path(tempfile.mkdtemp()), job_module.SKEWS[skew])
    job = Job.open(paths, align=AlignRequest("auto"))
    got = job_module._pairs(job)
    wrong = sum(1 for k, v in got.items() if k in truth and job_module._on(moved, truth)[k] != v)
    cells = [kind, skew, f"{len(got)} of {len(truth)}" if truth else "—", str(len(shared)) if truth else "—", str(wrong)]
    t = np.linspace(job.info(0).start_ns, job.info(0).stop_ns, 33).astype(np.int64)
    for r in (1, 2):
        model = job.alignment.clocks[r]
        error = np.abs(np.asarray(model.to_reference(moved[r].to_local(t))) - t).max()
        cells.append(f"{error / 1e3:,.0f} / {model.error_bound_ns / 1e3:,.0f} µs ({model.method})")
    v = job.alignment.causality["violations_before"]
    cells.append(f"{v['rpc'] + v['spans']} ({v['total']})")
    return "| " + " | ".join(cells) + " |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", default=os.path.join(tempfile.gettempdir(), "tracemerge-pairing-job"))
    ap.add_argument("--wrapped", default=None)
    args = ap.parse_args()
    docs, truth, shared = job_module._read(capture(args.capture, False), pathlib.Path(tempfile.mkdtemp()))
    print("| job | clocks given | builtins paired | on the shared clock | wrong | rank 1: error / bound | "
          "rank 2: error / bound | violations: calls, spans (all) |")
    print("|---|---|---|---|---|---|---|---|")
    bare = job_module._without_shapes(docs)
    only = builtin_only(bare)
    only_shared = job_module._pairs(Job.open(job_module._written(only, pathlib.Path(tempfile.mkdtemp()))))
    for skew in sorted(job_module.SKEWS):
        print(row("mixed", bare, truth, shared, skew))
        print(row("mixed, shapes", docs, truth, truth, skew))
        print(row("builtin-only", only, truth, only_shared, skew))
    if args.wrapped:
        wrapped = capture(args.wrapped, True)
        wdocs = [orjson.loads(read_bytes(p)) for p in sorted(glob.glob(str(wrapped / "rank*.json.gz")))]
        for skew in sorted(job_module.SKEWS):
            print(row("wrapped", wdocs, {}, {}, skew))


if __name__ == "__main__":
    main()
