"""Cross-rank correlation: RPC records joined by ``rpc_id``, collectives by (group, seq),
point-to-point sends and receives by (sender, receiver, order).

Inputs are the records of :class:`~tracemerge.inputs.rankinfo.RankInfo` (see
docs/rank-file-format.md); every time stays on the clock of the rank that wrote it. Both
joins give numpy columns, which alignment and the causality check read; reports read the
same joins as :class:`RpcCall` and :class:`CollectiveMatch` objects.
"""

from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress, repeat
from operator import itemgetter
from typing import Any, Collection, Dict, Iterator, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

import numpy as np


class Records(Protocol):
    """What the joins read of a rank: a :class:`~tracemerge.inputs.rankinfo.RankInfo`, or what a
    merged trace's summary keeps of one (``report.build.Recorded``)."""

    @property
    def rank(self) -> Optional[int]: ...

    @property
    def job_id(self) -> Optional[str]: ...

    @property
    def rpcs(self) -> List[Dict[str, Any]]: ...

    @property
    def remote_rpcs(self) -> List[Dict[str, Any]]: ...

    @property
    def collectives(self) -> List[Dict[str, Any]]: ...


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
    def complete(self) -> bool:
        """Both sides were captured, so the call is a full NTP quadruple."""
        return None not in (self.send_ns, self.start_ns, self.end_ns, self.complete_ns)


TIMES = ("send_ns", "start_ns", "end_ns", "complete_ns")  # t1..t4, the rows of RpcCalls.times
CALLER_FIELDS = ("send_ns", "complete_ns")
CALLEE_FIELDS = ("start_ns", "end_ns")


@dataclass
class RpcCalls:
    """Every RPC seen, one per ``rpc_id`` in the order of first sight, as columns; iterating
    gives them as :class:`RpcCall`."""

    first: List[Dict[str, Any]]  # each call's first record (rpc_id, kind, func, name, caller, callee)
    caller: np.ndarray   # int64
    callee: np.ndarray
    times: np.ndarray    # int64 (4, calls): t1..t4 as in TIMES, 0 where ``has`` is False
    has: np.ndarray      # bool (4, calls): the time was recorded
    status: List[str]    # "ok", or the last other status any record of the call gave
    ok: np.ndarray       # bool: status is "ok"

    def __len__(self) -> int:
        return len(self.first)

    def __iter__(self) -> Iterator[RpcCall]:
        times = [[t if h else None for t, h in zip(*row)] for row in zip(self.times.tolist(), self.has.tolist())]
        for rec, caller, callee, t1, t2, t3, t4, status in zip(
                self.first, self.caller.tolist(), self.callee.tolist(), *times, self.status):
            yield RpcCall(rpc_id=rec["rpc_id"], kind=rec.get("kind", ""), func=rec.get("func", ""),
                          name=rec.get("name", ""), caller=caller, callee=callee, send_ns=t1, start_ns=t2,
                          end_ns=t3, complete_ns=t4, status=status)

    def between(self, ranks: Collection[int]) -> List[Tuple[int, str, int, int, bool]]:
        """(position, rpc_id, caller, callee, returned) of the calls with a send and a start
        whose two ranks are both in ``ranks`` (what an output can draw an arrow for), in
        order; ``returned``: the callee ended it and the caller heard back. From the columns,
        without making a :class:`RpcCall` per call."""
        have = np.fromiter(ranks, np.int64, len(ranks))
        use = self.has[0] & self.has[1] & np.isin(self.caller, have) & np.isin(self.callee, have)
        at = np.flatnonzero(use)
        returned = (self.has[2] & self.has[3])[at].tolist()
        positions = at.tolist()
        ids = map(itemgetter("rpc_id"), map(self.first.__getitem__, positions))  # at C speed: ~7,000 calls a rank
        return list(zip(positions, ids, self.caller[at].tolist(), self.callee[at].tolist(), returned))

    @property
    def quadruples(self) -> np.ndarray:
        """Which calls are complete and succeeded: their four times bound the clocks."""
        return self.has.all(axis=0) & self.ok


@dataclass
class RpcMatch:
    calls: RpcCalls
    caller_only: int = 0                          # the callee's record is missing
    callee_only: int = 0                          # the caller's record is missing
    missing_peer: Dict[int, int] = field(default_factory=dict)  # {rank: calls whose peer rank has no input}


