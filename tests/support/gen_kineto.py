"""Deterministic generator of realistic Kineto-like multi-rank traces, sized by ranks × MB.

Each rank gets what ``torch.profiler`` + ``export_chrome_trace`` writes for a GPU training
loop, in Kineto's own pretty-printed layout: metadata (process/thread names, labels, sort
indexes), the profiler span and iteration instants, ``ProfilerStep#N`` annotations with
nested ``aten::`` CPU ops (forward and backward), ``cudaLaunchKernel`` runtime calls, GPU
kernels and memcpys on streams of device pid 0, ``ac2g`` flows (runtime → kernel) and
``fwdbwd`` flows (forward op → its backward). Every rank uses the same host pid and device
pid 0, so pids collide across ranks as they do on a real cluster.

``--rank-files`` writes tracemerge rank files instead (docs/rank-file-format.md): the
``"tracemerge"`` block first, with RPC records whose t1..t4 agree across ranks and
collective records, and each rank's clock off by a known offset so alignment has work to do.

    python tests/support/gen_kineto.py OUTDIR --ranks 8 --mb 60 [--rank-files] [--gzip]
"""

import argparse
import gzip
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor

import orjson

BASE_NS = 1_790_857_026_000_000_000   # a Kineto baseTimeNanoseconds (3-month boundary)
T0_NS = 4_464_888_733_311_333         # first event, ns after BASE_NS on the true clock
HOST_PID = 3570                        # the same on every rank: pids collide across ranks
STREAMS = (7, 20)
BYTES_PER_STEP_GUESS = 60_000
RPCS_PER_STEP = 2

