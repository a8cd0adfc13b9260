"""Send/receive pairs link ranks one way: a receive kernel cannot end before its send kernel
started. Two hand-built Kineto ranks whose only exchange is NCCL send/recv (a pipeline's
activations forward, gradients back), with a planted clock shift on rank 1: the ranks are
linked (no unlinked-rank warning), the true offset lies inside the bound, and a shift that
puts receives before their sends is undone. Every expectation comes from the planted
times, never from tracemerge."""

import json
from typing import Dict, List, Tuple

import pytest

from tracemerge.job import AlignRequest, Job

STEPS = 20
PERIOD_US = 5_000
KERNEL = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
# (sender, receiver, µs after the step's start): activations forward, gradients back
DIRECTIONS = ((0, 1, 0), (1, 0, 2_500))
# each transfer on the true clock, µs from its time: the send kernel [40, 65], the receive
# kernel [30, RECV_END] (it waits for the data); the two directions differ so the band is
# not symmetric about the truth
SEND_KERNEL = (40, 25)
RECV_END = {(0, 1): 70, (1, 0): 100}


def transfers() -> List[Tuple[int, int, float, float]]:
    """(sender, receiver, send kernel start, receive kernel end) of every transfer, true µs."""
    return [(s, r, 1_000 + k * PERIOD_US + at + SEND_KERNEL[0], 1_000 + k * PERIOD_US + at + RECV_END[(s, r)])
            for k in range(STEPS) for s, r, at in DIRECTIONS]


def rank_doc(rank: int, shift_us: float, peers: bool = True, drop: int = 0) -> dict:
    """Rank ``rank``'s Kineto trace, its clock ``shift_us`` ahead; ``peers``: its ops name the
    peer (Dst Rank / Src Rank); ``drop``: leave out its first ``drop`` transfers."""
    events: List[dict] = [{"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "python"}}]
    corr = 0
    mine = [(s, r, t) for s, r, t in ((s, r, 1_000 + k * PERIOD_US + at)
                                      for k in range(STEPS) for s, r, at in DIRECTIONS) if rank in (s, r)][drop:]
    for s, r, t in mine:
        corr += 1
        sending = s == rank
        args: Dict[str, object] = {"Collective name": "send" if sending else "recv", "dtype": "Float",
                                   "In msg nelems": 1024}
        if peers:
            args["Dst Rank" if sending else "Src Rank"] = r if sending else s
        start, end = (t + SEND_KERNEL[0], t + sum(SEND_KERNEL)) if sending else (t + 30, t + RECV_END[(s, r)])
        t = t + shift_us
        events += [
            {"ph": "X", "cat": "user_annotation", "name": "nccl:send" if sending else "nccl:recv", "pid": 100,
             "tid": 1, "ts": t - 10, "dur": 40},
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100, "tid": 1, "ts": t - 5, "dur": 30,
             "args": args},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1, "ts": t,
             "dur": 5, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7, "ts": start + shift_us,
             "dur": end - start, "args": {"correlation": corr, "stream": 7, "device": 0}},
        ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": events}


def write_pair(folder, shift_us: float, **kw) -> List[str]:
    paths = []
    for rank in (0, 1):
        path = folder / f"rank{rank}.json"
        path.write_text(json.dumps(rank_doc(rank, shift_us if rank else 0.0, **kw)))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("shift_us", [-5_000.0, 3.5, 2_000_000.0])
def test_send_recv_bound_the_offset(tmp_path, shift_us):
    job = Job.open(write_pair(tmp_path, shift_us), align=AlignRequest("auto"))
    assert not [w for w in job.warnings if "linked to no other rank" in w], job.warnings
    assert len(job.links.p2p) == 2 * STEPS
    clock = job.alignment.clocks[1]
    truth = shift_us * 1000
    assert clock.method == "p2p" and clock.error_bound_ns is not None
    assert abs(clock.offset_ns - truth) <= clock.error_bound_ns, clock
    # the band is what the kernels allow: the truth minus 60 µs (a gradient received 60 µs
    # after its send started) to plus 30 µs (activations, 30 µs): nothing wider
    assert clock.error_bound_ns <= 100_000, clock
    # no receive ends before its send started, on the reference clock
    for s, r, send_start, recv_end in transfers():
        local = {0: 0.0, 1: truth}
        sent = job.alignment.clocks[s].to_reference((send_start * 1000 + local[s]))
        got = job.alignment.clocks[r].to_reference((recv_end * 1000 + local[r]))
        assert got >= sent - 2, (s, r, got - sent)


def test_the_shift_broke_causality_on_the_wall_clock(tmp_path):
    """The planted -5 ms puts every activation received before it was sent, as written."""
    broken = [(s, r) for s, r, start, end in transfers() if (end - 5_000 if r == 1 else end) <
              (start - 5_000 if s == 1 else start)]
    assert len(broken) == STEPS
    job = Job.open(write_pair(tmp_path, -5_000.0), align=AlignRequest("collective"))
    assert abs(job.alignment.clocks[1].offset_ns + 5_000_000) <= job.alignment.clocks[1].error_bound_ns


def test_without_peers_nothing_links_the_ranks(tmp_path):
    """Ops that name no peer (torch before the p2p fields): the kernels are not matched, and
    each rank is warned as linked to no other."""
    job = Job.open(write_pair(tmp_path, 3.5, peers=False), align=AlignRequest("auto"))
    assert len(job.links.p2p) == 0
    assert sum("linked to no other rank" in w for w in job.warnings) == 2
    assert all(not i.collectives for i in job.infos)   # point-to-point is no collective


def test_a_direction_whose_counts_differ_is_said_and_not_matched(tmp_path):
    paths = write_pair(tmp_path, 0.0)
    (tmp_path / "rank1.json").write_text(json.dumps(rank_doc(1, 0.0, drop=1)))  # rank 1 lost its first receive
    job = Job.open(paths, align=AlignRequest("auto"))
    assert len(job.links.p2p) == STEPS   # the gradients only
    assert any("rank 0 records 20 sends to rank 1, rank 1 19 receives" in w for w in job.warnings), job.warnings
    # sends one way bound rank 1's clock on one side only: nothing places it, and that is said
    assert sum("linked to no other rank" in w for w in job.warnings) == 2
    assert job.alignment.clocks[1].method == "wall"


def test_each_transfer_drawn_from_its_send_kernel_to_its_receive_kernel(tmp_path):
    """``combine`` draws every matched transfer as one p2p arrow, in the .pftrace from the
    sender's send kernel to the receiver's receive kernel (its end), each at the planted
    times (the ranks on one clock: no shift, ``wall``)."""
    from support.pftrace import read_pftrace, thread_of

    from tracemerge.merge.combine import combine

    job = Job.open(write_pair(tmp_path, 0.0), align=AlignRequest("wall"))
    summary = combine(job, None, str(tmp_path / "t.pftrace"))
    rank_of_pid = {pid: int(r) for r, m in summary["pids"].items() for pid in m.values()}
    got = read_pftrace(str(tmp_path / "t.pftrace"))
    arcs = []   # the files name no base time: the .pftrace's ns are their µs * 1000
    for fid, send, recv in got["arcs"]:
        assert fid >= 2 ** 52 + 2 ** 51 and send["name"] == recv["name"] == KERNEL
        assert send["flows"] == [fid] and recv["end_terminating"] == [fid]
        arcs.append((rank_of_pid[thread_of(got["tracks"], send["track"])[0]],
                     rank_of_pid[thread_of(got["tracks"], recv["track"])[0]],
                     send["ts"] / 1000, recv["end"] / 1000))
    assert sorted(arcs) == sorted(transfers())