def match_rpcs(infos: Sequence[Records]) -> RpcMatch:
    """Join the caller's and the callee's record of every RPC by ``rpc_id``; when a side has
    several records, the last time given for each field and the last non-ok status count."""
    match = _match_rpcs(infos)
    for column in (match.calls.caller, match.calls.callee, match.calls.times, match.calls.has, match.calls.ok):
        column.setflags(write=False)  # shared by every reader of the job
    return match


def _match_rpcs(infos: Sequence[Records]) -> RpcMatch:
    # the callee sides a caller fetched come first: a field both give is the callee's own
    # file's (the last given counts), and they fill in what the callee did not record
    records = [rec for info in infos for rec in info.remote_rpcs] + [rec for info in infos for rec in info.rpcs]
    keys: List[Any] = [rec["rpc_id"] for rec in records]
    if _several_jobs(infos):  # rpc_ids restart in every run: never join records of two jobs
        jobs = [info.job_id for info in infos for _ in info.remote_rpcs] + [info.job_id for info in infos
                                                                              for _ in info.rpcs]
        keys = list(zip(jobs, keys))
    index: Dict[Any, int] = {}
    row = np.fromiter([index.setdefault(key, len(index)) for key in keys], np.int64, len(records))
    first = np.full(len(index), len(records))
    np.minimum.at(first, row, np.arange(len(records)))
    firsts = [records[i] for i in first.tolist()]
    caller = np.fromiter(map(itemgetter("caller"), firsts), np.int64, len(firsts))
    callee = np.fromiter(map(itemgetter("callee"), firsts), np.int64, len(firsts))
    is_caller = np.equal(np.fromiter(map(itemgetter("role"), records), object, len(records)), "caller")
    times = np.zeros((len(TIMES), len(index)), dtype=np.int64)
    has = np.zeros((len(TIMES), len(index)), dtype=np.bool_)
    for side, fields in ((is_caller, CALLER_FIELDS), (~is_caller, CALLEE_FIELDS)):
        recs, side = list(compress(records, side.tolist())), np.flatnonzero(side)
        for key in fields:
            given, values = _given(recs, key)
            last = _last(row[side[given]], np.arange(len(given)), len(index))
            k = TIMES.index(key)
            has[k] = last >= 0
            times[k, has[k]] = values[last[has[k]]]
    statuses = np.fromiter(map(dict.get, records, repeat("status"), repeat("ok")), object, len(records))
    failed = np.flatnonzero(np.not_equal(statuses, "ok"))
    status = ["ok"] * len(index)
    last_failed = _last(row[failed], failed, len(index))
    for r in np.flatnonzero(last_failed >= 0).tolist():
        status[r] = statuses[last_failed[r]]
    calls = RpcCalls(firsts, caller, callee, times, has, status, last_failed < 0)
    present: Set[Any] = {info.rank for info in infos}
    peers = np.stack([caller, callee], axis=1).reshape(-1)
    missing: Dict[int, int] = {}
    for peer in peers[~np.isin(peers, list(present))].tolist():
        missing[peer] = missing.get(peer, 0) + 1
    sent, started = has[TIMES.index("send_ns")], has[TIMES.index("start_ns")]
    return RpcMatch(calls=calls, caller_only=int((sent & ~started).sum()), callee_only=int((started & ~sent).sum()),
                    missing_peer=missing)


def _given(records: List[Dict[str, Any]], key: str) -> Tuple[np.ndarray, np.ndarray]:
    """(positions, int64 values) of the ``records`` that give ``key`` (an int or None)."""
    try:
        return np.arange(len(records)), np.fromiter(map(dict.get, records, repeat(key)), np.int64, len(records))
    except TypeError:  # some leave it out or give None
        values = np.fromiter(map(dict.get, records, repeat(key)), object, len(records))
        given = np.flatnonzero(np.not_equal(values, None))  # type: ignore[call-overload]
        return given, values[given].astype(np.int64)


def _last(rows: np.ndarray, positions: np.ndarray, count: int) -> np.ndarray:
    """Per row (of ``count``), the last of ``positions`` given for it, -1 for none."""
    last = np.full(count, -1)
    np.maximum.at(last, rows, positions)
    return last


