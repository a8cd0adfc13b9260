"""Causality after alignment: counted on records and drawn spans, enforced by moving whole
ranks (every duration kept), and checked in the merged trace's events."""

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import synth
from support.cli import invoke

from tracemerge.clocks.causality import _shifted, count, review
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
    res = invoke("combine", *paths, "-o", out)
    assert res.exit_code == 0, res.output
    assert "causality: 0 violations (0 of 120 rpcs, 0 of 120 drawn span pairs, 0 of 10 collectives)" in res.output
    summary = json.load(open(out))["tracemerge"]
    assert summary["causality"]["violations_before"]["total"] == 0
    spans = _spans(out)
    assert len(spans) == 120
    for sides in spans.values():
        (c0, c1), (s0, s1) = sides["caller"], sides["callee"]
        assert c0 <= s0 and s1 <= c1


def _durations(output):
    """{(pid, tid, name, n): dur} of every complete event of a merged trace (n: its place
    among the events of that thread and name)."""
    seen, out = {}, {}
    for e in json.load(open(output))["traceEvents"]:
        if e.get("ph") == "X":
            key = (e["pid"], e["tid"], e["name"])
            seen[key] = seen.get(key, -1) + 1
            out[(*key, seen[key])] = e["dur"]
    return out


def _outside(output):
    """Drawn callee spans outside their caller spans in a merged trace (checked on its events)."""
    return sum(not (sides["caller"][0] <= sides["callee"][0] + 1e-3 and sides["callee"][1] <= sides["caller"][1] + 1e-3)
               for sides in _spans(output).values() if len(sides) == 2)


def test_enforce_causality_under_wall_keeps_durations_and_says_what_is_left(tmp_path):
    """The ranks' clocks drift (up to 100 ppm over 20 s): no constant shift of a rank removes
    every violation that --align wall leaves. Enforcement moves whole ranks only, so no
    duration changes; the count it prints is the count left, as the output's spans say."""
    _, paths = _job(tmp_path)
    plain, fixed = str(tmp_path / "plain.json"), str(tmp_path / "fixed.json")
    assert invoke("combine", *paths, "-o", plain, "--align", "wall").exit_code == 0
    res = invoke("combine", *paths, "-o", fixed, "--align", "wall", "--enforce-causality")
    assert res.exit_code == 0, res.output
    c = json.load(open(fixed))["tracemerge"]["causality"]
    assert c["violations_before"]["total"] > c["violations_after"]["total"] > 0
    assert c["violations_after"]["spans"] == _outside(fixed) > 0
    assert _outside(fixed) < _outside(plain)
    assert f"enforced: {c['violations_after']['total']} left" in res.output and "try --align auto" in res.output
    assert _durations(fixed) == _durations(plain)


def test_small_residual_violation_moves_the_rank_as_a_whole(tmp_path):
    job, paths = _job(tmp_path, collectives=0, pairs="star", ranks=2)
    infos = Session.open(paths).infos
    _, clocks = align(infos, "rpc", 0)
    # nudge rank 1 by 2 ms: a few calls now start before they were sent
    clocks[1].offset_ns += 2_000_000
    before = count(infos, clocks)
    assert before["rpc"] > 0
    fixed, report = review(infos, clocks, enforce_causality=True, reference=0)
    assert report["violations_after"]["total"] == 0
    assert 0 < report["moved_ns_max"] <= 2_000_000 + 1
    assert report["ranks_moved"] == [1]
    # one shift for the whole rank: every duration on it is what it was, to the ns
    at = np.linspace(infos[1].first_ns, infos[1].last_ns, 50).astype(np.int64)
    assert np.array_equal(np.diff(fixed[1].to_reference(at)), np.diff(clocks[1].to_reference(at)))
    # and no less would do: half a µs back toward where it was brings a violation back
    moved = int(fixed[1].to_reference(at[0]) - clocks[1].to_reference(at[0]))
    back = {**fixed, 1: _shifted(fixed[1], -int(np.sign(moved)) * 500)}
    assert count(infos, back)["total"] > 0


def test_violations_counted_without_enforcement(tmp_path):
    _, paths = _job(tmp_path)
    infos = Session.open(paths).infos
    _, wall = align(infos, "wall", 0)
    _, report = review(infos, wall)
    assert report["enforced"] is False
    assert report["violations_after"] == report["violations_before"]
    assert sum(report["violations_before"][k] for k in ("rpc", "collective", "spans")) == \
        report["violations_before"]["total"] > 0


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), method=st.sampled_from(["none", "wall", "start", "rpc", "collective", "auto"]))
def test_enforced_alignment_has_no_violation_keeps_every_duration_and_moves_no_more_than_needed(
        tmp_path_factory, seed, method):
    """Generated jobs whose ranks' clocks are off by up to 20 ms (no drift: what a constant
    shift per rank can undo; a drift it cannot is said, test above), under every --align
    method: after enforcement the output's callee spans all lie in their caller spans
    (checked on the written events), every event keeps the duration it has without
    enforcement, and each moved rank sits at the edge of what its exchanges allow. Where
    the method fitted a drift (--align collective from three collectives, up to 240 ppm;
    auto's joint fit, about 1 ppm) the fit is a guess a constant shift cannot undo: there
    the violations left are fewer, and counted as the output shows them."""
    from tracemerge.merge.combine import combine
    tmp = tmp_path_factory.mktemp("enforce")
    job = synth.generate(ranks=3, pairs="chain", duration_s=5, calls=30, collectives=3, seed=seed,
                         max_offset_ns=20_000_000, drifts=[0.0] * 3)
    opened = Session.open(job.write(str(tmp / "in")))
    plain, fixed = str(tmp / "plain.json"), str(tmp / "fixed.json")
    combine(opened, opened.align(method), plain)
    enforced = opened.align(method, enforce_causality=True)
    combine(opened, enforced, fixed)
    after = enforced.causality["violations_after"]
    assert after["spans"] == _outside(fixed)          # the count said is the output's
    assert after["total"] <= enforced.causality["violations_before"]["total"]
    assert _durations(fixed) == _durations(plain)
    bare = opened.align(method).clocks
    # a drift fitted to few exchanges (three collectives; auto's joint fit, e.g. -1.2 ppm
    # at seed 4450) is a guess that no constant shift undoes: what is left is counted, above
    if all(c.drift_ppm == 0 for c in bare.values()):
        assert after["total"] == 0
    for rank in enforced.causality.get("ranks_moved", []) if after["total"] == 0 else []:
        at = opened.info(rank).first_ns
        moved = int(enforced.clocks[rank].to_reference(at) - bare[rank].to_reference(at))
        back = {**enforced.clocks, rank: _shifted(enforced.clocks[rank], -int(np.sign(moved)) * 1_000)}
        assert count(list(opened.infos), back)["total"] > 0, (rank, moved)
