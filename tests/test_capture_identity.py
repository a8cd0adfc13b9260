"""A rank given to ``profile()`` before the job is up still gets the job's world size
(issue 45): ``profile(out, rank=1)`` entered before torch.distributed is initialised writes
the world size of the group initialised inside the block, not 1."""

import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

SCRIPT = textwrap.dedent("""
    import sys
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from tracemerge.capture import profile
    with profile(sys.argv[1], rank=1, trace=False):
        dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=3)
""")


def test_world_size_comes_from_the_group_initialised_inside_the_block(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, timeout=120,
                         cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    [path] = (tmp_path / "out").glob("rank1*.json.gz")
    block = json.load(gzip.open(path))["tracemerge"]
    assert block["rank"] == 1 and block["world_size"] == 3
