"""The `tracemerge offsets` command."""

import json
import re

from support import synth
from support.cli import invoke

FIELDS = ["rank", "method", "offset_ns", "drift_ppm", "anchor_ns", "error_bound_ns", "samples", "peers"]


def _paths(tmp_path, **kw):
    job = synth.generate(**{"ranks": 3, "pairs": "star", "duration_s": 30, "calls": 50, "seed": 31, **kw})
    return job, job.write(str(tmp_path))


def test_json_has_documented_fields_and_recovers_truth(tmp_path):
    job, paths = _paths(tmp_path)
    res = invoke("offsets", *paths, "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["reference"] == 0 and [r["rank"] for r in doc["ranks"]] == [0, 1, 2]
    for row in doc["ranks"]:
        assert list(row) == FIELDS + ["machine", "hostname"]
    # files without a boot_id are a machine each
    assert [(m["machine"], m["ranks"], m["boot_id"]) for m in doc["machines"]] == [(r, [r], "") for r in range(3)]
    assert [row["machine"] for row in doc["ranks"]] == [0, 1, 2]
    for row in doc["ranks"][1:]:
        truth = synth.true_relative(job.truth, row["rank"], 0, job.span_true)
        assert row["method"] == "rpc" and row["samples"] == 50 and row["peers"] == [0]
        at_anchor = truth.to_local(row["anchor_ns"]) - row["anchor_ns"]
        assert abs(row["offset_ns"] - at_anchor) <= row["error_bound_ns"]
    assert "causality: 0 violations" in res.stderr


def test_reference_and_forced_offset(tmp_path):
    _, paths = _paths(tmp_path)
    res = invoke("offsets", *paths, "--format", "json", "--reference", "1", "--offset", "2=12345")
    assert res.exit_code == 0, res.stderr
    rows = {r["rank"]: r for r in json.loads(res.stdout)["ranks"]}
    assert rows[1]["method"] == "reference" and rows[1]["offset_ns"] == 0
    assert rows[0]["method"] == "rpc" and rows[0]["peers"] == [1, 2]  # the star centre
    assert rows[2]["method"] == "forced" and rows[2]["offset_ns"] == 12345 and rows[2]["error_bound_ns"] is None


def test_table_and_fallback_warning(tmp_path):
    _, paths = _paths(tmp_path, pairs=[(0, 1)])
    res = invoke("offsets", *paths)
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == FIELDS + ["machine"]
    for r, line in enumerate(lines[-3:]):
        assert re.fullmatch(rf"machine {r}: \S+ \(no boot_id\): rank {r}", line), line
    assert lines[3].split()[:2] == ["2", "wall"] and lines[3].split()[5] == "-"
    # said once: the job's warning that rank 2 is linked to no other rank, not again as a clock note
    linked = [line for line in res.stderr.splitlines() if "rank 2" in line and
              ("is linked to no other rank" in line or "no exchange links rank 2 to reference rank 0" in line)]
    assert len(linked) == 1, res.stderr


def test_bad_reference_is_one_line_error(tmp_path):
    _, paths = _paths(tmp_path)
    res = invoke("offsets", *paths, "--reference", "7")
    assert res.exit_code == 2  # a usage error: the option names a rank no input has
    assert res.stderr.strip() == "tracemerge: error: --reference 7: no input has that rank (ranks: [0, 1, 2])"
