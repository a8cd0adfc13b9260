"""Real GPU / NCCL Kineto traces of other people's jobs (tests/corpus/gpu, README there):
device time in key averages against torch's own EventList and hand counts, NCCL
collectives without sequence numbers, no false clock jumps, no negative self time, a
single trace without a rank."""

import gzip
import json
import os
from collections import Counter, defaultdict
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
from support.cli import invoke

from tracemerge.correlate.match import match_collectives
from tracemerge.inputs import read_trace
from tracemerge.inputs.kineto_collectives import collectives
from tracemerge.job import Job
from tracemerge.report.keyavg import group_rows, key_averages, op_tree

GPU = os.path.join(os.path.dirname(__file__), "corpus", "gpu")
NCCL = os.path.join(GPU, "hta_nccl_ddp_rank0.json.gz")          # DDP on 2 A100s, NCCL 2.17.1, 2024
SIMPLE_ADD = os.path.join(GPU, "hta_simple_add.json.gz")         # one A100, cuda_sync events, 2023
ROCM = os.path.join(GPU, "hta_rocm_mi250.json.gz")               # MI250, ROCm 6.2
MTIA = os.path.join(GPU, "hta_mtia_inference.json.gz")           # MTIA inference
TORCHREC = os.path.join(GPU, "hta_torchrec_rank3.json.gz")       # TorchRec, rank 3 of 8, epoch-µs ts, 2022
TORCHREC16 = os.path.join(GPU, "hta_torchrec_rank0_of16.json.gz")  # TorchRec, rank 0 of 16, 2023
SAMPLED = os.path.join(GPU, "hta_sampled_rank1.json.gz")         # rank 1 of 128, 2023
NO_RANK = os.path.join(GPU, "hta_no_rank.json.gz")               # distributedInfo without a rank

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
HOST = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")


