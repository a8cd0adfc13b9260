"""Calls that never completed, drawn from the caller's records: in a failed job, the calls
in flight when a rank died (or sent to it after) never got an answer.

Each such call (a caller record whose status is not ``ok`` and whose callee never ended
it) is drawn as a span from its send up to where the caller last knew of it: the error
that told it, else the end of the caller's trace (or, for a rank read from its journal,
its last flush). Its name is the call's, its ``args`` carry ``rpc_id``, ``caller``,
``callee``, ``status`` and ``completed: false`` (no ``role``: it is no end of an arrow,
and no arrow comes back), on one more process of the caller rank's group (the
second-to-last slot of its pid block). docs/capture.md, "When a job fails".

The caller's own span of such a call (its ``rpc_sync#…``/``rpc_async#…`` span, which ends
where the caller's trace says: at the error, when the caller was stopped, or never) gets
the mark too: ``completed: false`` and ``in_flight_to`` (the callee rank) added to its
args (:func:`marked`), every other byte of them as written.
"""

from dataclasses import replace
from typing import Any, Collection, Dict, List, Mapping, Sequence, Tuple

import msgspec

from tracemerge.inputs.chrome import build
from tracemerge.inputs.rankinfo import RankInfo
from tracemerge.inputs.rpc_spans import span_args
from tracemerge.model import RankTrace, Replaced
from tracemerge.place.placement import Placement

PID = "rpc calls never completed (from the records)"


def never_completed(infos: Sequence[RankInfo]) -> Dict[int, List[Dict[str, Any]]]:
    """{caller rank: [caller record]} of the calls that never completed."""
    ended = {r["rpc_id"] for info in infos for r in info.rpcs if r.get("role") == "callee" and "end_ns" in r}
    ended |= {r["rpc_id"] for info in infos for r in info.remote_rpcs if "end_ns" in r}
    out: Dict[int, List[Dict[str, Any]]] = {}
    for info in infos:
        if info.rank is None:  # not numbered yet: no place of its own
            continue
        for r in info.rpcs:
            if (r.get("role") == "caller" and r.get("status") != "ok" and isinstance(r.get("send_ns"), int)
                    and r["rpc_id"] not in ended):
                out.setdefault(info.rank, []).append(r)
    return out


def in_flight_calls(never: Mapping[int, List[Dict[str, Any]]]) -> Dict[int, Dict[str, int]]:
    """{caller rank: {rpc_id: callee rank}} of the calls that never completed (``never``:
    :func:`never_completed`): whose caller spans :func:`marked` marks."""
    return {rank: {r["rpc_id"]: r["callee"] for r in recs} for rank, recs in never.items()}


MARK_KEYS = (b'"completed"', b'"in_flight_to"')


def marked(trace: RankTrace, calls: Mapping[str, int]) -> RankTrace:
    """``trace`` with its caller spans of ``calls`` ({rpc_id: callee rank}, the calls of
    this rank that never completed) marked: ``completed: false, in_flight_to: <callee>``
    appended to their args (raw JSON: after their last byte, the rest kept as written);
    ``trace`` itself untouched."""
    over: Dict[int, Any] = {}
    for i, rpc_id, role in span_args(trace) if calls else ():
        if role == "caller" and rpc_id in calls:
            over[i] = _mark(trace.args.raw_item(i), trace.args.raw, calls[rpc_id])
    return replace(trace, args=Replaced(trace.args, over)) if over else trace


def _mark(item: Any, raw: bool, callee: int) -> Any:
    """One span's args with the mark (``item``: a dict, or raw JSON of an object)."""
    if raw:
        text = bytes(item).rstrip()
        if text.endswith(b"}") and not any(k in text for k in MARK_KEYS):
            head = text[:-1].rstrip()
            return msgspec.Raw(head + (b"" if head.endswith(b"{") else b",")
                               + b'"completed":false,"in_flight_to":' + msgspec.json.encode(callee) + b"}")
        item = msgspec.json.decode(item)  # the keys there already: the mark's values win
    marked_ = {**item, "completed": False, "in_flight_to": callee}
    return msgspec.Raw(msgspec.json.encode(marked_)) if raw else marked_


def in_flight_jobs(calls: Mapping[int, List[Dict[str, Any]]], infos: Sequence[RankInfo],
                   places: Mapping[int, Placement], ranks: Collection[int]) -> List[Tuple[RankTrace, Placement]]:
    """The (trace, placement) of the never-completed calls (``calls``: :func:`never_completed`
    of ``infos``) of each caller rank in ``ranks``."""
    if not calls or not places:
        return []
    stride = min(p.pid_base for p in places.values())
    by_rank = {info.rank: info for info in infos}
    out = []
    for rank in sorted(calls):
        if rank not in ranks or rank not in places:
            continue
        info = by_rank[rank]
        end = max(info.stop_ns, info.last_ns if info.timed else info.stop_ns)
        place = replace(places[rank], pid_base=places[rank].pid_base + stride - 2, pids=())
        out.append((_trace(rank, calls[rank], end), place))
    return out


def _trace(rank: int, recs: List[Dict[str, Any]], end_ns: int) -> RankTrace:
    """The spans of ``recs`` (caller records) as a RankTrace on the caller's clock."""
    base = min(r["send_ns"] for r in recs)
    base -= base % 1000
    events: List[Dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": PID}}]
    for n, r in enumerate(sorted(recs, key=lambda r: r["send_ns"])):
        stop = r["complete_ns"] if isinstance(r.get("complete_ns"), int) else max(end_ns, r["send_ns"])
        events.append({"ph": "X", "cat": "rpc", "name": str(r.get("name") or r.get("func") or r["rpc_id"]),
                       "pid": PID, "tid": n + 1, "ts": (r["send_ns"] - base) / 1000,
                       "dur": max(0, stop - r["send_ns"]) / 1000,
                       "args": {"rpc_id": r["rpc_id"], "caller": r["caller"], "callee": r["callee"],
                                "status": r.get("status", "pending"), "completed": False}})
    return build(f"rank {rank}: calls never completed", events, {"baseTimeNanoseconds": base}, None)
