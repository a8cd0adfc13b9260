"""Cross-rank correlation: RPC records joined by ``rpc_id``, collectives by (group, seq).

Inputs are the records of :class:`~tracemerge.rankinfo.RankInfo` (see
docs/rank-file-format.md); every time stays on the clock of the rank that wrote it.
"""

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class RpcCall:
    """One RPC with whatever sides were captured: t1/t4 on the caller's clock, t2/t3 on the callee's."""

    rpc_id: str
    kind: str
    func: str
    name: str                       # legacy key, e.g. rpc_async#aten::add(worker0 -> worker1)
    caller: int
    callee: int
    send_ns: Optional[int] = None      # t1
    start_ns: Optional[int] = None     # t2
    end_ns: Optional[int] = None       # t3
    complete_ns: Optional[int] = None  # t4
    status: str = "ok"

    @property
    def complete(self):
        """Both sides were captured, so the call is a full NTP quadruple."""
        return None not in (self.send_ns, self.start_ns, self.end_ns, self.complete_ns)


@dataclass
class RpcMatch:
    calls: list                                   # [RpcCall], in rpc_id order of first sight
    caller_only: int = 0                          # the callee's record is missing
    callee_only: int = 0                          # the caller's record is missing
    missing_peer: dict = field(default_factory=dict)  # {rank: calls whose peer rank has no input}


CALLER_FIELDS = ("send_ns", "complete_ns")
CALLEE_FIELDS = ("start_ns", "end_ns")


def match_rpcs(infos):
    """Join the caller's and the callee's record of every RPC by ``rpc_id``."""
    calls = {}
    for info in infos:
        for rec in info.rpcs:
            call = calls.get(rec["rpc_id"])
            if call is None:
                call = calls[rec["rpc_id"]] = RpcCall(
                    rpc_id=rec["rpc_id"], kind=rec.get("kind", ""), func=rec.get("func", ""),
                    name=rec.get("name", ""), caller=rec["caller"], callee=rec["callee"])
            for key in CALLER_FIELDS if rec.get("role") == "caller" else CALLEE_FIELDS:
                if rec.get(key) is not None:
                    setattr(call, key, int(rec[key]))
            if rec.get("status", "ok") != "ok":
                call.status = rec["status"]
    present = {info.rank for info in infos}
    match = RpcMatch(calls=list(calls.values()))
    for call in match.calls:
        for peer in (call.caller, call.callee):
            if peer not in present:
                match.missing_peer[peer] = match.missing_peer.get(peer, 0) + 1
        has_caller = call.send_ns is not None
        has_callee = call.start_ns is not None
        match.caller_only += has_caller and not has_callee
        match.callee_only += has_callee and not has_caller
    return match


@dataclass
class CollectiveMatch:
    """One collective as seen by each rank that recorded it; times on each rank's own clock."""

    group: str
    seq: int
    op: str
    group_ranks: list
    start_ns: dict = field(default_factory=dict)  # {rank: ns}
    end_ns: dict = field(default_factory=dict)
    bytes: dict = field(default_factory=dict)

    @property
    def complete(self):
        """Every rank of the group recorded it."""
        return set(self.group_ranks) <= set(self.end_ns)


def match_collectives(infos):
    """[CollectiveMatch] keyed by (group, seq), in the order of first sight."""
    found = {}
    for info in infos:
        for rec in info.collectives:
            key = (str(rec["group"]), int(rec["seq"]))
            m = found.get(key)
            if m is None:
                m = found[key] = CollectiveMatch(group=key[0], seq=key[1], op=rec.get("op", ""),
                                                 group_ranks=list(rec.get("group_ranks") or []))
            m.start_ns[info.rank] = int(rec["start_ns"])
            if rec.get("end_ns") is not None:  # absent when the file was written mid-collective
                m.end_ns[info.rank] = int(rec["end_ns"])
            m.bytes[info.rank] = int(rec.get("bytes", 0))
    return list(found.values())
