"""Builtins sent as themselves to a rank of another machine, paired jointly with the clocks
(tracemerge/clocks/joint.py, tracemerge/correlate/native_calls.py): hand-made jobs whose
truth the test plants (true times, each rank's clock, which op served which call), one
per cause issue 45 measured: callers of two clocks in flight to one callee, a cold pipe's
clock reading, drift (and, in test_align.py, one exchange that contradicts its link); and the
order a pipe's requests are served in, which tells apart calls time leaves open."""

import numpy as np
import pytest
from support.ranks import BASE, rank_file, write, x

from tracemerge import AlignRequest, Job

T0 = BASE + 10**9            # true time of the job's start
THREADS = 8                  # the callee's RPC server threads


class Clock:
    def __init__(self, offset_ns=0, drift_ppm=0.0):
        self.offset_ns, self.drift_ppm = offset_ns, drift_ppm

    def __call__(self, t):
        return int(t + self.offset_ns + self.drift_ppm * 1e-6 * (t - T0))


def plant(tmp_path, clocks, boots, sends, reading_error_ns=0, reading_rtt_ns=100_000, served_from=None, seed=0):
    """Files of a job: callers send ``torch.add`` to rank 1 at the true times ``sends``
    ({caller: [ns]}); each call is served by the first free of THREADS threads after
    its request arrives. ``clocks`` {rank: Clock}; ``boots`` {rank: boot id}; each caller's
    admission reading of rank 1 is off by ``reading_error_ns`` within ``reading_rtt_ns``;
    ops before ``served_from`` (true ns) were not recorded. Returns (paths, truth
    {rpc_id: (tid, op start on rank 1's clock)})."""
    rng = np.random.default_rng(seed)
    free = [T0] * THREADS
    calls = sorted((t, c, k) for c, ts in sends.items() for k, t in enumerate(ts))
    records = {c: [] for c in sends}
    ops, truth = [], {}
    callee = clocks[1]
    last = T0
    for t1, c, k in calls:
        arrive = t1 + int(rng.uniform(60_000, 250_000))
        tid = min(range(THREADS), key=lambda i: (max(free[i], arrive), i))
        start = max(free[tid], arrive) + int(rng.uniform(2_000, 20_000))
        end = start + int(rng.uniform(4_000, 30_000))
        free[tid] = end + 1_000
        t4 = end + int(rng.uniform(50_000, 200_000))
        last = max(last, t4)
        rpc_id = f"{c}:{k}"
        records[c].append({"rpc_id": rpc_id, "role": "caller", "kind": "rpc_sync", "func": "aten::add",
                           "name": f"rpc_sync#aten::add(worker{c} -> worker1)", "caller": c, "callee": 1,
                           "caller_name": f"worker{c}", "callee_name": "worker1", "status": "ok", "native": True,
                           "send_ns": clocks[c](t1), "complete_ns": clocks[c](t4)})
        if served_from is None or start >= served_from:
            ops.append({"name": "aten::add", "tid": 20 + tid, "start_ns": callee(start), "end_ns": callee(end)})
            truth[rpc_id] = (20 + tid, callee(start))
    paths = []
    for c, recs in records.items():
        first = min(r["send_ns"] for r in recs)
        asked = first - reading_rtt_ns - 50_000
        mid_true = (asked + reading_rtt_ns / 2 - clocks[c].offset_ns)  # about: the drift there is negligible
        reading = {"callee": 1, "asked_ns": asked, "answered_ns": asked + reading_rtt_ns,
                   "answer": {"clock_rank": 1, "boot_id": boots[1], "read_ns": callee(mid_true) + reading_error_ns}}
        events = [x(r["name"], (r["send_ns"] - BASE) / 1000, (r["complete_ns"] - r["send_ns"]) / 1000, pid=4000 + c,
                    tid=7, cat="user_annotation", rpc_id=r["rpc_id"], role="caller") for r in recs]
        doc = rank_file(events, c, rpcs=recs, boot_id=boots[c], world_size=3, native_callees=[reading],
                        start_ns=clocks[c](T0) - 10**6, profile_stop_ns=clocks[c](last + 10**7))
        paths.append(write(tmp_path / f"rank{c}.json.gz", doc))
    events = [{"ph": "M", "name": "thread_name", "pid": 4001, "tid": 20 + t,
               "args": {"name": f"thread {20 + t} (pt_thread_pool)"}} for t in range(THREADS)]
    events += [x(op["name"], (op["start_ns"] - BASE) / 1000, (op["end_ns"] - op["start_ns"]) / 1000, pid=4001,
                 tid=op["tid"]) for op in ops]
    doc = rank_file(events, 1, boot_id=boots[1], world_size=3, served_ops=ops, start_ns=callee(T0) - 10**6,
                    profile_stop_ns=callee(last + 10**7))
    paths.append(write(tmp_path / "rank1.json.gz", doc))
    return sorted(paths), truth


