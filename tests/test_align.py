"""Alignment against known truth: synthetic jobs and skewed real captures."""

import glob
import gzip
import os

import numpy as np
import orjson
import pytest
from support import synth

from tracemerge.clocks.bands import DRIFT_LIMIT_PPM, Constraints, _Lines, _lines, rpc_constraints, stack
from tracemerge.clocks.causality import count
from tracemerge.clocks.clock import ClockModel
from tracemerge.clocks.graph import solve
from tracemerge.clocks.methods import align, exchange_clocks
from tracemerge.correlate.match import match_rpcs
from tracemerge.job import AlignRequest, Job, Session

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "samples")


def infos_of(job, tmp_path, kineto=False):
    return Session.open(job.write(str(tmp_path), kineto=kineto)).infos


def min_half_delta(infos, rank, peer):
    """Theoretical bound of a direct pair: half the smallest round-trip excess δ."""
    cons = rpc_constraints(match_rpcs(infos).calls)
    return cons[tuple(sorted((rank, peer)))].widths.min() / 2


@pytest.mark.parametrize("seed", range(6))
def test_rpc_drift_recovers_every_rank_within_bound_and_theory(tmp_path, seed):
    job = synth.generate(ranks=4, pairs="star", duration_s=120, calls=150, seed=seed)
    infos = infos_of(job, tmp_path)
    _, clocks = align(infos, "rpc", 0)
    err = synth.true_error(clocks, job.truth, 0, job.span_true)
    for r in (1, 2, 3):
        c = clocks[r]
        assert c.method == "rpc" and c.samples == 150 and c.peers == [0]
        assert err[r] <= c.error_bound_ns, (r, err[r], c.error_bound_ns)
        assert err[r] <= min_half_delta(infos, r, 0), (r, err[r])
        truth = synth.true_relative(job.truth, r, 0, job.span_true)
        assert abs(c.drift_ppm - truth.drift_ppm) < 1.0
    assert count(infos, clocks)["total"] == 0


def test_drift_matters_over_a_long_run(tmp_path):
    job = synth.generate(ranks=2, pairs="star", duration_s=300, calls=100, seed=11, drifts=[0.0, 150.0])
    infos = infos_of(job, tmp_path)
    by_rank = {i.rank: i for i in infos}
    flat = exchange_clocks(by_rank, 0, ("rpc",), drift=False)
    fitted = exchange_clocks(by_rank, 0, ("rpc",), drift=True)
    e_flat = synth.true_error(flat, job.truth, 0, job.span_true)[1]
    e_fit = synth.true_error(fitted, job.truth, 0, job.span_true)[1]
    assert e_flat > 10_000_000          # 150 ppm over 300 s: ~22 ms at the ends
    assert e_fit < 100_000
    # both bounds stay honest: the drift-free one covers the drift it cannot see
    assert e_flat <= flat[1].error_bound_ns and e_fit <= fitted[1].error_bound_ns


@pytest.mark.parametrize("seed", range(4))
def test_bound_never_below_true_error_in_any_topology(tmp_path, seed):
    rng = np.random.default_rng(seed)
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, 5, (6, 2)) if a != b]
    pairs += [(0, 1)]
    job = synth.generate(ranks=5, pairs=pairs, duration_s=60, calls=40, collectives=20 * (seed % 2), seed=seed)
    infos = infos_of(job, tmp_path)
    _, clocks = align(infos, "auto", 0)
    err = synth.true_error(clocks, job.truth, 0, job.span_true)
    for r, c in clocks.items():
        if c.error_bound_ns is not None:
            assert err[r] <= c.error_bound_ns, (r, err[r], c.error_bound_ns)
        else:
            assert c.method == "wall" or "wall clock is trusted" in c.note
    assert count(infos, clocks)["total"] == 0


def test_ranks_without_direct_link_are_aligned_through_others(tmp_path):
    job = synth.generate(ranks=4, pairs="chain", duration_s=60, calls=100, seed=3)
    infos = infos_of(job, tmp_path)
    _, clocks = align(infos, "auto", 0)
    err = synth.true_error(clocks, job.truth, 0, job.span_true)
    assert clocks[3].peers == [2] and clocks[3].method == "rpc"
    assert err[3] <= clocks[3].error_bound_ns < 1_000_000
    # a chain's bound grows along the path
    assert clocks[1].error_bound_ns < clocks[2].error_bound_ns < clocks[3].error_bound_ns