@dataclass
class CollectiveMatch:
    """One collective as seen by each rank that recorded it; times on each rank's own clock."""

    group: str
    seq: int
    op: str
    group_ranks: List[int]
    start_ns: Dict[int, int] = field(default_factory=dict)  # {rank: ns}
    end_ns: Dict[int, int] = field(default_factory=dict)
    bytes: Dict[int, int] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every rank of the group recorded it."""
        return set(self.group_ranks) <= set(self.end_ns)


@dataclass
class Collectives:
    """Every collective seen, one per (group, seq) in the order of first sight, and every
    rank's part in it as one *member* entry (sorted by collective, then column; columns
    are the infos' ranks in their order): its size grows with the records, not with
    collectives times ranks, which a job of many small groups (tensor- or pipeline-parallel)
    would make quadratic. The dense (collectives, ranks) views are built when asked for.
    Iterating gives the collectives as :class:`CollectiveMatch`."""

    records: list              # every record, infos in order
    keys: list                 # (group, seq), or (job_id, group, seq) when the inputs come from several jobs
    first: np.ndarray          # each collective's first record (op, group_ranks)
    ranks: list                # the rank of each column
    member_row: np.ndarray     # int64: the collective of each member entry
    member_col: np.ndarray     # int64: its column (rank)
    member_record: np.ndarray  # int64: the rank's last record of it
    member_start: np.ndarray   # int64 ns, from that record
    member_end: np.ndarray     # int64 ns, 0 where not ``member_ended``
    member_ended: np.ndarray   # bool: the rank recorded its end (its last end given counts)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator["CollectiveMatch"]:
        bounds = np.searchsorted(self.member_row, np.arange(len(self.keys) + 1)).tolist()
        cols, starts, ends = self.member_col.tolist(), self.member_start.tolist(), self.member_end.tolist()
        ended, recs = self.member_ended.tolist(), self.member_record.tolist()
        for k, ((*_, group, seq), first) in enumerate(zip(self.keys, self.first.tolist())):
            rec = self.records[first]
            part = range(bounds[k], bounds[k + 1])
            yield CollectiveMatch(group=group, seq=seq, op=rec.get("op", ""),
                                  group_ranks=list(rec.get("group_ranks") or []),
                                  start_ns={self.ranks[cols[i]]: starts[i] for i in part},
                                  end_ns={self.ranks[cols[i]]: ends[i] for i in part if ended[i]},
                                  bytes={self.ranks[cols[i]]: int(self.records[recs[i]].get("bytes", 0)) for i in part})

    @property
    def ops(self) -> list:
        """Each collective's op, as its first record names it."""
        return [self.records[i].get("op", "") for i in self.first.tolist()]

    def _dense(self, values: np.ndarray, fill: Any) -> np.ndarray:
        out = np.full((len(self.keys), len(self.ranks)), fill, dtype=values.dtype)
        out[self.member_row, self.member_col] = values
        return out

    @cached_property
    def last(self) -> np.ndarray:
        """(collectives, ranks): the rank's last record of it, -1 for none."""
        return self._dense(self.member_record, -1)

    @cached_property
    def start(self) -> np.ndarray:
        """int64 (collectives, ranks), from ``last``; 0 where it is -1."""
        return self._dense(self.member_start, 0)

    @cached_property
    def end(self) -> np.ndarray:
        """int64 (collectives, ranks), 0 where not ``ended``."""
        return self._dense(self.member_end, 0)

    @cached_property
    def ended(self) -> np.ndarray:
        """bool (collectives, ranks): the rank recorded its end."""
        return self._dense(self.member_ended, False)


def inferred_order_cuts(infos: Sequence[Records]) -> Tuple[Dict[tuple, int], List[str]]:
    """Where the ranks' collectives without sequence numbers stop agreeing.

    Their ``seq`` is their place among their group's collectives on their rank
    (:mod:`tracemerge.inputs.kineto_collectives`); the k-th of a group must then be the same
    kernel kind, op, size and dtype on every rank, as far as both ranks' traces tell (a
    field one of them lacks is not compared). Returns {(job_id or None, group): the first seq where
    two ranks disagree}, and a sentence for each: that group is matched up to there only,
    since a rank that recorded one more or one fewer would shift every later match.
    """
    several = _several_jobs(infos)
    seen: Dict[tuple, Tuple[Optional[int], tuple]] = {}
    cuts: Dict[tuple, int] = {}
    said: Dict[tuple, str] = {}
    for info in infos:
        for rec in info.collectives:
            if not rec.get("seq_inferred"):
                continue
            group = (info.job_id if several else None, str(rec["group"]))
            seq = int(rec["seq"])
            op = rec.get("op", "")
            # an all-to-all's input size is each rank's own (alltoallv): not compared
            nelems = None if "alltoall" in str(op).lower().replace("_", "") else rec.get("nelems")
            what = (op, nelems, rec.get("dtype", ""), rec.get("kind", ""))
            rank, first = seen.setdefault((*group, seq), (info.rank, what))
            if not _agree(first, what) and seq < cuts.get(group, seq + 1):
                cuts[group] = seq
                said[group] = (f"collectives of process group {group[1]} carry no sequence number and their order "
                               f"disagrees at #{seq}: rank {rank} has {_said(first)}, rank {info.rank} has "
                               f"{_said(what)}; that group's collectives from #{seq} on are not matched")
    return cuts, [said[g] for g in sorted(said, key=str)]