def paired(job):
    # the op's own start (a record on one clock with its caller clips it into the call)
    return {r["rpc_id"]: (r["tid"], r.get("op_start_ns", r["start_ns"])) for info in job.infos for r in info.remote_rpcs
            if r.get("source") == "paired"}


def check(job, truth, share):
    """Every paired call has the op that served it, and at least ``share`` of the calls
    whose op was recorded are paired; what is left is said."""
    got = paired(job)
    wrong = {k: (v, truth.get(k)) for k, v in got.items() if truth.get(k) != v}
    assert not wrong, f"{len(wrong)} of {len(got)} calls paired with another call's op"
    assert len(got) >= share * len(truth), (len(got), len(truth))
    left = len(truth) - len(got)
    if left:
        said = [w for w in job.warnings if "sent as themselves to rank 1" in w]
        assert sum(int(w.split()[0]) for w in said) >= left


def sequential(rng, n, start, gap_us=(300, 3_000)):
    """True send times of ``n`` calls one caller makes one after another (rpc_sync)."""
    out, t = [], start
    for _ in range(n):
        out.append(t)
        t += 700_000 + int(rng.uniform(*gap_us) * 1000)
    return out


def test_callers_of_two_clocks_are_matched_on_the_callees(tmp_path):
    # two callers on machines 1.23 s ahead and 0.75 s behind the callee's: their calls to
    # rank 1 interleave; ordering them by their raw send times mixes two clocks
    rng = np.random.default_rng(1)
    clocks = {0: Clock(1_230_000_000), 1: Clock(), 2: Clock(-750_000_000)}
    sends = {0: sequential(rng, 150, T0 + 10**7), 2: sequential(rng, 150, T0 + 10**7 + 200_000)}
    paths, truth = plant(tmp_path, clocks, {0: "boot-a", 1: "boot-b", 2: "boot-c"}, sends, reading_error_ns=30_000)
    # where the two callers' calls overlap, some are open even on one clock (34 of these 300)
    check(Job.open(paths), truth, 0.8)


def test_a_cold_pipes_reading_is_only_a_prior(tmp_path):
    # the admission opened the pipe: 56 ms round trip, its reading 27.5 ms off; the
    # callee's profiler missed the first calls, so their order tells nothing
    rng = np.random.default_rng(2)
    clocks = {0: Clock(1_230_000_000), 1: Clock()}
    sends = {0: sequential(rng, 200, T0 + 10**7)}
    paths, truth = plant(tmp_path, clocks, {0: "boot-a", 1: "boot-b"}, sends, reading_error_ns=27_500_000,
                         reading_rtt_ns=56_000_000, served_from=sends[0][3])
    check(Job.open(paths), truth, 0.9)


@pytest.mark.parametrize("drift", [200.0, -200.0])
def test_drift_keeps_every_op_in_its_window(tmp_path, drift):
    # the exact offset at the start, then 200 ppm: 1 ms after 5 s
    rng = np.random.default_rng(3)
    clocks = {0: Clock(-750_000_000, drift), 1: Clock()}
    sends = {0: sequential(rng, 2_000, T0 + 10**7, gap_us=(300, 3_500))}
    paths, truth = plant(tmp_path, clocks, {0: "boot-a", 1: "boot-b"}, sends)
    check(Job.open(paths), truth, 0.95)


def _two_callers(tmp_path, sends, ops, stop_ns):
    """The job of callers 0 and 2 sending ``sends`` ({rpc_id: (caller, function, send,
    complete)}) natively to rank 1, which served them by ``ops`` (one machine's clock)."""
    paths = []
    for c in (0, 2):
        recs = [{"rpc_id": k, "role": "caller", "kind": "rpc_async", "func": f, "name": f"rpc_async#{f}(worker{c} -> worker1)",
                 "caller": c, "callee": 1, "caller_name": f"worker{c}", "callee_name": "worker1", "status": "ok",
                 "native": True, "send_ns": s, "complete_ns": e} for k, (who, f, s, e) in sends.items() if who == c]
        events = [x(r["name"], (r["send_ns"] - BASE) / 1000, (r["complete_ns"] - r["send_ns"]) / 1000, pid=4000 + c,
                    tid=7 + n, cat="user_annotation", rpc_id=r["rpc_id"], role="caller") for n, r in enumerate(recs)]
        paths.append(write(tmp_path / f"rank{c}.json.gz", rank_file(events, c, rpcs=recs, boot_id="one-machine", world_size=3,
                                                                  start_ns=T0, profile_stop_ns=stop_ns)))
    events = [x(op["name"], (op["start_ns"] - BASE) / 1000, (op["end_ns"] - op["start_ns"]) / 1000, pid=4001, tid=op["tid"])
              for op in ops]
    paths.append(write(tmp_path / "rank1.json.gz", rank_file(events, 1, boot_id="one-machine", world_size=3, served_ops=ops,
                                                             start_ns=T0, profile_stop_ns=stop_ns)))
    return Job.open(sorted(paths))


