"""``tracemerge align``: one trace per rank, every time on the reference clock.

Algorithm. The job's clock model (``Job.open(align=...)``: the one ``combine`` places the
ranks by) maps each rank's times to the reference clock. For one rank, its file is parsed
as the generic reader parses it (salvage included; Job.open validated every event), its
events' ns come from the reader's own conversion (:func:`tracemerge.inputs.chrome.event_times_ns`),
and :func:`tracemerge.place.placement.aligned_times` — the body of ``aligned_ns``, which
combine's transform places events with (``ClockModel.to_reference``; durations stretched
under drift) — gives each event's start and duration on the reference clock, relative to one base shared by
every output: the reference rank's ``baseTimeNanoseconds`` (tools that compare ranks take
``ts`` as written: HTA subtracts the smallest ``ts`` of all ranks). A ``ts`` or ``dur`` that
changed is written as µs with three decimals made from its integer ns, exact (a float µs
shift prints long reprs); one that did not is left as written. The block's ``*_ns``
fields move by the clock_rank rule (docs/rank-file-format.md: a field inside an object
with ``clock_rank: R`` is on R's clock, every other on the file's rank's), so the file
stays a rank file, now of a rank on the reference clock. Nothing else changes: the
top-level keys, ``distributedInfo``, pids, tids, names, args, ids, metadata events, the
order of events. The block records what was applied (``aligned``); a trace without one
gets a block of its rank and that record, spelled first so that HTA reads its rank. The
cycle files of one rank are one output (their events in cycle order after the first
cycle's top-level keys); a rank read from its journal alone has no events and no output.

Every output is written into a staging directory and moved into DIR only once all of them
are: an error leaves DIR as it was, and a run killed outright leaves at most the hidden
staging directory.
"""

import contextlib
import os
import shutil
import tempfile
from collections import deque
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import msgspec
import numpy as np

import tracemerge
from tracemerge.clocks.clock import ClockModel
from tracemerge.errors import OutputError, UsageError
from tracemerge.files import kineto_text, names
from tracemerge.files.codecs import codec_for
from tracemerge.files.output import atomic_output, check_kind, current_umask
from tracemerge.inputs.chrome import event_times_ns, parse_json, read_data, split_document
from tracemerge.inputs.journal import is_journal
from tracemerge.inputs.rankinfo import RankInfo, rank_of
from tracemerge.job.checks import rpc_sides
from tracemerge.model import NO_DUR, NO_TS
from tracemerge.place import ALIGN_NAME
from tracemerge.place import selection as select
from tracemerge.place.placement import aligned_times
from tracemerge.runtime.engine import gc_paused

if TYPE_CHECKING:
    from tracemerge.job import Alignment, Job

# the names an output may end in: JSON, compressed as the suffix says
SUFFIXES = (".json", ".json.gz", ".json.zst")


@dataclass(frozen=True)
class RankJob:
    """What one worker needs to write one rank's output."""

    rank: int
    paths: Tuple[str, ...]          # its files with events, in cycle order
    target: str                     # the staged output
    clocks: Dict[int, ClockModel]   # every rank's clock (the block's clock_rank objects), its own among them
    base_ns: int                    # the outputs' shared baseTimeNanoseconds
    record: Dict[str, Any]          # the block's "aligned"


def check_name(name: str) -> None:
    """Refuse an output name template that cannot name one file per rank (exit 2)."""
    if name.count("{rank}") != 1 or "/" in name or os.sep in name:
        raise UsageError(f"--name {name!r}: must hold {{rank}} once and no directory (e.g. {ALIGN_NAME})")
    try:
        name.format(rank=0)
    except (KeyError, IndexError, ValueError):
        raise UsageError(f"--name {name!r}: only {{rank}} may stand in braces") from None
    if not name.endswith(SUFFIXES):
        raise UsageError(f"--name {name!r}: must end in {', '.join(SUFFIXES)} (the suffix picks the compression)")


def output_paths(output: str, ranks: Sequence[int], name: str = ALIGN_NAME) -> Dict[int, str]:
    """{rank: output path} of the ranks written into the directory ``output``."""
    check_name(name)
    return {rank: os.path.join(output, name.format(rank=rank)) for rank in ranks}


