"""A real 8-rank NCCL job (tests/corpus/gpu/param_dlrm: PARAM's DLRM, torch of 2023, no c10d
fields) aligned by its NCCL kernels alone: ranks' clocks moved by planted amounts (10 µs to
10 s) are recovered within 20 µs, with and without the group fields later torch versions
write; after ``combine`` every collective's kernel ends agree across ranks as they did on
the true clocks (one host: the raw files' own). Expectations come from the raw JSON
(tests/nccl_corpus.py) and the planted shifts, never from tracemerge."""

import json
from collections import defaultdict
from typing import Dict, List

import nccl_corpus as corpus
import pytest
from support.cli import invoke

from tracemerge.job import AlignRequest, Job

# µs each moved rank's clock is moved by; the others (0, 2, 4, 7) keep the true clock
SHIFTS_US = {1: 10, 3: 3_200, 5: 2_500_000, 6: -10_000_000}
TOLERANCE_NS = 20_000


@pytest.fixture(scope="module", params=list(corpus.FIELDS))
def moved_job(request, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp(f"dlrm_{request.param.replace('+', '_')}"))
    paths = corpus.write_job(folder, corpus.FIELDS[request.param], SHIFTS_US)
    return request.param, paths, Job.open(paths, align=AlignRequest("auto"))


def test_moved_clocks_recovered_within_20_us_by_kernel_ends(moved_job):
    name, _, job = moved_job
    # the group the trace names, else the default one; every rank's 8 collectives, from kernels
    assert {r["group"] for i in job.infos for r in i.collectives} == ({"default"} if name == "none" else {"0"})
    assert all(len(i.collectives) == 8 and all(r["kernel"] for r in i.collectives) for i in job.infos)
    clocks = job.alignment.clocks
    assert set(clocks) == set(range(8))
    for rank, clock in clocks.items():
        truth = SHIFTS_US.get(rank, 0) * 1000
        assert abs(clock.offset_ns - truth) <= TOLERANCE_NS, (rank, clock)
        if rank:
            assert clock.method == "nccl-kernel" and clock.samples == 8
            assert clock.error_bound_ns is not None and clock.error_bound_ns >= abs(clock.offset_ns - truth)
    assert job.warnings == ()   # the collectives join every rank: no window or link warning


def test_named_method_and_offsets_show_it(moved_job):
    _, paths, job = moved_job
    same = job.align("nccl-kernel").clocks
    assert {r: c.offset_ns for r, c in same.items()} == {r: c.offset_ns for r, c in job.alignment.clocks.items()}
    result = invoke("offsets", *paths, "--align", "nccl-kernel", "--format", "json")
    assert result.exit_code == 0, result.output
    ranks = json.loads(result.stdout)["ranks"]
    assert [r["method"] for r in ranks] == ["reference"] + ["nccl-kernel"] * 7


def rank_of_pids(doc: dict) -> Dict[int, int]:
    """{output pid: rank} from the merged trace's process names ("rank N · …")."""
    return {e["pid"]: int(e["args"]["name"].split()[1]) for e in doc["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"].startswith("rank ")}


def test_combined_kernel_ends_agree_as_on_the_true_clocks(moved_job, tmp_path):
    name, paths, _ = moved_job
    if name == "c10d":
        pytest.skip("one combine per generation is enough: the clocks are the same (test above)")
    out = tmp_path / "merged.json"
    result = invoke("combine", *paths, "-o", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    ranks = rank_of_pids(doc)
    ends: Dict[int, List[float]] = defaultdict(list)
    for e in sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]),
                    key=lambda e: e["ts"]):
        ends[ranks[e["pid"]]].append(e["ts"] + e["dur"])
    assert sorted(ends) == list(range(8))
    true = corpus.true_spreads()
    merged = [round((max(col) - min(col)) * 1000) for col in zip(*(ends[r] for r in range(8)))]
    assert len(merged) == len(true) == 8
    for got, want in zip(merged, true):
        assert got <= 1.5 * want, (merged, true)


