"""Ranks of one machine read one wall clock (issue 15): two 'machines' of two ranks each,
the second machine's files skewed by a known offset and drift (every `_ns` field by the
clock_rank rule, every ts). The reference's machine stays exact; the other machine gets
one pooled model that holds the true skew within its error bound; causality holds."""

import json
import random

from support import cli
from support.ranks import BASE, rank_file, rpc_records, write, x

OFFSET_NS = 3_000_000      # machine B's clock reads 3 ms ahead of machine A's
DRIFT_PPM = 40.0           # and gains 40 µs per second
MACHINE = {0: "boot-A", 1: "boot-A", 2: "boot-B", 3: "boot-B"}
HOST = {"boot-A": "hostA", "boot-B": "hostB"}


def _skew(rank, t_ns):
    """Rank ``rank``'s clock reading at true time ``t_ns``."""
    if MACHINE[rank] == "boot-A":
        return t_ns
    return t_ns + OFFSET_NS + round(DRIFT_PPM * 1e-6 * (t_ns - BASE))


def _job(tmp_path):
    rng = random.Random(7)
    rpcs = {r: [] for r in MACHINE}
    events = {r: [] for r in MACHINE}
    pairs = [(0, 2), (2, 0), (1, 3), (3, 1), (0, 3), (2, 1)]
    t = BASE + 10_000_000
    for n in range(240):
        caller, callee = pairs[n % len(pairs)]
        t1 = t
        t2 = t1 + 80_000 + rng.randrange(0, 400_000)     # one-way delays 80-480 µs
        t3 = t2 + 150_000
        t4 = t3 + 80_000 + rng.randrange(0, 400_000)
        rid = f"{caller}:{n}"
        sent, served = rpc_records(rid, caller, callee, _skew(caller, t1), _skew(callee, t2), _skew(callee, t3),
                                   _skew(caller, t4), kind="rpc_sync", worker="worker", names=True)
        name = sent["name"]
        rpcs[caller].append(sent)
        rpcs[callee].append(served)
        for rank, a, b, role, label in ((caller, t1, t4, "caller", name), (callee, t2, t3, "callee", name + "#remote")):
            start = _skew(rank, a)
            events[rank].append(x(label, (start - BASE) / 1000, (_skew(rank, b) - start) / 1000, tid=7,
                                  cat="user_annotation", rpc_id=rid, role=role))
        t = t4 + 2_000_000
    files = []
    for rank, boot in MACHINE.items():
        doc = rank_file(events[rank], rank, rpcs=rpcs[rank], world_size=4, hostname=HOST[boot], boot_id=boot,
                        start_ns=_skew(rank, BASE), profile_stop_ns=_skew(rank, t))
        files.append(write(tmp_path / f"rank{rank}.json", doc))
    return files, t


def test_other_machine_recovers_its_skew_and_one_machine_stays_exact(tmp_path):
    files, end = _job(tmp_path)
    res = cli.run("offsets", *files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    clocks = {c["rank"]: c for c in json.loads(res.stdout)["ranks"]}
    assert (clocks[1]["method"], clocks[1]["offset_ns"], clocks[1]["drift_ppm"], clocks[1]["error_bound_ns"]) == \
        ("shared-clock", 0, 0, 0)
    b2, b3 = clocks[2], clocks[3]
    # one model per machine: every number but the rank is the same
    assert {k: v for k, v in b2.items() if k != "rank"} == {k: v for k, v in b3.items() if k != "rank"}
    assert b2["method"].startswith("rpc") and b2["error_bound_ns"] > 0
    for t in (BASE + 10_000_000, (BASE + end) // 2, end):
        estimate = b2["offset_ns"] + b2["drift_ppm"] * 1e-6 * (t - b2["anchor_ns"])
        true = _skew(2, t) - t
        assert abs(estimate - true) <= b2["error_bound_ns"], (t, estimate, true, b2)
    assert "causality: 0 violations" in res.stderr


def test_without_boot_ids_each_rank_is_its_own_machine(tmp_path):
    files, _ = _job(tmp_path)
    for path in files:  # the same job, captured before boot_id existed
        with open(path) as f:
            doc = json.load(f)
        del doc["tracemerge"]["boot_id"]
        write(path, doc)
    res = cli.run("offsets", *files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    clocks = {c["rank"]: c for c in json.loads(res.stdout)["ranks"]}
    assert all(c["method"] != "shared-clock" for c in clocks.values())
    assert clocks[1]["error_bound_ns"] > 0  # estimated, not known


def test_a_rank_whose_records_contradict_its_machine_clock_is_estimated(tmp_path):
    # ranks 2 and 3 claim machine A's boot_id, but their clocks are machine B's (3 ms
    # ahead, 40 ppm): their RPCs with ranks 0 and 1 cannot all hold on one clock
    files, end = _job(tmp_path)
    for path in files[2:]:
        with open(path) as f:
            doc = json.load(f)
        doc["tracemerge"].update(boot_id="boot-A", hostname="hostA")
        write(path, doc)
    res = cli.run("offsets", *files, "--format", "json")
    assert res.exit_code == 0, res.stderr
    clocks = {c["rank"]: c for c in json.loads(res.stdout)["ranks"]}
    assert (clocks[1]["method"], clocks[1]["offset_ns"], clocks[1]["error_bound_ns"]) == ("shared-clock", 0, 0)
    for r in (2, 3):
        c = clocks[r]
        assert c["method"] != "shared-clock" and c["error_bound_ns"] > 0
        for t in (BASE + 10_000_000, end):
            estimate = c["offset_ns"] + c["drift_ppm"] * 1e-6 * (t - c["anchor_ns"])
            assert abs(estimate - (_skew(r, t) - t)) <= c["error_bound_ns"]
        assert f"rank {r}: shares a boot_id with rank 0, but" in res.stderr
    assert "contradict one clock" in res.stderr and "rank 1: shares" not in res.stderr
    assert "causality: 0 violations" in res.stderr