def _agree(a: tuple, b: tuple) -> bool:
    """Two records' (op, nelems, dtype, kind) agree wherever both give the field."""
    return all(x == y or x in (None, "") or y in (None, "") for x, y in zip(a, b))


def _said(what: tuple) -> str:
    op, nelems, dtype, kind = what
    kernel = f" ({kind} kernel)" if kind and kind != str(op).lower() else ""
    return f"{op or '?'}{kernel} of {nelems if nelems is not None else '?'} × {dtype or '?'}"


def match_collectives(infos: Sequence[Records], cuts: Optional[Dict[tuple, int]] = None) -> Collectives:
    """:class:`Collectives` keyed by (group, seq); when a rank has several records of one,
    its last start, bytes and end given count. Records whose seq was inferred are matched
    only up to where the ranks' orders disagree (``cuts``: :func:`inferred_order_cuts`'s,
    found here when not given). One sort of the records' (collective, rank) cells: time and
    memory grow with the records."""
    kept = [info.collectives for info in infos]
    cuts = inferred_order_cuts(list(infos))[0] if cuts is None else cuts
    if cuts:
        several = _several_jobs(infos)
        kept = [[rec for rec in info.collectives
                 if not rec.get("seq_inferred")
                 or rec["seq"] < cuts.get((info.job_id if several else None, str(rec["group"])), rec["seq"] + 1)]
                for info in infos]
    records = [rec for recs in kept for rec in recs]
    keys: List[Tuple[Any, ...]] = list(zip(map(str, map(itemgetter("group"), records)),
                                           map(int, map(itemgetter("seq"), records))))
    if _several_jobs(infos):  # sequence numbers restart in every run: never join two jobs' collectives
        keys = [(job, *key) for job, key in zip((info.job_id for info, recs in zip(infos, kept) for _ in recs), keys)]
    index = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    row = np.fromiter(map(index.__getitem__, keys), np.int64, len(keys))
    cell = row * len(infos) + np.repeat(np.arange(len(infos)), [len(recs) for recs in kept])
    first = np.full(len(index), len(records))
    np.minimum.at(first, row, np.arange(len(records)))
    cells, member = np.unique(cell, return_inverse=True)
    last = _last(member, np.arange(len(records)), len(cells))
    start = np.fromiter(map(itemgetter("start_ns"), records), np.int64, len(records))[last]
    given, ends = _given(records, "end_ns")  # absent when the file was written mid-collective
    last_end = _last(member[given], np.arange(len(given)), len(cells))
    ended = last_end >= 0
    end = np.where(ended, ends[np.maximum(last_end, 0)] if len(ends) else 0, 0).astype(np.int64)
    return Collectives(records, list(index), first, [info.rank for info in infos], cells // max(len(infos), 1),
                       cells % max(len(infos), 1), last, start, end, ended)


def _several_jobs(infos: Sequence[Records]) -> bool:
    """The inputs come from more than one job (their ``job_id`` differs)."""
    return len({info.job_id for info in infos}) > 1


@dataclass(frozen=True)
class PointToPoint:
    """Sends matched with their receives, one entry per pair; times on each side's own clock
    (the sender's for send_*, the receiver's for recv_*)."""

    sender: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    receiver: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    send_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    recv_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # the send's, else the receive's; 0: unknown
    # each pair's records: their places in the sender's and the receiver's ``p2p`` lists
    # (which spans its flow arrow joins: place.arrows.P2pFlows)
    send_record: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    recv_record: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.sender)


