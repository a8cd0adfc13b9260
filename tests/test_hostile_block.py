"""Every field of a rank file's "tracemerge" block, set to a hostile value, on every command
that reads inputs: the command ends with exit 0 (the value is taken or warned about) or
exit 3 with one line naming the file — never an internal error (exit 1)."""

import gzip
import json
import os

import pytest
from support.cli import invoke
from support.paths import SAMPLES

RANK0 = os.path.join(SAMPLES, "rpc_profiling", "rank0.json.gz")
BLOCK = json.loads(gzip.decompress(open(os.path.join(SAMPLES, "rpc_profiling", "rank1.json.gz"), "rb").read()))
HOSTILE = [2**70, -2**70, "x", [1], {"a": 1}, True, -1, 1.5, None]
COMMANDS = [["info"], ["report"], ["report", "--analysis"], ["offsets"], ["combine", "-o", "{out}", "-j", "1"]]


@pytest.mark.parametrize("field", sorted(BLOCK["tracemerge"]) + ["backend"])
def test_a_hostile_block_field_is_an_input_error_or_taken(tmp_path, field):
    path = str(tmp_path / "rank1.json")
    for value in HOSTILE:
        doc = json.loads(json.dumps(BLOCK))
        doc["tracemerge"][field] = value
        with open(path, "w") as f:
            json.dump(doc, f)
        for command in COMMANDS:
            out = str(tmp_path / "out.json")
            if os.path.exists(out):
                os.unlink(out)
            args = [command[0], RANK0, path] + [a.replace("{out}", out) for a in command[1:]]
            result = invoke(*args)
            said = (result.output or "").strip().splitlines()
            assert result.exit_code in (0, 3), (field, value, command, said[-3:])
            assert not any("internal error" in line for line in said), (field, value, command, said[-3:])
            if result.exit_code == 3:
                assert said[-1].startswith(f"tracemerge: error: {path}: "), (field, value, command, said[-1])
