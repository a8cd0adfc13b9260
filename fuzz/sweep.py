#!/usr/bin/env python3
"""The seeded adversarial sweep (issue 35): every command, and ``tracemerge.load``, run on
hostile inputs for a bounded time, each run in its own process with a time limit.

Classes of hostile input (each run draws one, from its own seed ``SEED:K``):
  field      one field of the rank-file block (its RPC and collective records among them),
             of ``distributedInfo``, of an event or its args (a ``process_name``'s among
             them) replaced by every wrong JSON type and non-finite value (null, a bool, a
             string of a number, -1, 2**70, 1e300, NaN, Infinity, a list, an object)
  truncate   a rank file cut at a random byte (plain or gzip)
  bomb       a gzip or zstd input of a few MB that inflates to GBs
  deep       a value nested 50,000 deep in the block
  special    /dev/zero, /dev/urandom, a FIFO nobody writes to, a directory, a socket
  options    hostile --window / --ranks / --min-duration / --overview values
  force      --force onto a FIFO, a device node, a directory holding the inputs
  merged     a merged trace fed back in, alone or with its rank files
  signal     SIGTERM or SIGINT at a random moment
  late       SIGTERM or SIGINT the moment the output appears (after it is in place): the
             message must say it was written, never "no output was written"
  concurrent two runs writing one output at once
  values     every option's value space at its edges, parsed before any work: --comm-kernel
             (repeat counts past the regex engine, 1,000 nested groups), whatif --speedup
             (K 5e-324 ... 1e308, nan, two speed-ups of one span), --scheduler (garbage,
             tcp://, tls://, ports 0 and 70000, nothing listening), --max-inflate and
             TRACEMERGE_MAX_INFLATE (inf, 1e30, 9999...G), TRACEMERGE_PIPE_WAIT (inf, x, -1)
  names      inputs and outputs whose names are not UTF-8 (rank1-\xff.json.gz)
  longname   outputs at the filesystem's name limit (-o NAME.json --report, report --html,
             export): refused before the work, nothing written
  overwrite  report, diff, whatif -o onto an existing file without --force: exit 5, unchanged
  summary    a merged trace whose summary holds a hostile value, read by info/report/diff
  journal    a rank that left only its journal (rank{R}.journal, JSON Lines), one of its
             lines' fields hostile, beside the other ranks' files (with --cycle sometimes)
  cycles     a rank's schedule cycle files (rank{R}.cycle{N}), one copied under another
             cycle number, a journal or a whole-run file beside them
  served     a callee's served_ops and a caller's builtins sent as themselves, one value of
             a served op, an admission or a native call hostile (fuzz/sweep_inputs.py)

Asserted for every run: never exit 1 (an internal error) nor a traceback; no run past the
time limit (a hang); no run over 1 GB of memory (peak RSS of the process and the workers it
waited for) on inputs under 10 MB; no input changed (every file named on the command line,
and a refused --force's target, as they were); no temporary file or directory left beside
the output or the inputs (signals, errors, concurrent writers). The last line counts each:
``exit 1: 0, inputs changed: 0, leftovers: 0, over 1 GB: 0, over 60 s: 0``.

    python fuzz/sweep.py [--seconds 90] [--seed 35] [--jobs N] [--only K] [--kind KIND] [--keep DIR]

Exits 1 when anything was found, listing each finding with how to replay it (``--only K``).
"""

import argparse
import gzip
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from sweep_inputs import MAKERS  # fuzz/: the directory of this script is on sys.path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
BASES = [[os.path.join(SAMPLES, "rpc_profiling", f"rank{r}.json.gz") for r in range(2)],
         [os.path.join(SAMPLES, "parameter_server", f"rank{r}.json.gz") for r in range(3)]]
RUN_LIMIT_S = 60
RSS_LIMIT = 1 << 30
SMALL_INPUTS = 10 << 20
HOSTILE = [None, True, False, "12", "", -1, 0, 2 ** 70, -2 ** 70, 1e300, -1e300, float("nan"), float("inf"),
           float("-inf"), [], [1, 2], {}, {"a": 1}, "x" * 10000, 0.5]