def test_unlinked_ranks_fall_back_to_wall_and_say_so(tmp_path):
    job = synth.generate(ranks=4, pairs=[(0, 1), (2, 3)], duration_s=20, calls=30, seed=4)
    infos = infos_of(job, tmp_path)
    _, clocks = align(infos, "auto", 0)
    assert clocks[2].method == "wall" and clocks[2].error_bound_ns is None
    assert "no exchange links ranks 2, 3 to reference rank 0" in clocks[2].note
    assert clocks[3].method == "rpc" and clocks[3].error_bound_ns is None and clocks[3].peers == [2]
    # within the group the pair is still aligned: 3 relative to 2 matches the truth
    rel = synth.true_relative(job.truth, 3, 2, job.span_true)
    assert abs((clocks[3].offset_ns - clocks[2].offset_ns) - rel.to_local(clocks[3].anchor_ns - clocks[2].offset_ns)
               + (clocks[3].anchor_ns - clocks[2].offset_ns)) < 1_000_000


def test_collectives_from_plain_kineto_traces_align(tmp_path):
    job = synth.generate(ranks=3, pairs="none", duration_s=30, collectives=50, seed=6)
    infos = infos_of(job, tmp_path, kineto=True)
    assert all(not i.has_block and len(i.collectives) == 50 for i in infos)
    _, clocks = align(infos, "auto", 0)
    err = synth.true_error(clocks, job.truth, 0, job.span_true)
    for r in (1, 2):
        assert clocks[r].method == "collective"
        assert err[r] <= clocks[r].error_bound_ns < 5_000_000
    assert count(infos, clocks)["collective"] == 0
    _, wall = align(infos, "wall", 0)
    assert count(infos, wall)["collective"] > 0


