"""PyTorch Flight Recorder dumps read as a rank: its collective entries, on its own clock.

A dump (``torch._C._distributed_c10d._dump_fr_trace()`` pickle bytes, the NCCL watchdog's
``TORCH_FR_DUMP_TEMP_FILE``/``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank files, or
``_dump_fr_trace_json()``) is a dict of plain data: ``version``, ``pg_config`` ({key:
{name, desc, ranks}}), ``pg_status`` ({pg_id: {last_enqueued_collective,
last_started_collective, last_completed_collective}}), ``entries`` (one per collective or
point-to-point op of the ring: ``record_id``, ``pg_id``, ``process_group`` (name, desc),
``collective_seq_id``, ``p2p_seq_id``, ``is_p2p``, ``profiling_name`` (``nccl:all_reduce``,
``nccl:send 0->1``), sizes, dtypes, ``state``, ``time_created_ns``,
``time_discovered_started_ns``/``_completed_ns``, ``retired``, ``frames``).

Told by content (any file name): a pickle whose first bytes name a dump's keys, or a JSON
object that does. A pickle is loaded by an unpickler that refuses every global (only the
builtin containers and scalars a dump holds can be built): a pickle that names a class or
a function is refused in one line, never run.

The algorithm:

1. Rank: a rank in the file name (``rank3``; the watchdog's prefix + rank, its trailing
   digits), else the rank the Flight Recorder header names where it has one, else none (the
   job's ranking says what would tell it).
2. Groups: each entry's group is its ``process_group`` name; its ranks come from
   ``pg_config`` by that name. gloo keys the default group's config ``''`` while its entries
   say ``('0', 'default_pg')``: a name missing from ``pg_config`` whose desc is
   ``default_pg`` takes the ``''`` config (else the largest group's).
3. Records: a collective entry is a collective record of the rank-file shape (``group``,
   ``seq`` = ``collective_seq_id`` — the number the capture's records carry —, ``op``,
   ``group_ranks``, ``start_ns`` = created, ``end_ns`` = discovered completed where known),
   plus what the Flight Recorder says: sizes, dtypes, its state, ``completed`` (retired,
   completed, or at or below its group's last completed), ``frames``. A point-to-point
   entry is a record of the pair's own group (``<group>:p2p:<a>-<b>``), numbered by its
   place among the pair's entries on this rank (the k-th send of a to b is b's k-th
   receive from a).
4. Time: the entries' times are the rank's wall clock (system_clock ns). A dump names no
   time of its own: the file's modification time is taken as the dump's when it is no
   earlier than the last entry and within the entries' longest timeout (plus a minute)
   after it — the watchdog dumps at its timeout —, else the last entry's time, said so.
5. Events, for ``combine``: one per entry on a ``Flight Recorder`` process, a thread per
   group: a slice from created to completed where both are known, an instant at its
   creation otherwise.
"""

import io
import math
import os
import pickle
import re
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import orjson

from tracemerge.errors import TraceError
from tracemerge.inputs import chrome
from tracemerge.inputs.base import InputFormat

# a group's ranks ('[0, 1]' as the dumps spell them, or a list) are read as Kineto's Process Group Ranks are
from tracemerge.inputs.kineto_collectives import DTYPE_BYTES, _ranks
from tracemerge.inputs.rankinfo import RankInfo, describe, rank_from_name
from tracemerge.model import RankTrace

PICKLE_PROTOCOLS = b"\x02\x03\x04\x05"
# keys only a Flight Recorder dump holds (the first bytes hold one: a dump starts with them)
DUMP_KEYS = (b"pg_config", b"pg_status", b"collective_seq_id", b"profiling_name")
# a dump's top-level keys, one of which comes first (torch's JSON is sorted: "comm_lib_version")
DUMP_TOP_KEYS = (b"version", b"pg_config", b"pg_status", b"entries", b"comm_lib_version", b"nccl_comm_state")
_FIRST_KEY = re.compile(rb'\{\s*"([a-z_]+)"\s*:')
PROCESS = "Flight Recorder"
CATEGORY = "flight_recorder"
SOURCE = "flight_recorder"
DEFAULT_DESC = "default_pg"
_TRAILING_RANK = re.compile(r"(\d+)$")
_COMPRESSED = (".gz", ".zst", ".pkl", ".pickle", ".json")
# how far past the last entry a dump may be written and its file's time still be the dump's
DUMP_SLACK_NS = 60 * 1_000_000_000