def check_request(output: str, name: str, inputs: Sequence[str], force: bool) -> None:
    """What can be refused before any input is read: the name template, DIR."""
    check_name(name)
    check_outputs(output, [], inputs, force)


def check_outputs(output: str, targets: Sequence[str], inputs: Sequence[str], force: bool) -> None:
    """Refuse, before any input is read, outputs that cannot be written: DIR a file, its
    parent missing or read-only, an output that is an input (even with ``force``), one that
    exists without ``force``, one that is no regular file."""
    if os.path.lexists(output) and not os.path.isdir(output):
        raise OutputError(f"{output}: exists and is not a directory")
    where = output if os.path.isdir(output) else os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(where):
        raise OutputError(f"{output}: the directory {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise OutputError(f"{output}: the directory {where} is not writable")
    real_inputs = {os.path.realpath(p): p for p in inputs}
    for target in targets:
        codec_for(target)  # a .zst name without zstandard fails here
        if os.path.realpath(target) in real_inputs:
            raise OutputError(f"{target}: the output is also an input ({real_inputs[os.path.realpath(target)]}); "
                              "choose another -o or --name")
        check_kind(target, force)
        if os.path.isdir(target):
            raise OutputError(f"{target}: is a directory")
        if os.path.lexists(target) and not force:
            raise OutputError(f"{target}: exists; pass --force to replace it")


def align(job: "Job", output: "str | os.PathLike[str]", alignment: Optional["Alignment"] = None, force: bool = False,
          name: str = ALIGN_NAME, ranks: Optional[frozenset] = None) -> Dict[str, Any]:
    """Write each rank of ``job`` (``ranks``: only these) as its own trace on the reference
    clock into the directory ``output``, named by ``name`` (``{rank}`` replaced); returns
    the summary: the outputs, the ranks left without one, the events, the alignment."""
    output = os.fspath(output)
    alignment = job.clock_model(alignment)
    selection = select.Selection(ranks=ranks)
    select.check_ranks(selection, job.ranks)
    kept = [i for i in job.infos if selection.keeps_rank(rank_of(i))]
    written = [i for i in kept if _event_files(i)]
    paths = output_paths(output, [rank_of(i) for i in written], name)
    check_outputs(output, list(paths.values()), job.inputs, force)
    reference = job.info(alignment.reference) if alignment.reference in job.ranks else None
    base = (reference.base_ns if reference is not None else None) or 0
    staging = _staging(output)
    try:
        jobs = [RankJob(rank_of(i), tuple(p.path for p in _event_files(i)),
                        os.path.join(staging, os.path.basename(paths[rank_of(i)])), _clocks_for(i, alignment.clocks),
                        base, _record(alignment, i)) for i in written]
        runner = job.engine
        counts = runner.map(write_rank, jobs) if runner is not None else [write_rank(j) for j in jobs]
        _commit(staging, output, {j.target: paths[j.rank] for j in jobs}, force)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _summary(job, alignment, output, jobs, counts, paths, kept, written, base)


def _summary(job: "Job", alignment: "Alignment", output: str, jobs: List[RankJob], counts: List[Dict[str, int]],
             paths: Dict[int, str], kept: List[RankInfo], written: List[RankInfo], base: int) -> Dict[str, Any]:
    """align's summary: the outputs (each rank's, from its files, with its counts), the ranks
    left as journals only, the events, the alignment."""
    return {
        "version": tracemerge.__version__,
        "output": output,
        "outputs": [{"rank": j.rank, "path": paths[j.rank], "from": list(j.paths), **c} for j, c in zip(jobs, counts)],
        "journal_only": [rank_of(i) for i in kept if not _event_files(i)],
        "events": {"in": sum(c["events"] for c in counts), "out": sum(c["events"] for c in counts),
                   "moved": sum(c["moved"] for c in counts)},
        "base_time_ns": base,
        "reference": alignment.reference,
        "align": alignment.method,
        "alignment": [alignment.clocks[rank_of(i)].as_dict() for i in written],
        "rpc_sides": rpc_sides(job.links.rpcs),
        "others_in_output": _others(output, set(paths.values())),
    }


def _event_files(info: RankInfo) -> List[RankInfo]:
    """The files of a rank that hold events: not its journal (a rank that died unwritten)."""
    return [p for p in info.files if not is_journal(p)]


def _clocks_for(info: RankInfo, clocks: Dict[int, ClockModel]) -> Dict[int, ClockModel]:
    """The clocks a rank's block can name (``clock_rank``: the peers of its RPC records and
    of the callees it asked), its own among them: what its worker needs, not every rank's."""
    named = {rank_of(info)} | {r.get(k) for r in info.rpcs for k in ("caller", "callee")} | \
        {r.get("callee") for r in info.native_callees}
    return {r: clocks[r] for r in named if r in clocks}


def _record(alignment: "Alignment", info: RankInfo) -> Dict[str, Any]:
    """The block's ``aligned``: what was applied, by whom, from which files. Its times are
    ns, named without ``_ns`` (an offset and a bound are no points on a clock)."""
    clock = alignment.clocks[rank_of(info)]
    return {"tool": f"tracemerge {tracemerge.__version__} align", "asked": alignment.method,
            "method": clock.method, "reference": alignment.reference, "offset": clock.offset_ns,
            "drift_ppm": clock.drift_ppm, "anchor": clock.anchor_ns, "error_bound": clock.error_bound_ns,
            "samples": clock.samples, "peers": list(clock.peers), "unit": "ns",
            # a name's bytes that are not UTF-8 written \xNN: the block is JSON
            "from": [names.shown(os.path.basename(p.path)) for p in _event_files(info)]}


@gc_paused()  # a rank's document is a tree of fresh dicts: the collector would only rescan it
def write_rank(task: RankJob) -> Dict[str, int]:
    """Write one rank's output (in an engine's worker); returns its counts."""
    heads, events, moved = [], [], 0
    for path in task.paths:
        data, cut = read_data(path)
        doc, _ = parse_json(path, data, cut)  # a cut file: its complete events (the job warned of it)
        del data
        these, meta, block = split_document(path, doc)
        moved += _place(these, *event_times_ns(path, these, meta.get("baseTimeNanoseconds")),
                        task.clocks[task.rank], task.base_ns)
        heads.append((list(doc) if isinstance(doc, dict) else ["traceEvents"], meta, block))
        events += these
    order, meta, block = heads[0]
    if len(heads) > 1:
        block = _joined_blocks([b for _, _, b in heads])
    block = _on_reference(block, task.clocks[task.rank], task.clocks) if block is not None else \
        {"version": 1, "rank": task.rank}
    if task.base_ns and "baseTimeNanoseconds" not in order:  # ts is after the shared base now
        order.insert(order.index("traceEvents"), "baseTimeNanoseconds")
    out: Dict[str, Any] = {"tracemerge": {**block, "aligned": task.record}}
    for key in order:
        if key != "tracemerge":
            out[key] = events if key == "traceEvents" else task.base_ns if key == "baseTimeNanoseconds" else meta[key]
    with atomic_output(task.target) as f:
        f.writelines(kineto_text.document(out))
    return {"events": len(events), "moved": moved}


def _place(events: list, ts: np.ndarray, dur: np.ndarray, clock: ClockModel, base_ns: int) -> int:
    """Write the reference-clock ``ts``/``dur`` of ``events`` (``ts``, ``dur``: their ns on
    the file's clock) into them where they changed; returns how many events moved."""
    start, out_dur = aligned_times(ts, dur, clock, base_ns)
    timed = ts != NO_TS
    moved = np.flatnonzero(timed & (start != np.where(timed, ts - base_ns, 0)))
    _set_us(events, "ts", moved, start[moved])
    stretched = np.flatnonzero(timed & (dur != NO_DUR) & (out_dur != dur))
    _set_us(events, "dur", stretched, out_dur[stretched])
    return len(moved)


def _set_us(events: list, key: str, at: np.ndarray, ns: np.ndarray) -> None:
    """``events[i][key]`` for each i of ``at``: µs with three decimals, exact, as Kineto writes
    them, from the integer ns (written verbatim: msgspec.Raw)."""
    whole, part = np.divmod(np.abs(ns), 1000)
    sign = np.where(ns < 0, "-", "")
    texts = map("{}{}.{:03d}".format, sign.tolist(), whole.tolist(), part.tolist())
    deque(map(dict.__setitem__, map(events.__getitem__, at.tolist()), repeat(key),
              map(msgspec.Raw, map(str.encode, texts))), maxlen=0)  # consumed in C


def _on_reference(value: Any, clock: ClockModel, clocks: Dict[int, ClockModel]) -> Any:
    """``value`` (the block, or a part of it) with each ``*_ns`` integer on the reference
    clock: by ``clock``, or inside an object with ``clock_rank: R`` by R's."""
    if isinstance(value, dict):
        owner = value.get("clock_rank")
        if isinstance(owner, int) and not isinstance(owner, bool):
            clock = clocks.get(owner, clock if owner == clock.rank else _UNKNOWN)
        return {k: (int(clock.to_reference(v)) if k.endswith("_ns") and isinstance(v, int) and not isinstance(v, bool)
                    else _on_reference(v, clock, clocks)) for k, v in value.items()}
    if isinstance(value, list):
        return [_on_reference(v, clock, clocks) for v in value]
    return value


# the clock of a clock_rank no input has: its times are left as they are
_UNKNOWN = ClockModel(rank=-1, method="unknown")

# the block's lists, each cycle's records: one list of the rank's
_RECORD_LISTS = ("rpcs", "collectives", "p2p", "remote_sides", "served_ops", "native_callees")


def _joined_blocks(blocks: List[Optional[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """One block of a rank's cycle files: the first's fields, the last's stop, every cycle's
    records; ``cycle`` None (the file holds them all), ``cycles`` the ones it holds."""
    present = [b for b in blocks if b is not None]
    if not present:
        return None
    out = dict(present[0])
    for key in _RECORD_LISTS:
        if any(key in b for b in present):
            out[key] = [r for b in present for r in (b.get(key) or [])]
    if "profile_stop_ns" in present[-1]:
        out["profile_stop_ns"] = present[-1]["profile_stop_ns"]
    out["cycles"] = [b.get("cycle") for b in present]
    out["cycle"] = None
    return out


def _staging(output: str) -> str:
    """A hidden directory on the output's filesystem that the outputs are written into."""
    where = output if os.path.isdir(output) else os.path.dirname(os.path.abspath(output))
    try:
        return tempfile.mkdtemp(prefix=".tracemerge-align-", dir=where)
    except OSError as e:
        raise OutputError(f"{output}: cannot write: {e.strerror or e}") from None


def _commit(staging: str, output: str, targets: Dict[str, str], force: bool) -> None:
    """Move every staged output to its name: a new DIR is the staging directory renamed;
    into an existing one, each file linked (without ``force``: refused if one appeared
    meanwhile, the ones moved already taken back) or renamed over what is there."""
    if not os.path.lexists(output):
        with contextlib.suppress(OSError):  # made meanwhile: the files one by one below
            os.chmod(staging, 0o777 & ~current_umask())  # a directory as mkdir makes it, not mkdtemp's 0700
            os.rename(staging, output)
            return
    done: List[str] = []
    try:
        for staged, target in targets.items():
            if force:
                os.replace(staged, target)
            else:
                try:
                    os.link(staged, target)
                except FileExistsError:
                    raise OutputError(f"{target}: exists; pass --force to replace it") from None
            done.append(target)
    except BaseException:
        if not force:
            for target in done:
                with contextlib.suppress(OSError):
                    os.unlink(target)
        raise


def _others(output: str, ours: set) -> List[str]:
    """The other trace files in DIR (HTA's trace_dir reads every .json and .gz file there)."""
    try:
        names = sorted(os.listdir(output))
    except OSError:
        return []
    return [n for n in names if n.endswith((".json", ".gz")) and os.path.join(output, n) not in ours]