# (name, backward name, kernel) of the layers of one forward pass
LAYERS = [
    ("aten::linear", "LinearBackward0", "ampere_sgemm_128x64_tn"),
    ("aten::relu", "ReluBackward0", "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>"),
    ("aten::layer_norm", "NativeLayerNormBackward0", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"),
    ("aten::dropout", "NativeDropoutBackward0", "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>"),
]
CHILDREN = {
    "aten::linear": ("aten::t", "aten::addmm"),
    "aten::relu": ("aten::clamp_min",),
    "aten::layer_norm": ("aten::native_layer_norm", "aten::empty"),
    "aten::dropout": ("aten::native_dropout", "aten::empty_like"),
}


def clock_offset_ns(rank):
    """This rank's clock minus the true clock: a few ms, rank 0 exact."""
    return 0 if rank == 0 else ((rank * 2_654_435_761) % 6_000_000) - 3_000_000


def rpc_times(caller, k, world_size):
    """True (t1 send, t2 start, t3 end, t4 complete) ns of caller's k-th RPC; both sides compute it."""
    step = k // RPCS_PER_STEP
    t1 = T0_NS + 2_000_000 + step * 5_000_000 + (k % RPCS_PER_STEP) * 1_500_000 + caller * 13_000
    return t1, t1 + 160_000, t1 + 330_000, t1 + 480_000


class Writer:
    """Appends Kineto-formatted events to a list of str chunks; ids count up per rank."""

    def __init__(self, rank, rng, overlapping_kernels=False):
        self.rank = rank
        self.overlapping_kernels = overlapping_kernels
        self.rng = rng
        self.off = clock_offset_ns(rank)
        self.parts = []
        self.ext = 500
        self.corr = 1000
        self.stream_free = {}  # stream -> when its last kernel ends: a stream runs one kernel at a time
        self.ev_idx = 0
        self.size = 0

    def ts(self, true_ns):
        local = true_ns + self.off
        return f"{local // 1000}.{local % 1000:03d}"

    def add(self, s):
        self.parts.append(s)
        self.size += len(s)

    def meta(self, name, pid, tid, key, value):
        self.add(f'  {{\n    "ph": "M",\n    "name": "{name}",\n    "ts": {self.ts(T0_NS)},\n'
                 f'    "pid": {pid},\n    "tid": {tid},\n    "args": {{\n      "{key}": {orjson.dumps(value).decode()}\n    }}\n  }},\n')

    def x(self, cat, name, pid, tid, start, dur, args):
        self.add(f'  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": "{name}",\n    "pid": {pid},\n'
                 f'    "tid": {tid},\n    "ts": {self.ts(start)},\n    "dur": {dur // 1000}.{dur % 1000:03d}\n'
                 f'    ,\n    "args": {{\n      {args}\n    }}\n  }},\n')

    def cpu_op(self, name, tid, start, dur, seq=None):
        self.ext += 1
        self.ev_idx += 1
        extra = f', "Sequence number": {seq}, "Fwd thread id": 0' if seq is not None else ""
        self.x("cpu_op", name, HOST_PID, tid, start, dur,
               f'"External id": {self.ext},"Record function id": 0{extra}, "Ev Idx": {self.ev_idx}')

    def flow(self, ph, cat, fid, pid, tid, at):
        bp = ',\n    "bp": "e"' if ph == "f" else ""
        self.add(f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {self.ts(at)},\n'
                 f'    "cat": "{cat}", "name": "{cat}"{bp}\n  }},\n')

    def launch(self, tid, start, kernel, stream):
        """cudaLaunchKernel on the CPU thread, the kernel on a stream, and their ac2g flow."""
        self.corr += 1
        self.ext += 1
        corr = self.corr
        self.x("cuda_runtime", "cudaLaunchKernel", HOST_PID, tid, start, 4_200,
               f'"External id": {self.ext}, "cbid": 211, "correlation": {corr}')
        self.flow("s", "ac2g", corr, HOST_PID, tid, start)
        k_start = start + 9_000 + self.rng.randrange(2_000)
        if not self.overlapping_kernels:  # the rounds 1-6 generator let a stream's kernels overlap
            k_start = max(k_start, self.stream_free.get(stream, 0))
        k_dur = 20_000 + self.rng.randrange(80_000)
        self.stream_free[stream] = k_start + k_dur + 1_000  # a µs apart: rounding never makes them touch
        self.x("kernel", kernel, 0, stream, k_start, k_dur,
               f'"External id": {self.ext}, "queued": 0, "device": 0, "context": 1, "stream": {stream}, '
               f'"correlation": {corr}, "registers per thread": 128, "shared memory": 16384, '
               f'"blocks per SM": 0.5, "warps per SM": 4.0, "grid": [64, 1, 1], "block": [256, 1, 1], '
               f'"est. achieved occupancy %": 25')
        self.flow("f", "ac2g", corr, 0, stream, k_start)


def generate_rank(rank, world_size, target_bytes, seed, rank_file, overlapping_kernels=False):
    """The whole document of one rank as bytes."""
    w = Writer(rank, random.Random(seed * 1_000_003 + rank), overlapping_kernels)
    main_tid, bwd_tid = HOST_PID, HOST_PID + 12
    for tid, comm in ((main_tid, "python"), (bwd_tid, "pt_autograd_0")):
        w.meta("thread_name", HOST_PID, tid, "name", f"thread {tid} ({comm})")
        w.meta("thread_sort_index", HOST_PID, tid, "sort_index", tid)
    for stream in STREAMS:
        w.meta("thread_name", 0, stream, "name", f"stream {stream}")
        w.meta("thread_sort_index", 0, stream, "sort_index", stream)
    rpcs, collectives = [], []
    step, t = 0, T0_NS
    while w.size < target_bytes - 2_000:
        step_start = t
        w.add(f'  {{\n    "ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler",\n'
              f'    "pid": "Traces", "tid": "Trace PyTorch Profiler",\n    "ts": {w.ts(t)}\n  }},\n')
        forward = []
        t += 3_000
        for layer, (op, bwd, kernel) in enumerate(LAYERS * 3):
            dur = 40_000 + w.rng.randrange(30_000)
            seq = step * 100 + layer
            w.cpu_op(op, main_tid, t, dur, seq)
            w.flow("s", "fwdbwd", seq, HOST_PID, main_tid, t)
            forward.append((seq, bwd, kernel))
            ct = t + 2_000
            for child in CHILDREN[op]:
                w.cpu_op(child, main_tid, ct, 12_000, seq)
                ct += 13_000
            w.launch(main_tid, ct, kernel, STREAMS[layer % 2])
            t += dur + 1_500
        for seq, bwd, kernel in reversed(forward):
            dur = 60_000 + w.rng.randrange(40_000)
            w.cpu_op(f"autograd::engine::evaluate_function: {bwd}", bwd_tid, t, dur)
            w.cpu_op(bwd, bwd_tid, t + 1_000, dur - 2_000, seq)
            w.flow("f", "fwdbwd", seq, HOST_PID, bwd_tid, t + 1_000)
            w.launch(bwd_tid, t + 3_000, kernel, STREAMS[0])
            t += dur + 1_000
        if rank_file:
            for k in range(step * RPCS_PER_STEP, (step + 1) * RPCS_PER_STEP):
                _rpc_records(w, rank, k, world_size, main_tid, rpcs)
            c_start = t + 2_000
            collectives.append({"op": "all_reduce", "group": "0", "group_ranks": list(range(world_size)),
                                "seq": step, "bytes": 4 << 20, "start_ns": BASE_NS + c_start + w.off,
                                "end_ns": BASE_NS + c_start + 300_000 + w.off})
        t = max(t + 50_000, step_start + 5_000_000)
        w.x("user_annotation", f"ProfilerStep#{step}", HOST_PID, main_tid, step_start, t - step_start - 1_000,
            f'"External id": {w.ext + 1}, "Record function id": 0, "Ev Idx": {w.ev_idx + 1}')
        w.ext += 1
        w.ev_idx += 1
        step += 1
    # the profiler span covers the whole window, as Kineto writes it once profiling stops
    w.x("Trace", "PyTorch Profiler (0)", '"Spans"', '"PyTorch Profiler"', T0_NS - 145_000, t - T0_NS + 145_000,
        '"Op count": 0')
    w.add(f'  {{\n    "ph": "i", "s": "t", "name": "Record Window End",\n    "pid": "", "tid": "",\n'
          f'    "ts": {w.ts(t + 1_000_000)}\n  }}\n')
    head = [
        "{\n",
        '  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85031714816}\n  ],\n',
        f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}}},\n',
        f'  "trace_id": "{seed:08X}{rank:024X}",\n  "host_name": "node{rank // 8}",\n',
        f'  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {BASE_NS},\n  "traceEvents": [\n',
    ]
    if rank_file:
        block = {"version": 1, "job_id": f"bench-{seed}", "rank": rank, "world_size": world_size,
                 "worker_name": f"worker{rank}", "hostname": f"node{rank // 8}", "pid": HOST_PID, "cycle": None,
                 "profile_start_ns": BASE_NS + T0_NS + w.off, "profile_stop_ns": BASE_NS + t + w.off,
                 "rpcs": rpcs, "collectives": collectives}
        head.insert(1, '  "tracemerge": ' + orjson.dumps(block).decode() + ",\n")
    tail = '  ],\n  "traceName": "rank%d.pt.trace.json"\n}\n' % rank
    return "".join(head + w.parts + [tail]).encode()