def test_a_rank_nothing_links_is_warned_and_refused_by_strict(tmp_path):
    paths = corpus.write_job(str(tmp_path), (), {7: 3_200}, without_kernels=(7,))
    result = invoke("offsets", *paths, "--format", "json")
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "linked to no other rank" in line]
    assert len(said) == 1 and said[0].startswith("tracemerge: warning: rank 7 (")
    assert "no collective record" in said[0] and "What would link it: the NCCL kernels" in said[0]
    clocks = {c["rank"]: c for c in json.loads(result.stdout)["ranks"]}
    assert clocks[7]["method"] == "wall" and clocks[7]["error_bound_ns"] is None
    assert all(clocks[r]["method"] == "nccl-kernel" for r in range(1, 7))
    refused = invoke("combine", *paths, "-o", str(tmp_path / "out.json"), "--strict")
    assert refused.exit_code == 4
    assert "rank 7" in refused.output and "refused by --strict" in refused.output
    assert not (tmp_path / "out.json").exists()


# ---- communication kernels by more than one name (the GPU section) ----------------------------

RENAMED = ("void deep_ep::intranode::dispatch<8, 768>(int4*, float*)",        # DeepEP: a known family
           "void vllm::cross_device_reduce_1stage<float, 8>(RankData*)",     # custom all-reduce: known
           "my_ring_allgather_kernel(float*, int)")                           # nobody's: only by --comm-kernel


def union_ns(spans):
    """Length of the union of [start, end) spans, by a plain sweep."""
    total, reach = 0, None
    for s, e in sorted(spans):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def test_gpu_section_counts_non_nccl_communication_kernels(tmp_path):
    doc = corpus.load(corpus.DLRM[0])
    for n, k in enumerate(corpus.nccl_kernels(doc)):
        k["name"] = RENAMED[n % 3]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    device = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                         "gpu_memset")]
    span = lambda e: (e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000)  # noqa: E731
    known = [span(e) for e in device if e["name"] in RENAMED[:2]]
    custom = [span(e) for e in device if e["name"] == RENAMED[2]]
    compute = [span(e) for e in device if e["cat"] == "kernel" and e["name"] not in RENAMED]
    assert known and custom and compute

    def gpu(*extra):
        result = invoke("report", str(path), "--format", "json", "-q", *extra)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["gpu"][0]

    plain = gpu()
    assert plain["communication_us"] == pytest.approx(union_ns(known) / 1000, abs=1e-3)
    assert plain["compute_us"] == pytest.approx(union_ns(compute + custom) / 1000, abs=1e-3)
    assert plain["communication_by"] == {
        "deepep": {"kernels": 1, "count": 3, "total_us": pytest.approx(sum(e - s for s, e in known[0::2]) / 1000)},
        "custom all-reduce": {"kernels": 1, "count": 3,
                              "total_us": pytest.approx(sum(e - s for s, e in known[1::2]) / 1000)}}
    told = gpu("--comm-kernel", "ring_allgather", "--comm-kernel", "^unused$")
    assert told["communication_us"] == pytest.approx(union_ns(known + custom) / 1000, abs=1e-3)
    assert told["compute_us"] == pytest.approx(union_ns(compute) / 1000, abs=1e-3)
    assert told["communication_by"]["--comm-kernel ring_allgather"]["count"] == len(custom) == 2
    table = invoke("report", str(path), "-q", "--comm-kernel", "ring_allgather").stdout
    assert "Communication by" in table and "--comm-kernel ring_allgather: 2" in table
    bad = invoke("report", str(path), "-q", "--comm-kernel", "(")
    assert bad.exit_code == 2 and "--comm-kernel" in bad.output


# ---- what torch 2.11 writes (tests/corpus/gpu/torch211) ----------------------------------------

def test_torch_2_11_collectives_read_from_record_param_comms_point_to_point_left_out():
    from tracemerge.inputs import read_trace
    from tracemerge.inputs.kineto_collectives import collectives

    folder = corpus.DLRM[0].rsplit("/param_dlrm/", 1)[0] + "/torch211/"
    doc = corpus.load(folder + "world1_collectives.json.gz")
    ops = [e["args"]["Collective name"] for e in sorted(doc["traceEvents"], key=lambda e: e.get("ts", 0))
           if e.get("name") == "record_param_comms" and e["args"].get("Collective name") != "wait"]
    recs = collectives(read_trace(folder + "world1_collectives.json.gz"))
    assert [r["op"] for r in recs] == ops and len(ops) == 10
    assert {r["group"] for r in recs} == {"0"} and [r["seq"] for r in recs] == list(range(10))
    # a batch of a send and a receive: one SendRecv kernel, no collective of the group
    doc = corpus.load(folder + "world1_send_recv.json.gz")
    assert sum(e.get("cat") == "kernel" for e in doc["traceEvents"]) == 2
    assert collectives(read_trace(folder + "world1_send_recv.json.gz")) == []