COMMANDS: Dict[str, Callable[[List[str], str], List[str]]] = {
    "info": lambda files, out: ["info", *files],
    "report": lambda files, out: ["report", *files, "-o", os.path.join(out, "r.txt")],
    "report-analysis": lambda files, out: ["report", *files, "--analysis", "--format", "json",
                                           "-o", os.path.join(out, "r.json")],
    "report-html": lambda files, out: ["report", *files, "--html", os.path.join(out, "r.html"),
                                       "-o", os.path.join(out, "r.txt")],
    "offsets": lambda files, out: ["offsets", *files],
    "combine-json": lambda files, out: ["combine", *files, "-o", os.path.join(out, "t.json")],
    "combine-pftrace": lambda files, out: ["combine", *files, "-o", os.path.join(out, "t.pftrace")],
    "combine-report": lambda files, out: ["combine", *files, "-o", os.path.join(out, "t.json.gz"), "--report"],
    "export": lambda files, out: ["export", *files, "-o", os.path.join(out, "pq")],
    "align": lambda files, out: ["align", *files, "-o", os.path.join(out, "aligned")],
    "whatif": lambda files, out: ["whatif", *files, "--speedup", "aten::add=2"],
    "diff": lambda files, out: ["diff", files[0], files[-1]],
    "load": lambda files, out: ["@load", *files],
}
# tracemerge.load in a process of its own: a TracemergeError is its documented failure (exit 3
# here), anything else an internal error (exit 1), as the CLI says it
LOAD = ("import sys, tracemerge\nfrom tracemerge.errors import TracemergeError\n"
        "try:\n    tracemerge.load(sys.argv[1:])\nexcept TracemergeError as e:\n"
        "    print('tracemerge: error:', e, file=sys.stderr); sys.exit(3)\n")


@dataclass
class Case:
    kind: str
    command: str
    argv: List[str]
    env: Dict[str, str] = field(default_factory=dict)
    signal_after: Optional[float] = None
    sig: int = 0
    twin: bool = False                        # run twice at once (concurrent writers)
    ok_codes: tuple = ()                      # exit codes that must be seen (besides "never 1")
    keep_intact: List[str] = field(default_factory=list)  # paths that must be unchanged after the run
    signal_on: Optional[str] = None           # send ``sig`` the moment this path exists (late)
    nothing_written: bool = False             # the output directory must stay empty (refused before the work)


@dataclass
class Result:
    k: int
    case: Case
    rc: int
    seconds: float
    rss: int
    inputs_bytes: int
    stderr: str
    problems: List[str]


def _doc(path: str) -> Any:
    with gzip.open(path) as f:
        return json.loads(f.read())


def _write(path: str, doc: Any, rng: random.Random) -> str:
    data = json.dumps(doc, allow_nan=True).encode()  # NaN / Infinity tokens: what a careless writer leaves
    if rng.random() < 0.5:
        path += ".gz"
        data = gzip.compress(data, 1)
    else:
        path += ".json"
    with open(path, "wb") as f:
        f.write(data)
    return path