def _rpc_records(w, rank, k, world_size, tid, out):
    """This rank's side of RPC k it makes (to the next rank) and of the one it serves (from the previous)."""
    if world_size < 2:
        return
    for caller in (rank, (rank - 1) % world_size):
        callee = (caller + 1) % world_size
        t1, t2, t3, t4 = rpc_times(caller, k, world_size)
        name = f"rpc_async#aten::add(worker{caller} -> worker{callee})"
        rec = {"rpc_id": f"{caller}:{k}", "kind": "rpc_async", "func": "aten::add", "name": name,
               "caller": caller, "callee": callee, "caller_name": f"worker{caller}",
               "callee_name": f"worker{callee}", "status": "ok"}
        if caller == rank:
            rec.update(role="caller", send_ns=BASE_NS + t1 + w.off, complete_ns=BASE_NS + t4 + w.off)
            w.x("user_annotation", name, HOST_PID, tid, t1, t4 - t1, f'"rpc_id": "{caller}:{k}", "role": "caller"')
        else:
            rec.update(role="callee", start_ns=BASE_NS + t2 + w.off, end_ns=BASE_NS + t3 + w.off)
            w.x("user_annotation", name + "#remote", HOST_PID, HOST_PID + 40, t2, t3 - t2,
                f'"rpc_id": "{caller}:{k}", "role": "callee"')
        out.append(rec)


def write_rank(outdir, rank, world_size, mb, seed, rank_file, gz, overlapping_kernels=False):
    data = generate_rank(rank, world_size, int(mb * 1_000_000), seed, rank_file, overlapping_kernels)
    stem = f"rank{rank}" if rank_file else f"rank{rank}.pt.trace"
    path = os.path.join(outdir, stem + (".json.gz" if gz else ".json"))
    with open(path, "wb") as f:
        f.write(gzip.compress(data, compresslevel=1, mtime=0) if gz else data)
    return path


def generate(outdir, ranks, mb, seed=0, rank_files=False, gz=False, jobs=None, overlapping_kernels=False):
    """Write ``ranks`` files of about ``mb`` MB (uncompressed) each into ``outdir``; their paths.
    ``overlapping_kernels``: a stream's kernels may overlap, as the generator of rounds 1-6
    made them (no real stream does; the JSON output moves such spans to lanes)."""
    os.makedirs(outdir, exist_ok=True)
    args = [(outdir, r, ranks, mb, seed, rank_files, gz, overlapping_kernels) for r in range(ranks)]
    if (jobs or os.cpu_count()) == 1 or ranks == 1:
        return [write_rank(*a) for a in args]
    with ProcessPoolExecutor(jobs or os.cpu_count()) as pool:
        return list(pool.map(write_rank, *zip(*args)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--mb", type=float, default=60.0, help="uncompressed MB per rank (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rank-files", action="store_true", help="tracemerge rank files with RPC/collective records")
    p.add_argument("--gzip", action="store_true", help="gzip the files (level 1)")
    p.add_argument("--jobs", type=int, default=None, help="processes (default: all cores)")
    a = p.parse_args(argv)
    for path in generate(a.outdir, a.ranks, a.mb, a.seed, a.rank_files, a.gzip, a.jobs):
        print(path)


if __name__ == "__main__":
    sys.exit(main())