@pytest.mark.parametrize("seed", range(3))
def test_points_near_the_hulls_decide_every_extreme_bit_for_bit(seed):
    """fit_pairs searches only the points next to each side's hull: at any slope within
    the drift limit, at the anchor or at the span's ends, they give the very float all
    the points give — also for pairs whose points are collinear, up to rounding or exactly."""
    rng = np.random.default_rng(seed)
    n, cons = 3000, []
    for b, noise, ppm in ((1, 5_000, 37), (2, 0, 37), (3, 0, 0)):
        t1 = 1_700_000_000_000_000_000 + np.sort(rng.integers(0, 60_000_000_000, n))
        drift = (t1 - t1[0]) * ppm // 1_000_000  # on the integer ns the records hold
        there, back = (20_000 + noise * rng.pareto(1.5, (2, n))).astype(np.int64)
        t2 = t1 + there + 3_000_000 + drift
        t3 = t2 + rng.integers(0, 1_000_000, n)
        t4 = t3 - 3_000_000 - drift + back
        cons.append(Constraints(0, b, t1, t2 - t1, t4, t3 - t4, (t2 - t1) - (t3 - t4), frozenset({"rpc"})))
    anchors = np.array([int(c.x_upper[n // 2]) for c in cons])
    ends = np.array([[-40e9, 40e9]] * len(cons))
    limit = DRIFT_LIMIT_PPM * 1e-6
    raw = ((c.x_upper, c.upper) for c in cons), ((c.x_lower, c.lower) for c in cons)
    for side, points in zip(stack(cons), raw):
        x, y = (np.concatenate(v) for v in zip(*points))
        pair = np.repeat(np.arange(len(cons)), n)
        every = _Lines(y.astype(np.float64), -(x - anchors[pair]).astype(np.float64), pair, side.reduce)
        near = _lines(side, anchors, ends, limit)
        assert len(near.y) < len(every.y) / 2
        for s in rng.uniform(-limit, limit, (200, len(cons))):
            assert np.array_equal(near(s), every(s))
            assert np.array_equal(near.at(ends)(np.tile(s, 2)), every.at(ends)(np.tile(s, 2)))


@pytest.mark.parametrize("moved_ns", [3_000_000_000, 800_000])
def test_one_contradicting_exchange_is_named_and_left_out_and_the_link_kept(tmp_path, moved_ns):
    # one callee record from another clock (3 s), or another call's op 0.8 ms earlier: the
    # link's other 19 exchanges still say where rank 1's clock is
    job = synth.generate(ranks=2, pairs="star", duration_s=10, calls=20, seed=8)
    rec = job.docs[1]["tracemerge"]["rpcs"][0]
    rec["start_ns"] -= moved_ns
    rec["end_ns"] -= moved_ns
    infos = infos_of(job, tmp_path)
    by_rank = {i.rank: i for i in infos}
    models, fits = solve(by_rank, 0, rpc_constraints(match_rpcs(infos).calls))
    assert (0, 1) in fits and models[1].method == "rpc"
    assert f"1 exchange of ranks 0 and 1 contradicts the others and is left out ({rec['rpc_id']} by" in models[1].note
    err = synth.true_error(models, job.truth, 0, job.span_true)
    assert err[1] <= models[1].error_bound_ns


def test_a_link_of_many_contradictions_is_not_used(tmp_path):
    job = synth.generate(ranks=2, pairs="star", duration_s=10, calls=20, seed=8)
    for rec in job.docs[1]["tracemerge"]["rpcs"][::2]:  # half the records from another clock: no clock to keep
        rec["start_ns"] -= 3_000_000_000
        rec["end_ns"] -= 3_000_000_000
    infos = infos_of(job, tmp_path)
    by_rank = {i.rank: i for i in infos}
    models, fits = solve(by_rank, 0, rpc_constraints(match_rpcs(infos).calls))
    assert not fits and models[1].method == "wall"
    assert "admit no linear clock" in models[1].note


# (offset ns, drift ppm) of ranks 1 and 2 against rank 0's machine: 10 µs to 10 s, 0 and ±200 ppm
SAMPLE_SKEWS = {
    "seconds": {1: (3_200_000_000, 150.0), 2: (-7_500_000_000, -120.0)},
    "far": {1: (10_000_000_000, -200.0), 2: (10_000, 200.0)},
    "near": {1: (10_000, 0.0), 2: (-3_000_000, 200.0)},
}


def _sample_docs(name):
    return {doc["tracemerge"]["rank"]: doc
            for doc in map(_doc, sorted(glob.glob(os.path.join(SAMPLES, name, "rank*.json.gz"))))}


def _served(docs):
    """Each builtin the capture sent with the op that served it, read from the capture's own
    records: {rpc_id: (callee, tid, op start ns)} for the builtins whose function the callee
    served once, as often as it was sent (the recipe sends one torch.add and one torch.mul)."""
    sent = [r for doc in docs.values() for r in doc["tracemerge"]["rpcs"] if r["role"] == "caller" and r.get("native")]
    out = {}
    for call in sent:
        ops = [op for op in docs[call["callee"]]["tracemerge"].get("served_ops", []) if op["name"] == call["func"]]
        if len(ops) == 1 and sum(c["func"] == call["func"] and c["callee"] == call["callee"] for c in sent) == 1:
            out[call["rpc_id"]] = (call["callee"], ops[0]["tid"], ops[0]["start_ns"])
    return out


def _fastest_exchange(docs, rank):
    """The smallest (t4 - t1) - (t3 - t2) of the calls between ``rank`` and rank 0, both
    sides read from the capture's own records."""
    sides = {r["rpc_id"]: r for doc in docs.values() for r in doc["tracemerge"]["rpcs"] if r["role"] == "callee"}
    return min((c["complete_ns"] - c["send_ns"]) - (sides[c["rpc_id"]]["end_ns"] - sides[c["rpc_id"]]["start_ns"])
               for doc in docs.values() for c in doc["tracemerge"]["rpcs"]
               if c["role"] == "caller" and {c["caller"], c["callee"]} == {0, rank} and c["rpc_id"] in sides)


@pytest.mark.parametrize("skews", sorted(SAMPLE_SKEWS))
@pytest.mark.parametrize("name", ["rpc_profiling", "parameter_server"])
def test_skewed_real_capture_is_recovered(tmp_path, name, skews):
    """A bundled sample (one machine) given other machines' clocks and boot ids: every rank's
    clock within its error bound of the planted one, no call backwards, every builtin paired
    with the op that served it."""
    docs = _sample_docs(name)
    anchor = docs[0]["tracemerge"]["profile_start_ns"]
    moved, clocks = synth.on_machines(docs, {r: s for r, s in SAMPLE_SKEWS[skews].items() if r in docs}, anchor)
    job = Job.open(synth.write_docs(moved, tmp_path), align=AlignRequest("auto"))
    alignment = job.alignment
    assert alignment.causality["violations_before"]["total"] == 0, alignment.causality
    # rank 0's clock is the shared one, so its times are the true ones
    t = np.linspace(job.info(0).start_ns, job.info(0).stop_ns, 101).astype(np.int64)
    for rank in sorted(set(docs) - {0}):
        model = alignment.clocks[rank]
        assert model.method != "wall" and model.error_bound_ns is not None, model
        err = np.abs(np.asarray(model.to_reference(clocks[rank].to_local(t))) - t).max()
        assert err <= model.error_bound_ns, (rank, int(err), model)
        # within the bracket of the rank's best exchange with rank 0 (there both clocks are
        # one, so each call brackets the true offset 0 by its round trip less its execution)
        assert err <= _fastest_exchange(docs, rank), (rank, int(err))
    truth = _served(docs)
    builtins = sum(r["role"] == "caller" and bool(r.get("native")) for d in docs.values() for r in d["tracemerge"]["rpcs"])
    assert len(truth) == builtins == (2 if name == "rpc_profiling" else 0)   # the scripts' workloads
    got = {r["rpc_id"]: (r["callee"], r["tid"], r["op_start_ns"]) for info in job.infos for r in info.remote_rpcs
           if r.get("source") == "paired"}
    assert got == {k: (callee, tid, int(clocks[callee].to_local(start))) for k, (callee, tid, start) in truth.items()}


def test_skewed_real_capture_on_wall_clocks_goes_backwards(tmp_path):
    docs = _sample_docs("parameter_server")
    moved, _ = synth.on_machines(docs, SAMPLE_SKEWS["seconds"], docs[0]["tracemerge"]["profile_start_ns"])
    wall = Job.open(synth.write_docs(moved, tmp_path), align=AlignRequest("wall")).alignment
    assert wall.causality["violations_before"]["rpc"] > 0


def _doc(path):
    return orjson.loads(gzip.decompress(open(path, "rb").read()))


def test_skew_moves_every_ts_and_ns_field():
    job = synth.generate(ranks=2, pairs="star", duration_s=2, calls=3, seed=9)
    doc = job.docs[1]
    out = synth.skew(doc, 1_000_000_000, 100.0)
    base = doc["baseTimeNanoseconds"]
    before = [round(e["ts"] * 1000) + base for e in doc["traceEvents"] if "ts" in e]
    after = [round(e["ts"] * 1000) + base for e in out["traceEvents"] if "ts" in e]
    moved = np.array(after) - np.array(before)
    assert moved.min() >= 1_000_000_000 and moved.max() < 1_000_000_000 + 100e-6 * 3e9
    blk, new = doc["tracemerge"], out["tracemerge"]
    assert new["profile_start_ns"] - blk["profile_start_ns"] == moved[0]
    assert all(n["start_ns"] > o["start_ns"] + 999_000_000 for o, n in zip(blk["rpcs"], new["rpcs"]) if "start_ns" in o)
    assert new["rank"] == blk["rank"] and new["rpcs"][0]["rpc_id"] == blk["rpcs"][0]["rpc_id"]


def test_times_of_many_ranks_go_to_the_reference_clock_as_each_rank_alone_would():
    from tracemerge.clocks.clock import to_reference_by_rank

    base = 1_700_000_000_000_000_000
    clocks = {0: ClockModel(rank=0, method="test"),
              1: ClockModel(rank=1, method="test", offset_ns=-2_500, drift_ppm=12.5, anchor_ns=base),
              3: ClockModel(rank=3, method="test", offset_ns=40_000,
                            corrections=[[base, 0], [base + 10**9, 700]])}
    rng = np.random.default_rng(7)
    ranks = rng.choice([0, 1, 3], 500).astype(np.int64)
    times = base + rng.integers(0, 2 * 10**9, 500)
    got = to_reference_by_rank(clocks, ranks, times)
    # each time alone, through the model's scalar path
    assert got.tolist() == [int(clocks[r].to_reference(int(t))) for r, t in zip(ranks.tolist(), times.tolist())]
    assert to_reference_by_rank(clocks, ranks[:0], times[:0]).tolist() == []
