"""A rank's journal (``rank{R}.journal``, tracemerge.capture.journal) read as a rank with
records and no events: what a rank that died without writing its rank file leaves.

JSON lines (docs/rank-file-format.md, "The journal"): the first line ``{"tracemerge_journal":
1, "meta": {...}}``, then ``{"rpc": record}``, ``{"collective": record}`` (a record written
again when it ends: the last line of a record wins), ``{"alive_ns": t}`` at every flush,
``{"closed_ns": t}`` when its block ended. A journal cut in a line is read up to its last
whole line. Its block is a rank file's ``"tracemerge"`` block, its window from the meta's
``profile_start_ns`` to the last line's time, plus ``"journal"``: ``{"alive_ns", "closed",
"cut"}`` (RankInfo.ending).

:func:`prefer_rank_files`: given with its rank's rank file, a journal adds nothing (the
file holds every record the journal does); given with the rank's schedule cycle files, it
adds the records none of them holds (those after the last cycle), as one more part.
"""

from dataclasses import replace
from typing import Any, Dict, List, Optional

import orjson

from tracemerge.errors import TraceError
from tracemerge.inputs import chrome
from tracemerge.inputs.base import InputFormat
from tracemerge.inputs.rankinfo import RankInfo, check_record, describe
from tracemerge.model import RankTrace

MAGIC = b'{"tracemerge_journal"'


def sniff(first: bytes) -> bool:
    return first.startswith(MAGIC)


def block_of(path: str, data: bytes) -> Dict[str, Any]:
    """The rank-file block a journal's lines make."""
    lines = data.split(b"\n")
    cut = bool(lines[-1].strip())  # a last line without its newline: cut while written
    meta: Dict[str, Any] = {}
    rpcs: Dict[tuple, dict] = {}
    collectives: Dict[tuple, dict] = {}
    alive = closed = None
    for n, line in enumerate(lines[:-1] if cut else lines):
        if not line.strip():
            continue
        item = _item(path, n, line)
        if isinstance(item.get("meta"), dict):
            meta = item["meta"]
        _take_records(path, n, item, rpcs, collectives)
        for key in ("alive_ns", "closed_ns"):
            if isinstance(item.get(key), int):
                alive = item[key] if alive is None else max(alive, item[key])
        if isinstance(item.get("closed_ns"), int):
            closed = item["closed_ns"]
    start = meta.get("profile_start_ns")
    block = {k: v for k, v in meta.items() if not k.endswith("_ns")}
    if not isinstance(block.get("rank"), int):
        # its rank never learned (it died before RPC or torch.distributed told it): its calls name it
        rank = rank_of_records(list(rpcs.values()))
        if rank is not None:
            block.update(rank=rank, rank_source="its calls (the rank they name it by)")
    block.update(version=1, rpcs=list(rpcs.values()), collectives=list(collectives.values()), remote_sides=[],
                 journal={"alive_ns": alive, "closed": closed is not None, "cut": cut})
    if isinstance(start, int) and isinstance(alive, int):
        block.update(profile_start_ns=start, profile_stop_ns=max(start, alive))
    return block


def _item(path: str, n: int, line: bytes) -> Dict[str, Any]:
    """Journal line ``n`` (from 0) as its object; the first names the journal."""
    try:
        item = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise TraceError(path, f"journal line {n + 1} is not JSON") from None
    if not isinstance(item, dict):
        raise TraceError(path, f"journal line {n + 1} is a {type(item).__name__}, not an object")
    if n == 0 and "tracemerge_journal" not in item:
        raise TraceError(path, "not a tracemerge journal (its first line has no 'tracemerge_journal')")
    return item


def _take_records(path: str, n: int, item: Dict[str, Any], rpcs: Dict[tuple, dict],
                  collectives: Dict[tuple, dict]) -> None:
    """The RPC and collective records of one line, checked, into ``rpcs`` and ``collectives``
    (a later line's record of the same key replaces an earlier one's)."""
    rec = item.get("rpc")
    if rec is not None:
        # checked before its fields make a key (a list there ended every command in exit 1)
        check_record(path, f"journal line {n + 1}: rpc", rec, "rpcs")
        rpcs[(rec["rpc_id"], rec["role"])] = rec
    rec = item.get("collective")
    if rec is not None:
        check_record(path, f"journal line {n + 1}: collective", rec, "collectives")
        # the key the capture gives it: its seq is known only once it was issued
        collectives[(rec["group"], rec.get("op"), rec["start_ns"])] = rec


def rank_of_records(rpcs: List[Dict[str, Any]]) -> Optional[int]:
    """The rank a journal's call records name it by (a served call's ``callee``, a sent
    call's ``caller``), when they agree; else None."""
    named = {r.get("callee") if r.get("role") == "callee" else r.get("caller") for r in rpcs}
    named.discard(None)
    found = next(iter(named)) if len(named) == 1 else None
    return found if isinstance(found, int) and not isinstance(found, bool) and found >= 0 else None


def read(path: str) -> RankTrace:
    with open(path, "rb") as f:
        data = f.read()
    block = block_of(path, data)
    trace = chrome.build(path, [], {}, block)
    return replace(trace, warnings=[_note(block)])


def _note(block: Dict[str, Any]) -> str:
    journal = block["journal"]
    how = ("its block ended, but its rank file was not written or not given" if journal["closed"]
           else "it left no rank file: the process ended before writing one")
    return (f"read from its journal ({how}): {len(block['rpcs'])} RPC and {len(block['collectives'])} "
            "collective records up to its last flush, no events" + (" (the journal was cut in a line)"
                                                                      if journal["cut"] else ""))


def describe_journal(path: str) -> RankInfo:
    return describe(read(path))


def is_journal(info: RankInfo) -> bool:
    return "journal" in info.ending


def prefer_rank_files(infos: List[RankInfo]) -> List[RankInfo]:
    """``infos`` without the journals whose rank's rank file is given too; a journal given
    with its rank's cycle files only keeps the records none of them holds, as the next cycle."""
    files: Dict[Any, List[RankInfo]] = {}
    for info in infos:
        if not is_journal(info):
            files.setdefault(_process(info), []).append(info)
    out = []
    for info in infos:
        if not is_journal(info):
            out.append(info)
            continue
        same = files.get(_process(info))
        if not same:
            out.append(info)
        elif all(o.cycle is not None for o in same):
            out.append(_after_cycles(info, same))
    return out


def _process(info: RankInfo) -> tuple:
    return (info.rank, info.job_id, info.hostname, info.worker_name)


def _after_cycles(info: RankInfo, cycles: List[RankInfo]) -> RankInfo:
    rpcs = {(r["rpc_id"], r["role"]) for c in cycles for r in c.rpcs}
    colls = {(c["group"], c.get("op"), c["start_ns"]) for part in cycles for c in part.collectives}
    last = max(c.cycle for c in cycles if c.cycle is not None)
    return replace(info, cycle=last + 1,
                   rpcs=[r for r in info.rpcs if (r["rpc_id"], r["role"]) not in rpcs],
                   collectives=[c for c in info.collectives if (c["group"], c.get("op"), c["start_ns"]) not in colls],
                   start_ns=max(info.start_ns, max(c.stop_ns for c in cycles)))


FORMAT = InputFormat("journal", read, describe_journal, sniff=sniff)

