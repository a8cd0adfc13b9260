"""Causality after alignment: counted on records, enforced with local corrections, and
visible in the merged trace's events."""

import json

import numpy as np
from click.testing import CliRunner
from support import synth

from tracemerge.cli import main
from tracemerge.clocks.causality import count, review
from tracemerge.clocks.methods import align
from tracemerge.job import Session


def _job(tmp_path, **kw):
    job = synth.generate(**{"ranks": 3, "pairs": "chain", "duration_s": 20, "calls": 60, "collectives": 10,
                            "seed": 21, **kw})
    return job, job.write(str(tmp_path / "in"))


def _spans(output):
    """{rpc_id: {role: (ts, end)}} of the merged trace's RPC spans (µs)."""
    found = {}
    for e in json.load(open(output))["traceEvents"]:
        a = e.get("args") or {}
        if e.get("ph") == "X" and "rpc_id" in a:
            found.setdefault(a["rpc_id"], {})[a["role"]] = (e["ts"], e["ts"] + e["dur"])
    return found


def test_default_combine_has_no_violations_in_records_or_events(tmp_path):
    _, paths = _job(tmp_path)
    out = str(tmp_path / "out.json")
    res = CliRunner().invoke(main, ["combine", *paths, "-o", out])
    assert res.exit_code == 0, res.output
    assert "causality: 0 violations (0 of 120 rpcs, 0 of 10 collectives)" in res.output
    summary = json.load(open(out))["tracemerge"]
    assert summary["causality"]["violations_before"]["total"] == 0
    spans = _spans(out)
    assert len(spans) == 120
    for sides in spans.values():
        (c0, c1), (s0, s1) = sides["caller"], sides["callee"]
        assert c0 <= s0 and s1 <= c1


def test_enforce_causality_fixes_wall_alignment_and_reports_time_moved(tmp_path):
    _, paths = _job(tmp_path)
    out = str(tmp_path / "out.json")
    res = CliRunner().invoke(main, ["combine", *paths, "-o", out, "--align", "wall", "--enforce-causality"])
    assert res.exit_code == 0, res.output
    c = json.load(open(out))["tracemerge"]["causality"]
    assert c["violations_before"]["total"] > 0 and c["violations_after"]["total"] == 0
    assert c["moved_ns_max"] > 0 and c["points_moved"] > 0
    assert "enforced: 0 left" in res.output
    for sides in _spans(out).values():
        (c0, c1), (s0, s1) = sides["caller"], sides["callee"]
        assert c0 <= s0 + 1e-3 and s1 <= c1 + 1e-3  # µs floats of integer ns


def test_small_residual_violation_moves_only_locally(tmp_path):
    job, paths = _job(tmp_path, collectives=0, pairs="star", ranks=2)
    infos = Session.open(paths).infos
    _, clocks = align(infos, "rpc", 0)
    # nudge rank 1 by 2 ms: a few calls now start before they were sent
    clocks[1].offset_ns += 2_000_000
    before = count(infos, clocks)
    assert before["rpc"] > 0
    fixed, report = review(infos, clocks, enforce_causality=True)
    assert report["violations_after"]["total"] == 0
    assert report["moved_ns_max"] <= 2_000_000 + 1
    assert report["ranks_moved"] == [1]
    # events far from any exchange keep their time: the correction is zero at the ends
    ends = np.array([infos[1].first_ns, infos[1].last_ns], dtype=np.int64)
    assert np.abs(fixed[1].to_reference(ends) - clocks[1].to_reference(ends)).max() <= 1


def test_violations_counted_without_enforcement(tmp_path):
    _, paths = _job(tmp_path)
    infos = Session.open(paths).infos
    _, wall = align(infos, "wall", 0)
    _, report = review(infos, wall)
    assert report["enforced"] is False
    assert report["violations_after"] == report["violations_before"]
    assert report["violations_before"]["rpc"] + report["violations_before"]["collective"] == \
        report["violations_before"]["total"] > 0