def _paths(value: Any, prefix: tuple = ()) -> List[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i in sorted({0, len(value) - 1} if len(value) > 2 else range(len(value))):
            out += _paths(value[i], prefix + (i,))
    return out


def _set(doc: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _rank_files(rng: random.Random, tmp: str, mutate: Optional[Callable[[List[Any]], None]] = None) -> List[str]:
    base = rng.choice(BASES)
    docs = [_doc(p) for p in base]
    if mutate:
        mutate(docs)
    return [_write(os.path.join(tmp, f"rank{r}"), d, rng) for r, d in enumerate(docs)]


KINDS = ["field", "field", "field", "truncate", "bomb", "deep", "special", "options", "force", "merged", "signal",
         "concurrent", "values", "values", "names", "longname", "overwrite", "late", "summary", "journal", "cycles",
         *MAKERS]


def make_case(k: int, seed: int, tmp: str, kinds: Optional[List[str]] = None) -> Case:
    rng = random.Random(f"{seed}:{k}")
    kind = rng.choice([c for c in KINDS if not kinds or c in kinds])
    command = rng.choice(sorted(COMMANDS))
    out = os.path.join(tmp, "out")
    os.makedirs(out)
    if kind in MAKERS:  # fuzz/sweep_inputs.py
        files, extra = MAKERS[kind](rng, tmp, [_doc(p) for p in rng.choice(BASES)], HOSTILE, _write)
        argv = COMMANDS[command](files, out)
        return Case(kind, command, argv + extra if argv[0] not in ("diff", "@load") else argv)
    if kind == "field":
        def mutate(docs: List[Any]) -> None:
            doc = rng.choice(docs)
            where = rng.choice(["tracemerge", "event", "distributedInfo", "top", "rpc", "collective",
                                "process_name"])
            if where == "rpc" and doc["tracemerge"]["rpcs"]:
                rpcs = doc["tracemerge"]["rpcs"]
                k = rng.randrange(len(rpcs))
                path = ("tracemerge", "rpcs", k, rng.choice(sorted(rpcs[k])))
            elif where == "collective":
                # one collective every rank took part in, then one field of one rank's record made hostile
                for r, d in enumerate(docs):
                    start = d["tracemerge"].get("profile_start_ns") or 0
                    d["tracemerge"]["collectives"] = [{
                        "op": "allreduce", "group": "0", "group_ranks": list(range(len(docs))), "seq": 1,
                        "bytes": 4096, "dtype": "Float", "start_ns": start + 1000, "end_ns": start + 5000}]
                path = ("tracemerge", "collectives", 0, rng.choice(["op", "group", "group_ranks", "seq", "bytes",
                                                                    "dtype", "start_ns", "end_ns"]))
            elif where == "process_name":
                meta = [i for i, e in enumerate(doc["traceEvents"]) if e.get("name") == "process_name"]
                path = ("traceEvents", rng.choice(meta), rng.choice(["args", "args", "name", "pid"]))
                if path[-1] == "name":
                    path = path[:-1] + ("args", "name")
            elif where == "event":
                event = rng.choice(doc["traceEvents"])
                event.setdefault("args", {})
                paths = [p for p in _paths(event) if p]
                path = ("traceEvents", doc["traceEvents"].index(event)) + rng.choice(paths)
            elif where == "distributedInfo":
                doc["distributedInfo"] = {"backend": "gloo", "rank": docs.index(doc), "world_size": len(docs)}
                path = ("distributedInfo", rng.choice(["backend", "rank", "world_size"]))
            elif where == "tracemerge" and "tracemerge" in doc:
                path = rng.choice([p for p in _paths(doc["tracemerge"], ("tracemerge",)) if len(p) > 1])
            else:
                path = (rng.choice([k for k in doc if k != "traceEvents"] or ["baseTimeNanoseconds"]),)
            _set(doc, path, rng.choice(HOSTILE))
        files = _rank_files(rng, tmp, mutate)
        return Case(kind, command, COMMANDS[command](files, out))
    if kind == "truncate":
        files = _rank_files(rng, tmp)
        victim = rng.choice(files)
        with open(victim, "rb") as f:
            data = f.read()
        with open(victim, "wb") as f:
            f.write(data[:rng.randrange(len(data))])
        return Case(kind, command, COMMANDS[command](files, out))
    if kind == "bomb":
        files = _rank_files(rng, tmp)
        bomb = os.path.join(tmp, "bomb.json" + rng.choice([".gz", ".zst"]))
        chunk = b" " * (16 << 20)
        with open(bomb, "wb") as f:
            if bomb.endswith(".gz"):
                member = gzip.compress(b'{"traceEvents": [' + chunk, 9)
                f.write(member + gzip.compress(chunk, 9) * 255)  # ~4 GiB of JSON whitespace in ~4 MB
            else:
                try:
                    import zstandard
                except ImportError:
                    f.write(gzip.compress(b"[" + chunk, 9) * 64)
                else:
                    c = zstandard.ZstdCompressor(level=19)
                    f.write(c.compress(b'{"traceEvents": [' + chunk) + c.compress(chunk) * 255)
        files[rng.randrange(len(files))] = bomb
        return Case(kind, command, COMMANDS[command](files, out))
    if kind == "deep":
        def deep(docs: List[Any]) -> None:
            value: Any = 1
            for _ in range(50_000):
                value = [value]
            doc = rng.choice(docs)
            target = doc.setdefault("tracemerge", {}) if rng.random() < 0.5 else rng.choice(doc["traceEvents"])
            target[rng.choice(["deep", "args", "rpcs"])] = value
        sys.setrecursionlimit(200_000)  # json.dumps of the nesting in this (sweep) process
        files = _rank_files(rng, tmp, deep)
        return Case(kind, command, COMMANDS[command](files, out))
    if kind == "special":
        files = _rank_files(rng, tmp)
        which = rng.choice(["/dev/zero", "/dev/urandom", "fifo", "dir", "socket"])
        if which == "fifo":
            special = os.path.join(tmp, "fifo.json")
            os.mkfifo(special)
        elif which == "dir":
            special = os.path.join(tmp, "dir.json")
            os.mkdir(special)
        elif which == "socket":
            special = os.path.join(tmp, "sock.json")
            s = socket.socket(socket.AF_UNIX)
            s.bind(special)
            s.close()
        else:
            special = which
        files.insert(rng.randrange(len(files) + 1), special)
        if rng.random() < 0.3:
            files.append("--skip-bad")
        return Case(kind, command, COMMANDS[command](files, out), env={"TRACEMERGE_PIPE_WAIT": "2"})
    if kind == "options":
        files = _rank_files(rng, tmp)
        command = rng.choice(["combine-json", "combine-pftrace", "export"])
        bad = rng.choice([["--window", "0:inf"], ["--window", "nan:1"], ["--window", "1e300:1e308"],
                          ["--window", "-inf:"], ["--ranks", "0-10000000"], ["--ranks", "0-99999999999"],
                          ["--ranks", "-1"], ["--min-duration", "nan"], ["--overview", "nan"],
                          ["--overview", "inf"], ["--max-inflate", "lots"], ["--offset", "1=nan"]])
        return Case(kind, command, COMMANDS[command](files, out) + bad)
    if kind == "force":
        files = _rank_files(rng, tmp)
        which = rng.choice(["fifo", "chardev", "inputs-dir"])
        if which == "inputs-dir":
            command = "export"
            target = tmp  # holds the inputs
            argv = ["export", *files, "-o", target, "--force"]
            return Case(kind, command, argv, ok_codes=(5,), keep_intact=files)
        target = os.path.join(out, "target")
        if which == "fifo":
            os.mkfifo(target)
        else:
            try:
                os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except PermissionError:
                os.mkfifo(target)
        command = rng.choice(["combine-json", "report"])
        argv = (["combine", *files, "-o", target, "--force"] if command == "combine-json"
                else ["report", *files, "-o", target])
        return Case(kind, command, argv, ok_codes=(5,), keep_intact=[target])
    if kind == "merged":
        files = _rank_files(rng, tmp)
        merged = os.path.join(tmp, "merged.json")
        subprocess.run([sys.executable, "-m", "tracemerge", "combine", *files, "-o", merged, "-q"],
                       capture_output=True, timeout=RUN_LIMIT_S, cwd=ROOT)
        given = [merged] if rng.random() < 0.5 else files + [merged]
        return Case(kind, command, COMMANDS[command](given, out))
    if kind == "signal":
        files = _rank_files(rng, tmp)
        return Case(kind, command, COMMANDS[command](files, out), signal_after=rng.uniform(0.05, 2.0),
                    sig=rng.choice([signal.SIGTERM, signal.SIGINT]))
    if kind == "values":
        return _values_case(rng, tmp, out)
    if kind == "names":
        files = _rank_files(rng, tmp)
        named = []
        for f in files:  # a byte no UTF-8 holds, as os.fsdecode hands such a name over
            odd = f.replace("rank", os.fsdecode(b"rank\xff-"), 1) if rng.random() < 0.7 else f
            os.rename(f, odd)
            named.append(odd)
        argv = COMMANDS[command](named, out)
        argv = [a.replace(out, os.path.join(out, os.fsdecode(b"o\xfe"))) if a.startswith(out) else a for a in argv]
        os.makedirs(os.path.join(out, os.fsdecode(b"o\xfe")))
        return Case(kind, command, argv)
    if kind == "longname":
        files = _rank_files(rng, tmp)
        limit = os.pathconf(out, "PC_NAME_MAX")
        which = rng.choice(["combine-report", "report-html", "export", "combine"])
        if which == "combine-report":   # NAME.json fits, NAME.report.txt does not
            argv = ["combine", *files, "-o", os.path.join(out, "x" * (limit - 8) + ".json"), "--report"]
        elif which == "report-html":
            argv = ["report", *files, "-o", os.path.join(out, "r.txt"), "--html",
                    os.path.join(out, "h" * (limit - 4) + ".html")]
        elif which == "export":          # its temporary directory's name is longer
            argv = ["export", *files, "-o", os.path.join(out, "e" * (limit - 10))]
        else:                            # with --force its temporary name is longer
            argv = ["combine", *files, "-o", os.path.join(out, "c" * (limit - 10) + ".json"), "--force"]
        return Case(kind, which, argv, ok_codes=(5,), nothing_written=True)
    if kind == "overwrite":
        files = _rank_files(rng, tmp)
        target = os.path.join(out, "kept.txt")
        with open(target, "wb") as f:
            f.write(b"an earlier answer")
        which = rng.choice(["report", "report-html", "diff", "whatif"])
        argv = {"report": ["report", *files, "-o", target],
                "report-html": ["report", *files, "-o", os.path.join(out, "new.txt"), "--html", target],
                "diff": ["diff", files[0], files[-1], "-o", target],
                "whatif": ["whatif", *files, "--speedup", "aten::add=2", "-o", target]}[which]
        return Case(kind, which, argv, ok_codes=(5,), keep_intact=[target])
    if kind == "late":
        files = _rank_files(rng, tmp)
        which = rng.choice(["combine-json", "combine-report", "report", "export"])
        argv = COMMANDS[which](files, out)
        first = argv[argv.index("-o") + 1]
        return Case(kind, which, argv, signal_on=first, sig=rng.choice([signal.SIGTERM, signal.SIGINT]))
    if kind == "summary":
        files = _rank_files(rng, tmp)
        merged = os.path.join(tmp, "merged.json")
        subprocess.run([sys.executable, "-m", "tracemerge", "combine", *files, "-o", merged, "-q"],
                       capture_output=True, timeout=RUN_LIMIT_S, cwd=ROOT)
        with open(merged) as f:
            doc = json.load(f)
        summary = doc.get("tracemerge") or {}
        paths = [p for p in _paths(summary, ("tracemerge",)) if len(p) > 1]
        if paths:
            _set(doc, rng.choice(paths), rng.choice(HOSTILE))
        with open(merged, "w") as f:
            json.dump(doc, f, allow_nan=True)
        which = rng.choice(["info", "report", "diff"])
        argv = {"info": ["info", merged], "report": ["report", merged, "-o", os.path.join(out, "r.txt")],
                "diff": ["diff", merged, merged]}[which]
        return Case(kind, which, argv)
    if kind in ("journal", "cycles"):
        files = _rank_files(rng, tmp)
        victim = rng.randrange(len(files))
        doc = _doc(files[victim]) if files[victim].endswith(".gz") else json.load(open(files[victim]))
        block = doc.get("tracemerge") or {}
        rank = block.get("rank", victim)
        extra: List[str] = []
        if kind == "journal" or rng.random() < 0.3:
            meta = {k: block.get(k) for k in ("job_id", "rank", "world_size", "worker_name", "hostname", "boot_id",
                                              "pid", "profile_start_ns")}
            lines: List[Any] = [{"tracemerge_journal": 1, "meta": meta}]
            lines += [{"rpc": r} for r in block.get("rpcs", [])] + [{"collective": c} for c in block.get("collectives", [])]
            lines.append({"alive_ns": (block.get("profile_start_ns") or 0) + 10 ** 9})
            if kind == "journal":
                line = rng.choice(lines)
                paths = [p for p in _paths(line) if len(p) > 1] or [p for p in _paths(line) if p]
                _set(line, rng.choice(paths), rng.choice(HOSTILE))
            journal = os.path.join(tmp, f"rank{rank}.journal")
            with open(journal, "w") as f:
                f.write("".join(json.dumps(line, allow_nan=True) + "\n" for line in lines))
            extra.append(journal)
        if kind == "cycles":
            cycles = []
            for n in range(rng.choice([1, 2, 3])):
                block["cycle"] = n
                cycles.append(_write(os.path.join(tmp, f"rank{rank}.cycle{n}"), doc, rng))
            if rng.random() < 0.4:   # a cycle file copied under another cycle number
                shutil.copy(cycles[0], cycles[0].replace("cycle0", f"cycle{len(cycles)}"))
                cycles.append(cycles[0].replace("cycle0", f"cycle{len(cycles)}"))
            extra += cycles
        if kind == "journal" or rng.random() < 0.7:
            os.unlink(files[victim])
            files.pop(victim)
        command = rng.choice(["info", "report", "report-analysis", "combine-json", "combine-report", "offsets",
                              "export", "whatif"])
        argv = COMMANDS[command](files + extra, out)
        if rng.random() < 0.3:
            argv += ["--cycle", str(rng.choice([0, 1]))]
        return Case(kind, command, argv)
    files = _rank_files(rng, tmp)  # concurrent
    command = rng.choice(["combine-json", "combine-pftrace", "export"])
    return Case(kind, command, COMMANDS[command](files, out) + rng.choice([[], ["--force"]]), twin=True)


# the value space of each option checked at parse time, and whether a value must be refused (exit 2)
MAX_INFLATES = [("inf", 2), ("1e30", 2), ("9" * 40 + "G", 2), ("-1", 2), ("nan", 2), ("lots", 2), ("1125899906842625", 2),
                ("0", 0), ("1K", None), ("8G", 0), ("1024T", 0)]
PIPE_WAITS = [("inf", 2), ("1e300", 2), ("x", 2), ("-1", 2), ("nan", 2), ("86401", 2), ("", 0), ("0", 0), ("1e-300", 0),
              ("2", 0)]
COMM_KERNELS = [("a{4294967296}", 2), ("(" * 1000 + "x" + ")" * 1000, 2), ("(", 2), ("x" * 20_000, 2),
                ("a{99999999999999999999}", 2), ("[", 2), ("nccl|ring", 0), ("(a+)+$", 0)]
SPEEDUPS = [("aten::add=5e-324", 2), ("aten::add=1e-320", 2), ("aten::add=1e-15", 2), ("aten::add=1e-300", 2),
            ("aten::add=nan", 2), ("aten::add=-1", 2), ("aten::add=-inf", 2), ("=2", 2), ("aten::add", 2),
            ("aten::add=0.001", None), ("aten::add=1e308", None), ("aten::add=inf", None), ("aten::add=0", None),
            ("aten::add@99=2", 2)]
SPEEDUP_PAIRS = [(("aten::add=2", "aten::add@1=0"), 2), (("aten::add=2", "aten::add=3"), 2),
                 (("aten::add@0=2", "aten::add@0=4"), 2)]
SCHEDULERS = [("garbage", 2), ("tcp://", 2), ("tls://10.0.0.1:8786", 2), ("tcp://127.0.0.1:70000", 2),
              ("tcp://127.0.0.1:0", 2), ("udp://127.0.0.1:8786", 2), ("tcp://:8786", 2), ("", 2),
              ("tcp://127.0.0.1:1", 3), ("tcp://[::1]:1", 3)]


def _values_case(rng: random.Random, tmp: str, out: str) -> Case:
    """One option's value (or an environment variable's) from its space; a value that must be
    refused must be refused with exit 2 (3: a scheduler where nothing listens)."""
    files = _rank_files(rng, tmp)
    option = rng.choice(["--max-inflate", "TRACEMERGE_MAX_INFLATE", "TRACEMERGE_PIPE_WAIT", "--comm-kernel",
                         "--speedup", "--speedup-pair", "--scheduler"])
    env: Dict[str, str] = {}
    if option in ("--max-inflate", "TRACEMERGE_MAX_INFLATE", "TRACEMERGE_PIPE_WAIT"):
        value, want = rng.choice(PIPE_WAITS if option == "TRACEMERGE_PIPE_WAIT" else MAX_INFLATES)
        command = rng.choice(sorted(c for c in COMMANDS if c != "load"))
        argv = COMMANDS[command](files, out)
        if option == "--max-inflate":
            argv += ["--max-inflate", value]
        else:
            env[option] = value
    elif option == "--comm-kernel":
        (value, want), command = rng.choice(COMM_KERNELS), rng.choice(["report", "combine-report"])
        argv = COMMANDS[command](files, out) + ["--comm-kernel", value]
    elif option == "--speedup":
        (value, want), command = rng.choice(SPEEDUPS), "whatif"
        argv = ["whatif", *files, "--speedup", value, "--format", "json", "-o", os.path.join(out, "w.json")]
    elif option == "--speedup-pair":
        (pair, want), command = rng.choice(SPEEDUP_PAIRS), "whatif"
        argv = ["whatif", *files, "--speedup", pair[0], "--speedup", pair[1]]
    else:
        (value, want), command = rng.choice(SCHEDULERS), rng.choice(["combine-json", "export"])
        argv = COMMANDS[command](files, out) + ["--engine", "dask", "--scheduler", value]
    refused = want is not None and want != 0
    return Case("values", command, argv, env=env, ok_codes=(want,) if refused else (),
                nothing_written=refused)


def _argv(case: Case) -> List[str]:
    if case.argv[0] == "@load":
        return [sys.executable, "-c", LOAD, *case.argv[1:]]
    return [sys.executable, "-m", "tracemerge", *case.argv]


def _snapshot(paths: List[str]) -> Dict[str, Any]:
    out = {}
    for p in paths:
        st = os.lstat(p)
        out[p] = (stat.S_IFMT(st.st_mode), st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def _run_one(argv: List[str], env: Dict[str, str], cwd: str, case: Case) -> tuple:
    start = time.monotonic()
    p = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    err: List[bytes] = []
    reader = threading.Thread(target=lambda: err.append(p.stderr.read() if p.stderr else b""), daemon=True)
    reader.start()
    hung = signalled = False
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        elapsed = time.monotonic() - start
        if case.signal_after is not None and not signalled and elapsed >= case.signal_after:
            os.kill(p.pid, case.sig)
            signalled = True
        if case.signal_on is not None and not signalled and os.path.exists(os.path.join(cwd, case.signal_on)):
            os.kill(p.pid, case.sig)
            signalled = True
        if elapsed > RUN_LIMIT_S:
            hung = True
            os.killpg(p.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(p.pid, 0)
            break
        time.sleep(0.002 if case.signal_on else 0.01)
    p.returncode = os.waitstatus_to_exitcode(status)
    reader.join(10)
    return (p.returncode, time.monotonic() - start, usage.ru_maxrss * 1024, b"".join(err).decode(errors="replace"),
            hung)


_FRAME = re.compile(r'File "[^"]*tracemerge/[^"]*", line \d+, in (\S+)')


def _at_startup(err: str) -> bool:
    """A KeyboardInterrupt or SIGTERM traceback raised while Python starts or imports the
    package (site.py, click's imports): every tracemerge frame is a module being imported."""
    lines = err.strip().splitlines()
    return bool(lines) and lines[-1] in ("KeyboardInterrupt", "Terminated") and \
        all(name == "<module>" for name in _FRAME.findall(err))


def run_case(k: int, seed: int, keep: Optional[str], kinds: Optional[List[str]] = None) -> Result:
    tmp = tempfile.mkdtemp(prefix=f"tracemerge-sweep-{k}-")
    try:
        case = make_case(k, seed, tmp, kinds)
        size = 0
        for a in case.argv:
            if os.path.isfile(a):
                size += os.path.getsize(a)
        inputs = [a for a in case.argv if os.path.isfile(a) and a not in case.keep_intact]
        before = _snapshot(case.keep_intact + inputs)
        # the checkout's tracemerge, whatever the directory the run starts in
        path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
        env = {"TRACEMERGE_PIPE_WAIT": "2", "PYTHONPATH": path, **case.env}
        if case.twin:
            with ThreadPoolExecutor(2) as pool:
                runs = list(pool.map(lambda _: _run_one(_argv(case), env, tmp, case), range(2)))
        else:
            runs = [_run_one(_argv(case), env, tmp, case)]
        problems = []
        for rc, seconds, rss, err, hung in runs:
            if hung:
                problems.append(f"hang: past {RUN_LIMIT_S} s")
            if case.kind == "signal" and _at_startup(err):
                continue  # the interpreter interrupted while it starts: no tracemerge code ran yet
            if case.kind == "signal" and case.command == "load" and err.strip().endswith("KeyboardInterrupt"):
                continue  # the API raises KeyboardInterrupt to its caller, as Python does
            if rc == 1 or "Traceback" in err:
                at = err.find("Traceback")
                said = err[at:].strip().splitlines()[-8:] if at >= 0 else err.strip().splitlines()[-1:]
                problems.append("internal error: " + ("\n         ".join(said) or "(no message)")[:1500])
            if rc < 0 and -rc != case.sig:  # killed by a signal the sweep did not send: a crash
                problems.append(f"crash: killed by {signal.Signals(-rc).name}: {err.strip()[-300:]}")
            if rss > RSS_LIMIT and size < SMALL_INPUTS:
                problems.append(f"memory: {rss / 2**20:.0f} MiB peak RSS on {size / 2**20:.1f} MiB of input")
            if case.ok_codes and rc not in case.ok_codes:
                problems.append(f"exit {rc}, expected {case.ok_codes}: {err.strip()[-300:]}")
            if case.signal_on and os.path.exists(case.signal_on) and "no output was written" in err:
                problems.append(f"untrue: {case.signal_on} is in place, the message says {err.strip()[-200:]!r}")
        out = os.path.join(tmp, "out")
        left = [os.path.join(d, n) for d in (out, tmp) for n in (os.listdir(d) if os.path.isdir(d) else [])
                if n.startswith(".")]
        if left:  # no run here is killed outright: a temporary file or directory left is a leak
            problems.append(f"leftover: temporary files beside the output or the inputs: {left}")
        if case.nothing_written and os.path.isdir(out):
            written = [n for d, _, names in os.walk(out) for n in names]
            if written:
                problems.append(f"leftover: refused before the work, yet wrote {written}")
        try:
            after = _snapshot(case.keep_intact + inputs)
        except OSError as e:
            after = {"gone": str(e)}
        if after != before:
            changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
            problems.append(f"changed: an input or a kept target: {changed or case.keep_intact}")
        rc, seconds, rss, err, _ = max(runs, key=lambda r: r[2])
        if problems and keep:
            dest = os.path.join(keep, f"sweep-{seed}-{k}")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(tmp, dest, symlinks=True, ignore_dangling_symlinks=True,
                            ignore=lambda d, names: [n for n in names
                                                     if not stat.S_ISREG(os.lstat(os.path.join(d, n)).st_mode)
                                                     and not os.path.isdir(os.path.join(d, n))])
        return Result(k, case, rc, seconds, rss, size, err, problems)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SWEEP_SECONDS", 90)))
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--only", type=int, action="append", help="replay run K (repeatable)")
    ap.add_argument("--kind", action="append", choices=sorted(set(KINDS)),
                    help="draw only this kind of hostile input (repeatable; replay with the same --kind)")
    ap.add_argument("--keep", default=os.path.join(ROOT, "fuzz", "findings"),
                    help="where the inputs of each finding are kept")
    args = ap.parse_args()
    deadline = time.monotonic() + args.seconds
    results: List[Result] = []
    lock = threading.Lock()
    counter = iter(args.only) if args.only else iter(range(1 << 30))

    def worker() -> None:
        while time.monotonic() < deadline or args.only:
            with lock:
                k = next(counter, None)
            if k is None:
                return
            r = run_case(k, args.seed, args.keep, args.kind)
            with lock:
                results.append(r)
                mark = "FAIL" if r.problems else "ok"
                print(f"sweep: #{k} {r.case.kind:10s} {r.case.command:16s} exit {r.rc:3d} {r.seconds:5.1f} s "
                      f"{r.rss / 2**20:6.0f} MiB {mark}", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    found = [r for r in sorted(results, key=lambda r: r.k) if r.problems]
    kinds: Dict[str, int] = {}
    for r in results:
        kinds[r.case.kind] = kinds.get(r.case.kind, 0) + 1
    print(f"sweep: seed {args.seed}: {len(results)} runs ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); "
          f"{len(found)} with problems; peak RSS {max((r.rss for r in results), default=0) / 2**20:.0f} MiB")
    counted = {what: sum(any(p.startswith(prefix) for p in r.problems) for r in results)
               for what, prefix in (("exit 1", "internal error"), ("inputs changed", "changed"),
                                    ("leftovers", "leftover"), ("over 1 GB", "memory"), ("over 60 s", "hang"))}
    print("sweep: " + ", ".join(f"{what}: {n}" for what, n in counted.items()))
    for r in found:
        for problem in r.problems:
            argv = " ".join(r.case.argv).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            print(f"sweep: FOUND #{r.k} {r.case.kind} {r.case.command}: {problem}\n"
                  f"       argv: tracemerge {argv[:2000]}\n"
                  f"       replay: python fuzz/sweep.py --seed {args.seed} --only {r.k}"
                  + "".join(f" --kind {k}" for k in args.kind or ()))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