def test_sampled_real_pair_mismatch_is_named_and_that_stream_not_matched():
    """HTA's sampled ranks 0 and 1 of one 128-rank job (2023, no group fields): sampling kept
    other kernels on each rank, so the first all-to-all of stream 0 differs in dtype (read
    here from the CPU ops around each launch); stream 1's two all-gathers agree."""
    gpu = corpus.DLRM[0].rsplit("/param_dlrm/", 1)[0]
    paths = [f"{gpu}/hta_sampled_rank0.json.gz", f"{gpu}/hta_sampled_rank1.json.gz"]
    first = []
    for path in paths:
        doc = corpus.load(path)
        k = next(k for k in corpus.nccl_kernels(doc) if k["tid"] == 84)
        first.append(corpus.launching_op(doc, k)["args"]["Input type"][0])
    assert first == ["long", "unsigned char"]
    result = invoke("offsets", *paths, "--format", "json")
    assert result.exit_code == 0, result.output
    assert ("collectives of process group default/stream0 carry no sequence number and their order disagrees at #0: "
            "rank 0 has all_to_all (sendrecv kernel) of ? × long, rank 1 has all_to_all (sendrecv kernel) of ? × "
            "unsigned char") in result.stderr
    clock = {c["rank"]: c for c in json.loads(result.stdout)["ranks"]}[1]
    assert clock["method"] == "nccl-kernel" and clock["samples"] == 2


# ---- the fit of one pair, on planted samples ---------------------------------------------------

def planted_samples(drift_ppm, noise_ns, seed, outliers=()):
    """50 collectives over 60 s: rank b's kernel ends read 2.5 s + drift later than a's,
    plus uniform noise of ±noise_ns (the last hop); ``outliers`` {index: ns} added."""
    import numpy as np
    rng = np.random.default_rng(seed)
    x = 1_700_000_000_000_000_000 + np.sort(rng.integers(0, 60_000_000_000, 50))
    d = 2_500_000_000 + (x - x[0]) * drift_ppm * 1e-6 + rng.uniform(-noise_ns, noise_ns, 50)
    for i, extra in dict(outliers).items():
        d[i] += extra
    return [(int(a), int(round(b)), ("g", k)) for k, (a, b) in enumerate(zip(x, d))]


def test_pair_fit_drift_only_where_the_samples_support_it():
    from tracemerge.clocks.nccl_kernel import fit_pair
    flat = fit_pair((0, 1), planted_samples(0.0, 3_000, seed=1))
    assert flat.drift_ppm == 0.0 and abs(flat.offset_ns - 2_500_000_000) <= 3_000
    assert flat.bound_ns >= abs(flat.offset_ns - 2_500_000_000)
    sloped = fit_pair((0, 1), planted_samples(20.0, 3_000, seed=2))   # 1.2 ms over the minute
    assert abs(sloped.drift_ppm - 20.0) < 0.5 and sloped.bound_ns < 10_000
    at = sloped.anchor_ns - 1_700_000_000_000_000_000
    truth = 2_500_000_000 + (sloped.anchor_ns - planted_samples(20.0, 3_000, seed=2)[0][0]) * 20e-6
    assert abs(sloped.offset_ns - truth) <= 3_000, (at, sloped)


def test_pair_fit_leaves_a_straggler_out_and_says_so():
    from tracemerge.clocks.nccl_kernel import fit_pair
    fit = fit_pair((0, 1), planted_samples(0.0, 2_000, seed=3, outliers={17: 300_000}))
    assert [key for key, _ in fit.outliers] == [("g", 17)] and fit.samples == 49
    assert abs(fit.offset_ns - 2_500_000_000) <= 2_000 and fit.bound_ns < 6_000