@pytest.mark.parametrize("threads", ["one", "three"])
def test_a_pipes_serve_order_tells_apart_what_time_does_not(tmp_path, threads):
    # caller 0 sends torch.div, then torch.mul 130 µs later; caller 2's torch.mul is in
    # flight across both. Rank 1 started caller 0's div late (400 µs after it was sent).
    # Served by one thread, the mul op that ended before that cannot be caller 0's (its
    # pipe's requests are queued in the order sent, and a thread takes one at a time): it
    # is caller 2's, and the later one caller 0's. Served by three threads, the thread that
    # took the div may have been preempted before starting it, while another served the
    # mul sent after it (measured under load): nothing is inferred, the muls stay open.
    # Time alone leaves both muls open (both ops lie inside both calls).
    t = T0 + 10**7
    us = 1_000
    sends = {"0:1": (0, "aten::div", t, t + 2_000 * us), "0:2": (0, "aten::mul", t + 130 * us, t + 2_000 * us),
             "2:1": (2, "aten::mul", t - 500 * us, t + 2_100 * us)}
    tids = (21, 22, 23) if threads == "three" else (22, 22, 22)
    ops = [{"name": "aten::mul", "tid": tids[0], "start_ns": t + 150 * us, "end_ns": t + 200 * us},
           {"name": "aten::div", "tid": tids[1], "start_ns": t + 400 * us, "end_ns": t + 450 * us},
           {"name": "aten::mul", "tid": tids[2], "start_ns": t + 600 * us, "end_ns": t + 650 * us}]
    truth = {"0:1": (tids[1], t + 400 * us), "2:1": (tids[0], t + 150 * us), "0:2": (tids[2], t + 600 * us)}
    job = _two_callers(tmp_path, sends, ops, t + 10**7)
    if threads == "one":
        assert paired(job) == truth
    else:
        assert paired(job) == {"0:1": truth["0:1"]}
        assert any(w.startswith("2 builtin calls sent as themselves to rank 1") for w in job.warnings), job.warnings


def test_a_thread_preempted_before_its_op_gives_no_wrong_pair(tmp_path):
    """Measured in a real job under load (tests/test_pairing_real_job.py, µs from caller 2's
    add): caller 2 sent torch.sub at -156 and torch.add at 0; its sub's thread started the
    op at 862, after its add's op (on another thread) had ended at 826. Caller 0's sub and
    add were in flight across them. The subs are told apart by time alone; the adds, both
    on one thread 20 µs apart inside both calls, by nothing torch recorded: reading caller
    2's sub as a bound on its later add (the serve order across threads) gave the adds
    the wrong way round. Both stay open."""
    t = T0 + 10**7
    us = 1_000
    sends = {"2:49": (2, "aten::sub", t - 156 * us, t + 1251 * us), "2:51": (2, "aten::add", t, t + 1119 * us),
             "0:53": (0, "aten::sub", t + 152 * us, t + 841 * us), "0:55": (0, "aten::add", t + 256 * us, t + 918 * us)}
    ops = [{"name": "aten::sub", "tid": 72, "start_ns": t + 679 * us, "end_ns": t + 693 * us},
           {"name": "aten::add", "tid": 72, "start_ns": t + 820 * us, "end_ns": t + 826 * us},
           {"name": "aten::add", "tid": 72, "start_ns": t + 840 * us, "end_ns": t + 843 * us},
           {"name": "aten::sub", "tid": 66, "start_ns": t + 862 * us, "end_ns": t + 867 * us}]
    job = _two_callers(tmp_path, sends, ops, t + 10**7)
    assert paired(job) == {"0:53": (72, t + 679 * us), "2:49": (66, t + 862 * us)}
    assert any(w.startswith("2 builtin calls sent as themselves to rank 1") for w in job.warnings), job.warnings


def test_a_ring_of_machines_joined_by_builtins_alone(tmp_path):
    """Twelve ranks, each its own machine with a clock up to 5 s off, each sending 60
    builtins to the next and nothing else relating them (tests/support/native_ring.py):
    every call gets the op that served it, every rank's offset lies within its bound (the
    bounds grow along the ring, the path from rank 0), and no rank is left on its wall clock."""
    from support.native_ring import write_ring

    paths, offsets, truth = write_ring(str(tmp_path), 12, 60)
    job = Job.open(paths, align=AlignRequest("auto"))
    got = {r["rpc_id"]: r["start_ns"] for rank in job.ranks for r in job.info(rank).remote_rpcs
           if r.get("source") == "paired"}
    assert got == truth
    for rank in job.ranks:
        clock = job.alignment.clocks[rank]
        assert clock.error_bound_ns is not None and abs(clock.offset_ns - offsets[rank]) <= clock.error_bound_ns, clock