def raw_events(path: str) -> Tuple[dict, List[dict]]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return doc, [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def ns(e: Dict[str, Any], key: str = "ts") -> int:
    """µs of the JSON as exact integer ns (whole µs and the fraction scaled apart)."""
    v = e[key]
    whole = int(v)
    return whole * 1000 + round((v - whole) * 1000)


def rows_of(path: str) -> list:
    trace = read_trace(path)
    return group_rows(key_averages(trace, np.zeros(len(trace.pids), dtype=np.int64)), by_rank=False)


def torch_averages(path: str, link_kernels: bool) -> Dict[Tuple[str, str, bool], tuple]:
    """torch's own key averages of a trace: FunctionEvents made from the JSON as torch's
    ``_parse_kineto_results`` makes them from Kineto's events — device events linked by
    their ``External id`` to the CPU op of that correlation id (torch's own rule, which a
    2024 trace still lets one follow) — then torch's EventList tree and ``key_averages``."""
    pu = pytest.importorskip("torch.autograd.profiler_util")
    from torch.autograd import DeviceType

    _, events = raw_events(path)
    t0 = min(ns(e) for e in events)
    made, by_id = [], {}
    for i, e in enumerate(events):
        cat = e.get("cat")
        if cat not in HOST + DEVICE or pu._filter_name(e["name"]):
            continue
        start = ns(e) - t0
        fe = pu.FunctionEvent(
            id=i, name=pu._rewrite_name(e["name"], with_wildcard=True), thread=e["tid"],
            start_us=start / 1000, end_us=(start + ns(e, "dur")) / 1000, stack=[], use_device="cuda",
            device_type=DeviceType.CUDA if cat in DEVICE else DeviceType.CPU,
            is_user_annotation=cat in ("user_annotation", "gpu_user_annotation"))
        made.append((e, fe))
        if cat == "cpu_op":
            by_id[e["args"]["External id"]] = fe
    if link_kernels:
        for e, fe in made:
            if e["cat"] in DEVICE and e["cat"] != "gpu_user_annotation":
                op = by_id.get(e["args"].get("External id"))
                if op is not None:
                    op.append_kernel(fe.name, 0, fe.time_range.end - fe.time_range.start)
    evs = pu.EventList([fe for _, fe in made], use_device="cuda")
    evs._build_tree()
    out = {}
    for a in evs.key_averages():
        key = (a.key, "CPU" if a.device_type == DeviceType.CPU else "CUDA", bool(a.is_user_annotation))
        out[key] = (a.count, a.cpu_time_total, a.self_cpu_time_total, a.device_time_total, a.self_device_time_total)
    return out


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


# ---- device time --------------------------------------------------------------------------

def test_device_time_equals_torch_key_averages_on_a_real_ddp_trace():
    expected = torch_averages(NCCL, link_kernels=True)
    ours = {(r.key, r.device_type, r.is_user_annotation): (r.count, r.cpu_time_total, r.self_cpu_time_total,
                                                          r.device_time_total, r.self_device_time_total)
            for r in rows_of(NCCL)}
    assert set(ours) == set(expected)
    bad = [(k, ours[k], expected[k]) for k in ours if ours[k][0] != expected[k][0]
           or not all(close(a, b) for a, b in zip(ours[k][1:], expected[k][1:]))]
    assert not bad, bad[:5]
    # and it is not all zeros: the NCCL kernels are the all-reduce ops' device time
    assert ours[("record_param_comms", "CPU", False)][4] > 40_000
    assert ours[("c10d::allreduce_", "CPU", False)][3] == pytest.approx(
        ours[("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "CUDA", False)][3])


def test_table_has_torchs_device_columns_and_footer():
    pu = pytest.importorskip("torch.autograd.profiler_util")
    _, events = raw_events(NCCL)
    device_us = sum(ns(e, "dur") for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")) / 1000
    result = invoke("report", NCCL, "--sort-by", "cuda_time_total", "--row-limit", "5")
    assert result.exit_code == 0, result.output
    head = result.stdout.splitlines()[1].split("  ")
    names = [h.strip() for h in head if h.strip()]
    assert names[6:10] == ["Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"]
    assert f"Self CUDA time total: {pu._format_time(device_us)}" in result.stdout
    doc = json.loads(invoke("report", NCCL, "--format", "json", "-q").stdout)
    row = doc["key_averages"][0]
    assert {"device_time_total", "self_device_time_total", "device_time", "device_type"} <= set(row)


def test_device_time_by_hand_on_an_older_trace():
    """2023's Kineto gave kernels an External id that is no op's: the launch is followed
    through args.correlation to the runtime call and the innermost cpu_op around it,
    here in a few lines over the raw events."""
    _, events = raw_events(SIMPLE_ADD)
    calls = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime" and "correlation" in e["args"]}
    ops = [e for e in events if e["cat"] == "cpu_op"]
    own: Dict[str, float] = defaultdict(float)
    for d in events:
        call = calls.get(d["args"].get("correlation")) if d["cat"] in DEVICE else None
        if call is None:
            continue
        around = [o for o in ops if o["tid"] == call["tid"] and ns(o) <= ns(call)
                  and ns(call) + ns(call, "dur") <= ns(o) + ns(o, "dur")]
        if around:
            inner = min(around, key=lambda o: ns(o, "dur"))
            own[inner["name"]] += ns(d, "dur") / 1000
    ours = {r.key: r.self_device_time_total for r in rows_of(SIMPLE_ADD) if r.device_type == "CPU"}
    assert own and {k for k, v in ours.items() if v > 0} == set(own)
    assert all(ours[k] == pytest.approx(v) for k, v in own.items())
    # footer: every device event but the GPU copies of user annotations, cuda_sync included
    total = sum(ns(e, "dur") for e in events if e["cat"] in DEVICE and e["cat"] != "gpu_user_annotation") / 1000
    out = invoke("report", SIMPLE_ADD, "-q").stdout
    assert f"Self CUDA time total: {total / 1000:.3f}ms" in out


def test_rocm_trace_reads_as_torch_reads_it():
    """ROCm profiles through CUDA's activity kinds: torch's table calls them CUDA."""
    _, events = raw_events(ROCM)
    device_us = sum(ns(e, "dur") for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")) / 1000
    out = invoke("report", ROCM, "-q").stdout
    assert "Self CUDA %" in out and f"Self CUDA time total: {device_us:.3f}us" in out
    rows = {r.key: r for r in rows_of(ROCM) if r.device_type == "CPU"}
    # aten::copy_ launched both host-to-device copies (hipMemcpyWithStream under it)
    copies = sum(ns(e, "dur") for e in events if e["cat"] == "gpu_memcpy") / 1000
    assert rows["aten::copy_"].self_device_time_total == pytest.approx(copies)


def test_mtia_columns_and_no_linked_kernels():
    """torch links no MTIA activity to ops: MTIA time is on the device rows only."""
    _, events = raw_events(MTIA)
    total = sum(ns(e, "dur") for e in events if e["cat"] == "mtia_ccp_events") / 1000
    rows = rows_of(MTIA)
    assert all(r.device_time_total == 0 for r in rows if r.device_type == "CPU")
    assert sum(r.self_device_time_total for r in rows if r.device_type == "MTIA") == pytest.approx(total)
    out = invoke("report", MTIA, "-q", "--row-limit", "3").stdout
    assert "Self MTIA %" in out and "Self MTIA time total:" in out


# ---- host time on real traces ---------------------------------------------------------------

@pytest.mark.parametrize("path", [TORCHREC, TORCHREC16])
def test_no_negative_self_cpu_and_torchs_self_times(path):
    """Epoch-µs timestamps (1.66e15 µs, no base) once lost up to 128 ns in the reader,
    un-nesting children that end with their parent: -23 ms of self CPU on
    ``## all2all_tw_data:wait ##``. Every row now equals torch's own tree on the JSON."""
    rows = rows_of(path)
    assert min(r.self_cpu_time_total for r in rows) >= 0
    expected = torch_averages(path, link_kernels=False)
    for r in rows:
        if r.device_type == "CPU":
            want = expected[(r.key, "CPU", r.is_user_annotation)]
            assert r.count == want[0] and close(r.self_cpu_time_total, want[2]), (r.key, r, want)


def test_all2all_wait_self_time_by_hand():
    _, events = raw_events(TORCHREC)
    span = next(e for e in events if e["name"] == "## all2all_tw_data:wait ##")
    inside = sorted((e for e in events if e["tid"] == span["tid"] and e["pid"] == span["pid"] and e is not span
                     and e["cat"] in ("cpu_op", "user_annotation") and span["ts"] <= e["ts"]
                     and e["ts"] + e["dur"] <= span["ts"] + span["dur"]), key=lambda e: (e["ts"], -e["dur"]))
    direct, end = [], -1
    for e in inside:       # integer µs in this trace: direct children are those not inside an earlier one
        if e["ts"] >= end:
            direct.append(e)
            end = e["ts"] + e["dur"]
        # one that starts inside the last direct child ends inside it here (they nest)
    want = span["dur"] - sum(e["dur"] for e in direct)
    assert want > 0
    tree = op_tree(read_trace(TORCHREC))
    code = tree.keys.index("## all2all_tw_data:wait ##")
    at = np.flatnonzero(tree.name == code)
    earliest = at[np.argmin(tree.start[at])]
    assert tree.self_ns[earliest] == want * 1000


# ---- clock jumps ----------------------------------------------------------------------------

@pytest.mark.parametrize("path", [SIMPLE_ADD, SAMPLED, TORCHREC16])
def test_no_false_clock_jump_on_real_gpu_traces(path):
    """Kineto writes a thread's runtime calls after its CPU ops, and runtime calls and
    device activity buffer by buffer: up to 16 s 'backwards' in file order."""
    _, events = raw_events(path)
    runtime = [(i, e) for i, e in enumerate(events) if e["cat"] == "cuda_runtime"]
    ops = [(i, e) for i, e in enumerate(events) if e["cat"] == "cpu_op" and e["tid"] == runtime[0][1]["tid"]]
    assert any(i > j and e["ts"] + e["dur"] < o["ts"] for i, e in runtime[:50] for j, o in ops[-50:])  # the pattern is there
    result = invoke("info", path, "--rank-from", "order")
    assert result.exit_code == 0 and "clock jump" not in result.output


@pytest.mark.parametrize("name", ["clock_jump_backward.json", "clock_jump_forward.json", "clock_jump_window.json"])
def test_real_clock_jumps_still_warn(name):
    path = os.path.join(os.path.dirname(__file__), "corpus", name)
    result = invoke("info", path)
    assert "possible clock jump" in result.output


# ---- a single trace without a rank ------------------------------------------------------------

def test_single_trace_without_rank_is_rank_0_with_a_note():
    result = invoke("info", NO_RANK)
    assert result.exit_code == 0, result.output
    assert "rank 0 (from no rank given; the only input)" in result.stdout
    assert "note:" in result.stderr and "taken as rank 0" in result.stderr
    result = invoke("report", NO_RANK, "-q", "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["key_averages"][0]["node_id"] == 0


def test_several_traces_without_ranks_take_their_order_with_a_warning(tmp_path):
    other = tmp_path / "other.json.gz"
    other.write_bytes(open(NO_RANK, "rb").read())
    result = invoke("info", str(other), NO_RANK)
    assert result.exit_code == 0, result.output
    assert result.stdout.index(str(other)) < result.stdout.index(NO_RANK)
    assert "rank 0 (from order given" in result.stdout and "rank 1 (from order given" in result.stdout
    assert result.output.count("by the order of the files given (--strict refuses)") == 2
    result = invoke("info", str(other), NO_RANK, "--strict")
    assert result.exit_code == 4 and "cannot tell the rank" in result.output
    named = tmp_path / "rank5.json.gz"      # a rank in its name: unnamed ones are not renumbered around it
    named.write_bytes(open(NO_RANK, "rb").read())
    assert invoke("info", NO_RANK, str(named)).exit_code == 4


# ---- NCCL collectives without sequence numbers --------------------------------------------------

def test_nccl_kernels_numbered_per_group_in_time_order():
    _, events = raw_events(NCCL)
    kernels = sorted((e for e in events if e["cat"] == "kernel" and "Collective name" in e["args"]), key=ns)
    recs = collectives(read_trace(NCCL))
    assert [r["seq"] for r in recs] == list(range(len(kernels))) == list(range(21))
    assert all(r["seq_inferred"] for r in recs)
    assert [r["op"] for r in recs] == [k["args"]["Collective name"] for k in kernels]
    # ts of 4.4e12 µs are float64 to ±0.5 ns: starts agree to 1 ns
    assert all(abs((r["start_ns"] - recs[0]["start_ns"]) - (ns(k) - ns(kernels[0]))) <= 1 and
               abs((r["end_ns"] - r["start_ns"]) - ns(k, "dur")) <= 1 for r, k in zip(recs, kernels))
    assert Counter(r["op"] for r in recs) == {"allreduce": 15, "broadcast": 6}


def shifted(tmp_path, shift_ns: int, edit=None) -> str:
    """The real rank-0 trace as rank 1, its clock moved by ``shift_ns`` (the base, exactly)."""
    with gzip.open(NCCL, "rt") as f:
        doc = json.load(f)
    doc["distributedInfo"]["rank"] = 1
    doc["baseTimeNanoseconds"] += shift_ns
    if edit is not None:
        edit(doc)
    path = tmp_path / "rank1.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return str(path)


def test_nccl_collectives_align_two_ranks_within_50_us(tmp_path):
    shift = 3_217_000_123
    rank1 = shifted(tmp_path, shift)
    result = invoke("offsets", NCCL, rank1, "--align", "auto", "--format", "json")
    assert result.exit_code == 0, result.output
    clocks = {c["rank"]: c for c in json.loads(result.stdout)["ranks"]}
    assert clocks[1]["method"] == "nccl-kernel"   # the kernels' ends, as auto prefers them
    assert abs(clocks[1]["offset_ns"] - shift) <= 50_000
    assert clocks[1]["error_bound_ns"] >= abs(clocks[1]["offset_ns"] - shift)


def test_disagreeing_collective_order_is_said_not_guessed_through(tmp_path):
    def drop_fifth_allreduce(doc):
        kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                          and "Collective name" in e.get("args", {})), key=lambda e: e["ts"])
        doc["traceEvents"].remove(kernels[5])
    rank1 = shifted(tmp_path, 0, drop_fifth_allreduce)
    job = Job.open([NCCL, rank1])
    matched = [m for m in match_collectives(job.infos) if m.complete]
    assert sorted(m.seq for m in matched) == [0, 1, 2, 3, 4]
    result = invoke("offsets", NCCL, rank1)
    assert "process group 0 carry no sequence number and their order disagrees at #5" in result.output


def test_report_has_a_collectives_section_on_nccl_traces(tmp_path):
    rank1 = shifted(tmp_path, 1_000_000)
    doc = json.loads(invoke("report", NCCL, rank1, "--format", "json", "-q").stdout)
    by_op = {c["op"]: c for c in doc["collectives"]}
    assert by_op["allreduce"]["count"] == by_op["allreduce"]["complete"] == 15
    assert by_op["broadcast"]["count"] == 6
    assert not any("no RPC or collectives" in n for n in doc["notes"])
    one = invoke("report", NCCL, "-q").stdout
    assert "Collectives" in one and "allreduce" in one


# ---- GPU time per rank ------------------------------------------------------------------------

def union_us(spans: List[Tuple[int, int]]) -> float:
    """Length of the union of [start, end) ns spans, by a plain sweep."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return (total + (cur_e - cur_s if cur_e is not None else 0)) / 1000


@pytest.mark.parametrize("path", [NCCL, ROCM])
def test_gpu_time_split_by_hand(path):
    _, events = raw_events(path)
    work = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    span = lambda e: (ns(e), ns(e) + ns(e, "dur"))  # noqa: E731
    memory = [span(e) for e in work if e["cat"] != "kernel"]
    comm = [span(e) for e in work if e["cat"] == "kernel" and "nccl" in e["name"].lower()]
    compute = [span(e) for e in work if e["cat"] == "kernel" and "nccl" not in e["name"].lower()]
    window = (max(b for _, b in map(span, work)) - min(a for a, _ in map(span, work))) / 1000
    calls = {e["args"]["correlation"]: ns(e) for e in events if e["cat"] == "cuda_runtime" and "correlation" in e["args"]}
    delays = sorted((ns(e) - calls[e["args"]["correlation"]]) / 1000 for e in work if e["args"].get("correlation") in calls)
    doc = json.loads(invoke("report", path, "--format", "json", "-q").stdout)
    (g,) = doc["gpu"]
    assert g["window_us"] == pytest.approx(window, abs=0.002)
    assert g["compute_us"] == pytest.approx(union_us(compute), abs=0.002)
    assert g["communication_us"] == pytest.approx(union_us(comm), abs=0.002)
    assert g["memory_us"] == pytest.approx(union_us(memory), abs=0.002)
    assert g["idle_us"] == pytest.approx(window - union_us(memory + comm + compute), abs=0.002)
    assert g["overlap_us"] == pytest.approx(union_us(comm) + union_us(compute) - union_us(comm + compute), abs=0.002)
    assert g["launch_delay_us"]["count"] == len(delays)
    assert g["launch_delay_us"]["p50"] == pytest.approx(float(np.percentile(delays, 50)), abs=0.002)
    assert g["top_kernels"][0]["total_us"] == pytest.approx(max(
        sum(ns(x, "dur") for x in work if x["name"] == e["name"]) for e in work) / 1000, abs=0.002)


def test_gpu_section_in_every_format_and_absent_on_cpu_traces(tmp_path):
    assert "GPU (per rank)" in invoke("report", ROCM, "-q").stdout
    page = tmp_path / "r.html"
    assert invoke("report", ROCM, "-q", "-o", str(tmp_path / "r.txt"), "--html", str(page)).exit_code == 0
    assert "<h2>GPU (per rank)</h2>" in page.read_text() and "Self CUDA time total" in page.read_text()
    assert "## GPU (per rank)" in invoke("report", ROCM, "-q", "--format", "markdown").stdout
    doc = json.loads(invoke("report", NO_RANK, "-q", "--format", "json").stdout)
    assert "gpu" not in doc and "device_time_total" not in doc["key_averages"][0]


def test_older_group_argument_name(tmp_path):
    """torch 2.0-2.1 named the group "Process Group ID" (its index); "wait" ops are no collective."""
    with gzip.open(NCCL, "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if "Process Group Name" in a:
            a["Process Group ID"] = int(a.pop("Process Group Name"))
        if a.get("Collective name") == "wait":
            a["Process Group ID"] = 0       # as 2.1 wrote them: with a group
    path = tmp_path / "older.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    recs = collectives(read_trace(str(path)))
    assert [(r["op"], r["group"], r["seq"]) for r in recs] == \
        [(r["op"], r["group"], r["seq"]) for r in collectives(read_trace(NCCL))]