def sniff(first: bytes) -> bool:
    if first[:1] == b"\x80" and first[1:2] and first[1:2] in PICKLE_PROTOCOLS:
        return any(k in first for k in DUMP_KEYS)
    head = first.lstrip()
    # the object's first key decides: a Kineto trace holds "pg_config" too (distributedInfo's),
    # and on a large job its group's ranks push "traceEvents" past the bytes sniffed
    opening = _FIRST_KEY.match(head)
    return opening is not None and opening.group(1) in DUMP_TOP_KEYS and b'"traceEvents"' not in head and \
        any(b'"' + k + b'"' in head for k in DUMP_KEYS)


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle's own opcodes make (dict, list, tuple, set, str, bytes, int,
    float, bool, None): every global (a class, a function, a reduce's callable) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent id")


def load(path: str) -> Tuple[Dict[str, Any], str]:
    """(the dump's dict, "pickle" | "json") of the file ``path``."""
    data, cut = chrome.read_file_bytes(path)
    if cut:
        raise TraceError(path, f"Flight Recorder dump: the {cut} stream is cut")
    if data[:1] == b"\x80":
        try:
            dump = _PlainUnpickler(io.BytesIO(data)).load()
        except pickle.UnpicklingError as e:
            raise TraceError(path, f"Flight Recorder pickle refused: {e} (a dump holds plain data only; "
                                   "nothing of it was run)") from None
        except Exception as e:  # a cut or corrupt pickle: any of pickle's many errors
            raise TraceError(path, f"not a readable Flight Recorder pickle ({type(e).__name__}: {e})") from None
        form = "pickle"
    else:
        try:
            dump = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise TraceError(path, f"Flight Recorder JSON dump is not JSON: {e}") from None
        form = "json"
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise TraceError(path, "not a Flight Recorder dump (no list of 'entries')")
    return dump, form


def _int(value: Any) -> Optional[int]:
    """An integer field, as the pickle (int) or the JSON dump (int or its decimal string) holds it."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value):
        return int(value)
    return None


def groups_of(dump: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """{config key: {"name", "desc", "ranks"}} of ``pg_config``."""
    config = dump.get("pg_config") or {}
    out = {}
    if isinstance(config, dict):
        for key, value in config.items():
            if isinstance(value, dict):
                out[str(key)] = {"name": str(value.get("name", key)), "desc": str(value.get("desc", "")),
                                 "ranks": _ranks(value.get("ranks"))}
    return out


def group_ranks(groups: Dict[str, Dict[str, Any]], name: str, desc: str) -> List[int]:
    """The ranks of group ``name`` (step 2 of the module's doc)."""
    if name in groups:
        return groups[name]["ranks"]
    if desc == DEFAULT_DESC and "" in groups:
        return groups[""]["ranks"]
    if groups:
        return max(groups.values(), key=lambda g: len(g["ranks"]))["ranks"]
    return []


def status_of(dump: Dict[str, Any]) -> Dict[str, Dict[str, Optional[int]]]:
    """{pg_id: {"last_enqueued", "last_started", "last_completed"}} of ``pg_status`` (-1: none)."""
    found = dump.get("pg_status") or {}
    out = {}
    if isinstance(found, dict):
        for pg, value in found.items():
            if isinstance(value, dict):
                out[str(pg)] = {k: _int(value.get(f"{k}_collective"))
                                for k in ("last_enqueued", "last_started", "last_completed")}
    return out


def _numel(sizes: Any) -> int:
    if isinstance(sizes, list) and sizes and isinstance(sizes[0], list):
        return sum(math.prod(s) for s in sizes if isinstance(s, list) and all(isinstance(d, int) for d in s))
    return 0


def _op(profiling_name: str) -> Tuple[str, str]:
    """(op, peer part) of ``nccl:send 0->1``: ("send", "0->1")."""
    name = profiling_name.split(":", 1)[-1]
    op, _, peers = name.partition(" ")
    return op, peers


def _peers(op: str, peers: str, ranks: List[int]) -> Optional[Tuple[int, int]]:
    """(src, dst) global ranks of a point-to-point entry (its names are group ranks)."""
    sep = "->" if op == "send" else "<-"
    parts = peers.split(sep)
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        return None
    a, b = int(parts[0]), int(parts[1])
    src, dst = (a, b) if op == "send" else (b, a)
    ordered = sorted(ranks)
    if ordered and max(src, dst) < len(ordered):
        return ordered[src], ordered[dst]
    return src, dst


ENTRY_FIELDS = ("collective_seq_id", "time_created_ns")


def records_of(path: str, dump: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The dump's entries as collective records (step 3 of the module's doc), in record order."""
    groups = groups_of(dump)
    status = status_of(dump)
    out: List[Dict[str, Any]] = []
    pairs: Dict[str, int] = {}
    for n, entry in enumerate(dump.get("entries") or []):
        if not isinstance(entry, dict):
            raise TraceError(path, f"Flight Recorder entries[{n}] is a {type(entry).__name__}, not an object")
        for key in ENTRY_FIELDS:
            if _int(entry.get(key)) is None:
                raise TraceError(path, f"Flight Recorder entries[{n}]: missing or bad '{key}' ({entry.get(key)!r})")
        rec, peers = _record(entry, groups, status)
        if entry.get("is_p2p") or rec["op"] in ("send", "recv"):
            pair = _peers(rec["op"], peers, rec["group_ranks"])
            if pair is None:
                continue
            key = f"{rec['group']}:p2p:{min(pair)}-{max(pair)}"
            pairs[key] = pairs.get(key, 0) + 1
            rec.update(group=key, group_ranks=sorted(set(pair)), seq=pairs[key], p2p_seq_id=_int(entry.get("p2p_seq_id")),
                       src=pair[0], dst=pair[1])
        out.append(rec)
    return out


def _record(entry: Dict[str, Any], groups: Dict[str, Dict[str, Any]],
            status: Dict[str, Dict[str, Optional[int]]]) -> Tuple[Dict[str, Any], str]:
    """(the collective record of one checked entry, its profiling name's peers part)."""
    pg = entry.get("process_group")
    name, desc = (str(pg[0]), str(pg[1])) if isinstance(pg, (list, tuple)) and len(pg) == 2 else \
        (str(entry.get("pg_id", "")), "")
    profiling = str(entry.get("profiling_name") or "")
    op, peers = _op(profiling)
    completed_at = _int(entry.get("time_discovered_completed_ns")) or None
    started_at = _int(entry.get("time_discovered_started_ns")) or None
    seq = _int(entry["collective_seq_id"])
    state = str(entry.get("state") or "")
    rec: Dict[str, Any] = {
        "op": op, "group": name, "group_ranks": group_ranks(groups, name, desc), "seq": seq,
        "start_ns": _int(entry["time_created_ns"]), "source": SOURCE, "profiling_name": profiling,
        "group_desc": desc, "state": state,
        "completed": _completed(entry, state, completed_at, seq, status.get(str(entry.get("pg_id")), {})),
        "record_id": _int(entry.get("record_id")), "pg_id": _int(entry.get("pg_id")), **_payload(entry),
        "frames": _frames(entry.get("frames")), "thread": str(entry.get("thread_name") or ""),
        "timeout_ms": _int(entry.get("timeout_ms")),
    }
    rec["bytes"] = _input_bytes(rec)
    if started_at is not None:
        rec["started_ns"] = started_at
    if completed_at is not None:
        rec["end_ns"] = completed_at
    return rec, peers


def _completed(entry: Dict[str, Any], state: str, completed_at: Optional[int], seq: Optional[int],
               group_status: Dict[str, Optional[int]]) -> bool:
    """Whether the entry's collective completed: retired, so stated, seen completed, or at
    or below its group's last completed sequence number (a collective, not a p2p op)."""
    last = group_status.get("last_completed")
    return (bool(entry.get("retired")) or state == "completed" or completed_at is not None
            or (last is not None and seq is not None and not entry.get("is_p2p") and 0 < seq <= last))


def _payload(entry: Dict[str, Any]) -> Dict[str, Any]:
    """The entry's input and output sizes and dtypes."""
    return {"input_sizes": entry.get("input_sizes") or [], "output_sizes": entry.get("output_sizes") or [],
            "input_dtypes": [str(d) for d in entry.get("input_dtypes") or []],
            "output_dtypes": [str(d) for d in entry.get("output_dtypes") or []]}


def _input_bytes(rec: Dict[str, Any]) -> int:
    """The bytes a record's inputs hold, by the first input's dtype (0 for one not known)."""
    dtype = rec["input_dtypes"][0].lower() if rec["input_dtypes"] else ""
    return _numel(rec["input_sizes"]) * DTYPE_BYTES.get(dtype, 0)


def _frames(value: Any) -> List[Dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [{"name": str(f.get("name", "")), "filename": str(f.get("filename", "")), "line": _int(f.get("line")) or 0}
            for f in value if isinstance(f, dict)]


def rank_of_dump(path: str, dump: Dict[str, Any]) -> Tuple[Optional[int], str]:
    """(rank, where from) of a dump (step 1 of the module's doc)."""
    rank = rank_from_name(path)
    if rank is not None:
        return rank, "filename"
    stem = os.path.basename(path)
    while stem.endswith(_COMPRESSED):
        stem = stem[:stem.rfind(".")]
    found = _TRAILING_RANK.search(stem)
    if found:
        return int(found.group(1)), "filename (Flight Recorder prefix + rank)"
    rank = _int(dump.get("rank"))
    if rank is not None and rank >= 0:
        return rank, "Flight Recorder header"
    return None, "unknown"


def dump_time(path: str, recs: List[Dict[str, Any]]) -> Tuple[Optional[int], str]:
    """(when the dump was written, how that is known) (step 4 of the module's doc)."""
    times = [t for r in recs for t in (r["start_ns"], r.get("end_ns")) if isinstance(t, int)]
    if not times:
        return None, "no entries"
    last = max(times)
    try:
        written = os.stat(path).st_mtime_ns
    except OSError:
        written = None
    timeout = max([(r.get("timeout_ms") or 0) * 1_000_000 for r in recs] + [0])
    if written is not None and last <= written <= last + timeout + DUMP_SLACK_NS:
        return written, "the dump file's modification time"
    return last, "its last entry (the file's time is not the dump's)"


def block_of(path: str, dump: Dict[str, Any], form: str) -> Dict[str, Any]:
    """The rank-file block of a dump: its records, window and what the dump says of its rank."""
    recs = records_of(path, dump)
    written, how = dump_time(path, recs)
    start = min((r["start_ns"] for r in recs), default=written)
    block: Dict[str, Any] = {"version": 1, "rpcs": [], "collectives": recs, "remote_sides": [],
                             "worker_name": f"{PROCESS} dump", "flight_recorder": {
                                 "format": form, "version": str(dump.get("version", "")),
                                 "entries": len(dump.get("entries") or []), "groups": groups_of(dump),
                                 "pg_status": status_of(dump), "dump_ns": written, "dump_time_from": how}}
    if start is not None and written is not None:
        block.update(profile_start_ns=start, profile_stop_ns=max(start, written))
    return block


def events_of(recs: List[Dict[str, Any]], base: int) -> List[Dict[str, Any]]:
    """The entries as events (step 5 of the module's doc), µs from ``base``."""
    out: List[Dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": PROCESS, "tid": 0,
                                  "args": {"name": PROCESS}}]
    threads: Dict[str, int] = {}
    for r in recs:
        thread = f"group {r['group']}" + (f" ({r['group_desc']})" if r.get("group_desc") else "")
        if thread not in threads:
            threads[thread] = len(threads) + 1
            out.append({"ph": "M", "name": "thread_name", "pid": PROCESS, "tid": threads[thread],
                        "args": {"name": thread}})
        args = {"seq": r["seq"], "state": r["state"], "completed": r["completed"],
                "input_sizes": r["input_sizes"], "input_dtypes": r["input_dtypes"],
                "output_sizes": r["output_sizes"], "record_id": r["record_id"]}
        if r["frames"]:
            args["where"] = frame_text(r["frames"])
        event = {"name": r["profiling_name"] or r["op"], "cat": CATEGORY, "pid": PROCESS, "tid": threads[thread],
                 "ts": (r["start_ns"] - base) / 1000, "args": args}
        if isinstance(r.get("end_ns"), int) and r["end_ns"] >= r["start_ns"]:
            event.update(ph="X", dur=(r["end_ns"] - r["start_ns"]) / 1000)
        else:
            event.update(ph="i", s="t")
        out.append(event)
    return out


# frames of torch's own code, the capture's wrappers and the launcher: the user's frame is the first that is none of these
_LIBRARY = ("/torch/", "/tracemerge/capture/", "/multiprocessing/", "<string>", "/threading.py", "/runpy.py")


def frame_text(frames: List[Dict[str, Any]]) -> str:
    """Where an entry was issued: the first frame outside torch and the launcher (file:line
    function), else the first frame."""
    user = next((f for f in frames if not any(s in f["filename"] for s in _LIBRARY)), frames[0] if frames else None)
    if user is None:
        return ""
    return f"{os.path.basename(user['filename'])}:{user['line']} {user['name']}"


def read(path: str) -> RankTrace:
    dump, form = load(path)
    block = block_of(path, dump, form)
    rank, source = rank_of_dump(path, dump)
    if rank is not None:
        block.update(rank=rank, rank_source=source)
    recs = block["collectives"]
    base = min((r["start_ns"] for r in recs), default=0)
    base -= base % 1_000_000_000
    trace = chrome.build(path, events_of(recs, base), {"baseTimeNanoseconds": base}, block)
    fr = block["flight_recorder"]
    return replace(trace, warnings=[f"read from a Flight Recorder dump ({form}, version {fr['version']}): "
                                    f"{fr['entries']} entries; the dump's time from {fr['dump_time_from']}"])


def describe_dump(path: str) -> RankInfo:
    return describe(read(path))


def is_dump(info: RankInfo) -> bool:
    return "flight_recorder" in info.ending


# what a dump's record adds to the rank file's record of the same collective
FR_FIELDS = ("source", "profiling_name", "group_desc", "state", "completed", "record_id", "pg_id", "input_sizes",
             "output_sizes", "input_dtypes", "output_dtypes", "frames", "thread", "timeout_ms", "started_ns")


def join_dumps(infos: List[RankInfo]) -> List[RankInfo]:
    """``infos`` with each dump whose rank has another file (its rank file, journal or cycle
    files, or another dump) made one more part of that rank: one process, one clock. The rank's records of a
    collective the dump holds too gain the dump's fields (sizes, dtypes, state, frames); the
    dump's other records are added; how the process ended is what its other files say, plus
    the dump's group status (``ending["flight_recorder"]``)."""
    others: Dict[int, RankInfo] = {}
    for info in infos:
        if info.rank is not None and not is_dump(info) and info.rank not in others:
            others[info.rank] = info
    for info in infos:  # a rank of dumps alone (pickle and JSON of one moment): its first is the main one
        if info.rank is not None and is_dump(info):
            others.setdefault(info.rank, info)
    joined: Dict[int, RankInfo] = {}
    for info in infos:
        if not is_dump(info) or info.rank not in others or others[info.rank] is info:
            continue
        main = joined.get(info.rank, others[info.rank])
        joined[info.rank] = _with_dump(main, info)
    out, done = [], set()
    for info in infos:
        if info.rank in joined:
            if info.rank not in done:
                done.add(info.rank)
                out.append(joined[info.rank])
        else:
            out.append(info)
    return out


def _with_dump(main: RankInfo, dump: RankInfo) -> RankInfo:
    from tracemerge.inputs.cycles import refresh

    own = {(str(c["group"]), c["seq"]): c for c in main.collectives}
    info = replace(main, parts=list(main.files) + [dump], cycle=None)
    refresh(info)
    added = []
    for rec in dump.collectives:
        key = (str(rec["group"]), rec["seq"])
        if key in own:
            # what the record lacks or holds empty (a JSON dump's frames) the dump gives
            own[key].update({k: rec[k] for k in FR_FIELDS if k in rec and not own[key].get(k)})
        else:
            added.append(rec)
    info.collectives = list(main.collectives) + added
    info.warnings = list(main.warnings) + [f"{os.path.basename(dump.path)}: {w}" for w in dump.warnings]
    info.ending = {**dump.ending, **main.ending}
    info.has_block = main.has_block
    return info


FORMAT = InputFormat("flight_recorder", read, describe_dump, sniff=sniff)