def match_p2p(infos: Sequence[Records]) -> Tuple[PointToPoint, List[str]]:
    """(the sends matched with their receives, a sentence for each direction left out).

    Each rank's point-to-point records (``p2p``: :func:`tracemerge.inputs.kineto_collectives.point_to_point`,
    absent from what a merged trace keeps) name their peer; NCCL delivers the sends from
    one rank to another in the order they were issued, and gloo those of one tag (a record's
    ``tag``, where it gives one), so the k-th send of s to r (with tag t) is the k-th receive
    of r from s (with tag t). A direction whose counts differ (a window that cut one side)
    or whose k-th sizes differ where both give one is not matched, and said: one missing
    record would shift every later pair."""
    several = _several_jobs(infos)
    by_rank = {(info.job_id if several else None, info.rank): list(getattr(info, "p2p", None) or []) for info in infos}
    sent, received = _directions(by_rank)
    rows: List[Tuple[int, int, int, int, int, int, int]] = []
    said: List[str] = []
    for key in sorted(set(sent) | set(received), key=str):
        job, s, r, _ = key
        if (job, s) not in by_rank or (job, r) not in by_rank or s == r:
            continue   # the peer has no input: nothing to link
        sends, recvs = sent.get(key, []), received.get(key, [])
        why = _unmatched_because(s, r, [a for _, a in sends], [b for _, b in recvs])
        if why:
            said.append(f"point-to-point: {why}; that direction's sends and receives are not matched")
            continue
        rows.extend((s, r, a["start_ns"], b["end_ns"], int(a.get("bytes") or b.get("bytes") or 0), k, m)
                    for (k, a), (m, b) in zip(sends, recvs))
    cols = [np.array(c, np.int64) for c in zip(*rows)] if rows else [np.zeros(0, np.int64) for _ in range(7)]
    for c in cols:
        c.setflags(write=False)  # shared by every reader of the job
    return PointToPoint(*cols), said


Placed = Tuple[int, Dict[str, Any]]   # (a record's place in its rank's list, the record)


def _directions(by_rank: Mapping[Tuple[Any, Any], List[Any]]
                ) -> Tuple[Dict[tuple, List[Placed]], Dict[tuple, List[Placed]]]:
    """({(job, sender, receiver, tag): sends}, {(job, sender, receiver, tag): receives}), each
    in issue order with its place in its rank's records: one key per direction and tag, the
    order the k-th pairs are read in."""
    sent: Dict[tuple, List[Placed]] = {}
    received: Dict[tuple, List[Placed]] = {}
    for (job, rank), recs in by_rank.items():
        for k, rec in sorted(enumerate(recs), key=lambda placed: placed[1]["start_ns"]):
            if rec["op"] == "send":
                sent.setdefault((job, rank, rec["peer"], rec.get("tag")), []).append((k, rec))
            else:
                received.setdefault((job, rec["peer"], rank, rec.get("tag")), []).append((k, rec))
    return sent, received


def _unmatched_because(s: int, r: int, sends: List[Dict[str, Any]], recvs: List[Dict[str, Any]]) -> str:
    """Why the direction s -> r cannot be matched k-th to k-th (its counts differ, or a pair's
    sizes where both give one), else "": one missing record would shift every later pair."""
    if len(sends) != len(recvs):
        return f"rank {s} records {len(sends)} sends to rank {r}, rank {r} {len(recvs)} receives from rank {s}"
    bad = next((k for k, (a, b) in enumerate(zip(sends, recvs)) if a["bytes"] and b["bytes"]
                and a["bytes"] != b["bytes"]), None)
    if bad is None:
        return ""
    return f"send #{bad} of rank {s} to rank {r} is {sends[bad]['bytes']} bytes, its receive on rank {r} {recvs[bad]['bytes']}"


@dataclass(frozen=True)
class Correlation:
    """What ties the ranks of one job together, joined once (:func:`correlate`) and then only
    read: by the clock model, the causality review, the job checks, the flow arrows, the
    summary, the reports and the analyses."""

    rpcs: RpcMatch
    collectives: Collectives
    # where collectives without sequence numbers stop agreeing across ranks, said once
    order_warnings: Tuple[str, ...] = ()
    p2p: PointToPoint = field(default_factory=PointToPoint)  # sends matched with their receives


def correlate(infos: Sequence[Records]) -> Correlation:
    """The RPC and collective joins of ``infos`` (RankInfo-like: rank, job_id, rpcs,
    remote_rpcs, collectives)."""
    cuts, said = inferred_order_cuts(list(infos))
    p2p, unmatched = match_p2p(infos)
    return Correlation(match_rpcs(infos), match_collectives(infos, cuts), tuple(said + unmatched), p2p)
