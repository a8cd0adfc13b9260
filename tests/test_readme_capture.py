"""The README's two capture blocks, taken from README.md as they are and pasted unchanged
into the worker of a real 2-process RPC job (loopback, a free port): the short block,
where worker1 only serves and its block ends at once, and the block that records
everything. Each is merged with the README's command; every RPC has both sides."""

import gzip
import json
import os
import re
import textwrap

import pytest

pytest.importorskip("torch")

from support import cli  # noqa: E402
from support.jobs import free_port, run_job  # noqa: E402
from support.paths import ROOT  # noqa: E402

JOB_TIMEOUT_S = 120

# What the README leaves to the user around its block: imports, the rank, the tensors.
JOB = """\
import os, sys
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    t1, t2 = torch.ones(2), torch.ones(2)
{block}


if __name__ == "__main__":
    mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2)
"""


pytestmark = pytest.mark.job  # runs real torch jobs: CI's reference-path pass leaves it out (setup.cfg)


def _blocks():
    """(the short block, the block that records everything) of the README's Capture section,
    told apart by where RPC starts (the README leads with the second)."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme.split("## Capture", 1)[1].split("\n## ", 1)[0]
    # the RPC blocks (the section also shows a DDP job's, which tests/test_ddp_collectives.py runs the like of)
    blocks = [b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "rpc.init_rpc" in b]
    assert len(blocks) == 2, blocks
    everything = [b for b in blocks if b.index("with profile(") < b.index("rpc.init_rpc")]
    assert len(everything) == 1 and blocks[0] is everything[0], "the README leads with the block that records everything"
    return blocks[1], blocks[0]


def _run(tmp_path, block):
    (tmp_path / "job.py").write_text(JOB.format(block=textwrap.indent(block, "    ")))
    run_job(["job.py", free_port()], JOB_TIMEOUT_S, cwd=tmp_path)
    return sorted(str(p) for p in (tmp_path / "traces").iterdir())


def _events(path):
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def test_the_readme_has_the_two_blocks():
    short, everything = _blocks()
    # the short block: RPC up before the block, shut down after it
    assert short.index("rpc.init_rpc") < short.index("with profile(") < short.index("\nrpc.shutdown()")
    # the block that records everything: RPC started and shut down inside it
    assert everything.index("with profile(") < everything.index("    rpc.init_rpc") < everything.index("    rpc.shutdown()")
    for block in (short, everything):  # each can be pasted alone
        assert "from tracemerge.capture import profile" in block


@pytest.mark.parametrize("which", [0, 1], ids=["short block", "block that records everything"])
def test_the_readme_block_pasted_into_each_worker(tmp_path, which):
    files = _run(tmp_path, _blocks()[which])
    assert [os.path.basename(f) for f in files] == ["rank0.json.gz", "rank1.json.gz"]
    out = tmp_path / "trace.json"
    res = cli.run("combine", *files, "-o", out, "--force", "--report")
    assert res.exit_code == 0, res.stderr
    assert "1 RPCs: 1 with both sides, 0 caller only, 0 callee only" in res.stderr
    with open(out) as f:
        doc = json.load(f)
    spans = {e["args"]["role"]: e for e in doc["traceEvents"] if e.get("ph") == "X" and "rpc_id" in e.get("args", {})}
    caller, callee = spans["caller"], spans["callee"]
    assert caller["name"] == "rpc_async#aten::add(worker0 -> worker1)" and callee["name"] == caller["name"] + "#remote"
    # one machine, one clock: the callee's span lies inside the caller's
    assert caller["ts"] <= callee["ts"] and callee["ts"] + callee["dur"] <= caller["ts"] + caller["dur"]
    served = [e for e in _events(files[1]) if e.get("name") == "aten::add"]
    if which == 1:
        assert served  # worker1 recorded while it served: its own op is in its file
    # in the short block worker1's own block ends at once, but how soon depends on the
    # machine: the call may or may not reach it while its profiler is still stopping, so
    # its file may or may not hold the op; both sides are there either way (above)
    assert (tmp_path / "trace.report.txt").read_text().count("rpc_async#aten::add(worker0 -> worker1)") >= 2
