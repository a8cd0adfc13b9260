"""The post-mortem of a job that failed: which ranks ended early and when, what was in
flight to or from them, the collectives some rank never joined, and, for a job that hung
until it was killed, what each rank was blocked in and the rank everyone waited for.

From the ranks' records alone (kilobytes: ``RankInfo``), on the reference clock; a
Flight Recorder dump's records count as any rank's (a dump-only rank's window ends at its
dump), and what only they say — mismatches between ranks, each group's status, the frames
a rank was in — comes from :mod:`tracemerge.analysis.flight_recorder`. How a
rank ended is what its file says (``RankInfo.ending``): a rank read from a journal that
was never closed died without writing its rank file (os._exit, SIGKILL, the OOM killer, a
segfault); a rank file written on a signal says which. docs/reports.md, "Post-mortem".
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from tracemerge.analysis.flight_recorder import GroupStatus, Mismatch, findings
from tracemerge.inputs.flight_recorder import frame_text

# (head, body) as the other analyses' tables (analysis.tables.Table)
Table = Tuple[List[str], List[List[Any]]]


@dataclass
class RankEnd:
    """How one rank ended."""

    rank: int
    how: str                    # "died" (no rank file, journal not closed), "SIGTERM" (…: the signal), "ended"
    at_ns: int                  # when, on the reference clock
    known_from: str             # what tells: "last journal flush", "last event", "last record",
                                # "first call to it that never completed", "signal"
    last_done: str = ""         # the last thing it completed (a call, a collective)
    last_done_ns: Optional[int] = None
    blocked_in: str = ""        # the call or collective it was in when it ended, "" when none
    detail: str = ""            # "raised": the exception (type: message, thread); a rank seen dead
                                # by its peers: the last exchange with it that succeeded


@dataclass
class InFlight:
    """An RPC sent and never completed."""

    rpc_id: str
    name: str
    caller: int
    callee: int
    send_ns: int                # reference clock
    waited_ns: int              # from its send to when the caller last told of it
    status: str                 # the caller's: "pending" (still waiting) or "error" (it failed)


@dataclass
class Unjoined:
    """A collective some ranks of its group entered and others never did."""

    group: str
    seq: int
    op: str
    missing: List[int]          # the ranks that never joined it
    waiting: Dict[int, int]     # {rank: how long it waited in it, ns}
    start_ns: int               # the first rank entered it (reference clock)
    # {rank: the frame it entered it from} (Flight Recorder frames), and of each rank that
    # never joined, the last collective of the group it did enter, and from where
    where: Dict[int, str] = field(default_factory=dict)
    missing_last: Dict[int, str] = field(default_factory=dict)


@dataclass
class PostMortem:
    ended: List[RankEnd] = field(default_factory=list)       # every rank that did not end its block normally
    in_flight: List[InFlight] = field(default_factory=list)
    unjoined: List[Unjoined] = field(default_factory=list)
    waited_for: Optional[int] = None                           # the rank everyone waited for (hung job)
    mismatches: List[Mismatch] = field(default_factory=list)   # collectives whose ranks' entries differ (Flight Recorder)
    groups: List[GroupStatus] = field(default_factory=list)    # each rank's groups at its dump (Flight Recorder)

    @property
    def died(self) -> List[RankEnd]:
        return [e for e in self.ended if e.how == "died"]

    def __bool__(self) -> bool:
        return bool(self.ended or self.in_flight or self.unjoined or self.mismatches)


Clock = Callable[[int], int]


def postmortem(infos: Sequence[Any], clocks: Mapping[int, Any]) -> PostMortem:
    """The post-mortem of the ranks ``infos`` (RankInfo) under ``clocks`` ({rank: ClockModel})."""
    to_ref: Dict[int, Clock] = {i.rank: clocks[i.rank].to_reference for i in infos}
    by_rank = {i.rank: i for i in infos}
    callee_sides = {r["rpc_id"]: r for i in infos for r in i.rpcs if r.get("role") == "callee"}
    ends: Dict[int, RankEnd] = {}
    for info in infos:
        end = _ending(info, to_ref[info.rank], infos, callee_sides, to_ref)
        if end is not None:
            ends[info.rank] = end
    for end in _seen_dead(infos, to_ref):
        ends.setdefault(end.rank, end)
    out = PostMortem()
    out.in_flight = _in_flight(infos, ends, callee_sides, to_ref)
    out.unjoined = _unjoined(infos, to_ref, ends)
    # what ended on some rank ended for all: a journal's last flush may predate the end of
    # a call or collective it shows open (another rank's records tell)
    ended = ({r["rpc_id"] for i in infos for r in i.rpcs if r.get("status") == "ok" or "end_ns" in r}
             | {(str(c["group"]), c["seq"]) for i in infos for c in i.collectives if _done(c)})
    for rank, end in ends.items():
        if rank in by_rank:  # a rank only its peers saw go has no records of its own
            end.last_done, end.last_done_ns, end.blocked_in = _last_and_blocked(by_rank[rank], to_ref[rank],
                                                                                end.at_ns, ended)
    out.ended = [ends[r] for r in sorted(ends)]
    fr = findings(infos, to_ref)
    out.mismatches, out.groups = fr.mismatches, fr.status
    out.waited_for = _waited_for(out)
    return out


def _waited_for(out: "PostMortem") -> Optional[int]:
    """The rank the others waited for: the one most often missing from a collective never
    joined, else the first that died (None: neither)."""
    missing = [r for u in out.unjoined for r in u.missing]
    if missing:
        return max(set(missing), key=missing.count)
    return out.died[0].rank if out.died else None


def _ending(info: Any, ref: Clock, infos: Sequence[Any], callee_sides: Dict[str, dict],
            to_ref: Mapping[int, Clock]) -> Optional[RankEnd]:
    """How ``info``'s rank ended, when not at the end of its block: None for a rank that did."""
    ending = info.ending
    journal = ending.get("journal")
    if journal is not None and not journal.get("closed"):
        # the last sign of life: its last flush, its last record; and the first call to it
        # that never completed (it stopped answering then)
        found = [(ref(journal["alive_ns"]), "last journal flush")] if journal.get("alive_ns") else []
        last = _last_record_ns(info)
        if last is not None:
            found.append((ref(last), "last record"))
        if info.timed:
            found.append((ref(info.last_ns), "last event"))
        first = _first_unanswered(info.rank, infos, callee_sides, to_ref)
        if first is not None:
            found.append((first, "first call to it that never completed"))
        if not found:
            return None
        at, why = max(found)
        return RankEnd(info.rank, "died", at, why)
    raised = ending.get("exception")
    if isinstance(raised, dict):
        at = raised["time_ns"] if isinstance(raised.get("time_ns"), int) else info.stop_ns
        return RankEnd(info.rank, "raised", ref(at), "exception in its rank file",
                       detail=f"{raised.get('type', 'Exception')}: {raised.get('message', '')} "
                              f"(thread {raised.get('thread', '?')})")
    if "signal" in ending:
        at = ending.get("signal_ns", info.stop_ns)
        return RankEnd(info.rank, str(ending["signal"]), ref(at), "signal")
    return None


# what a call or collective says when its peer went (gloo, TensorPipe)
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "unreachable",
             "Connection refused")


def _seen_dead(infos: Sequence[Any], to_ref: Mapping[int, Clock]) -> List[RankEnd]:
    """The ranks that left no file of their own and whose peers saw them go: a call to one
    that failed, a collective with one that ended in a lost peer's error. Each died at the
    first such failure, after the last exchange with it that succeeded (``last_done_ns``)."""
    given = {i.rank for i in infos}
    failed: Dict[int, List[Tuple[int, str]]] = {}
    last_ok: Dict[int, int] = {}
    for info in infos:
        # only what the peers saw of a rank without a file counts (a rank's own file says how
        # it ended): the records about the others are passed over, most of a healthy job's
        _calls_seen(info, to_ref[info.rank], given, failed, last_ok)
        _collectives_seen(info, to_ref[info.rank], given, failed, last_ok)
    out = []
    for peer, seen in sorted(failed.items()):
        if not isinstance(peer, int):
            continue
        at, why = min(seen)
        ok = last_ok.get(peer)
        out.append(RankEnd(peer, "died", at, why, last_done="" if ok is None else "its last exchange that succeeded",
                           last_done_ns=ok))
    return out


def _calls_seen(info: Any, ref: Clock, given: Set[int], failed: Dict[int, List[Tuple[int, str]]],
                last_ok: Dict[int, int]) -> None:
    """What ``info``'s calls saw of their callees not in ``given``: a call that failed (into
    ``failed``), the last one that completed (``last_ok``), on the reference clock."""
    for r in info.rpcs:
        peer = r.get("callee")
        if r.get("role") != "caller" or peer in given:
            continue
        if r.get("status") == "ok" and isinstance(r.get("complete_ns"), int):
            last_ok[peer] = max(last_ok.get(peer, 0), ref(r["complete_ns"]))
        elif r.get("status") == "error":
            at = next((r[k] for k in ("complete_ns", "complete_by_ns", "send_ns") if isinstance(r.get(k), int)))
            failed.setdefault(peer, []).append((ref(at), f"rank {info.rank}'s call {_describe_rpc(r)} to it "
                                                         "failed"))


def _collectives_seen(info: Any, ref: Clock, given: Set[int], failed: Dict[int, List[Tuple[int, str]]],
                      last_ok: Dict[int, int]) -> None:
    """What ``info``'s collectives saw of their peers not in ``given``: a lost peer's error
    (into ``failed``), the last one that ended (``last_ok``), on the reference clock."""
    for c in info.collectives:
        peers = set(c.get("group_ranks") or []).difference(given)
        if not peers:
            continue
        error = str(c.get("error", ""))
        if error and any(s in error for s in PEER_LOST):
            at = c["error_at_ns"] if isinstance(c.get("error_at_ns"), int) else c["start_ns"]
            for peer in peers:
                failed.setdefault(peer, []).append((ref(at), f"rank {info.rank}'s {_describe_collective(c)} "
                                                             f"failed ({error[:80]})"))
        elif isinstance(c.get("end_ns"), int):
            for peer in peers:
                last_ok[peer] = max(last_ok.get(peer, 0), ref(c["end_ns"]))


_RECORD_TIMES = ("send_ns", "complete_ns", "start_ns", "end_ns")


def _last_record_ns(info: Any) -> Optional[int]:
    times = [r[k] for r in list(info.rpcs) + list(info.collectives) for k in _RECORD_TIMES if isinstance(r.get(k), int)]
    return max(times) if times else None


def _never_completed(call: dict, callee_sides: Dict[str, dict]) -> bool:
    """A caller record whose call never completed: not ok, and its callee never ended it."""
    side = callee_sides.get(call["rpc_id"])
    return call.get("status") != "ok" and (side is None or "end_ns" not in side)


def _first_unanswered(rank: int, infos: Sequence[Any], callee_sides: Dict[str, dict],
                      to_ref: Mapping[int, Clock]) -> Optional[int]:
    sends = [to_ref[i.rank](r["send_ns"]) for i in infos for r in i.rpcs
             if r.get("role") == "caller" and r.get("callee") == rank and isinstance(r.get("send_ns"), int)
             and _never_completed(r, callee_sides)]
    return min(sends) if sends else None


def _in_flight(infos: Sequence[Any], ends: Mapping[int, RankEnd], callee_sides: Dict[str, dict],
               to_ref: Mapping[int, Clock]) -> List[InFlight]:
    """The calls sent and never completed that involve a rank that ended early, sent before it
    ended: to it, from it."""
    out = []
    for info in infos:
        ref = to_ref[info.rank]
        stop = ref(max(info.stop_ns, info.last_ns if info.timed else info.stop_ns))
        for r in info.rpcs:
            if r.get("role") != "caller" or not isinstance(r.get("send_ns"), int):
                continue
            if not _never_completed(r, callee_sides):
                continue
            end = ends.get(r["callee"]) or ends.get(r["caller"])
            sent = ref(r["send_ns"])
            if end is None or sent > end.at_ns:
                continue
            told = ref(r["complete_ns"]) if isinstance(r.get("complete_ns"), int) else stop
            out.append(InFlight(r["rpc_id"], str(r.get("name") or r.get("func") or ""), r["caller"], r["callee"],
                                sent, max(0, told - sent), str(r.get("status", "pending"))))
    out.sort(key=lambda c: c.send_ns)
    return out


def _unjoined(infos: Sequence[Any], to_ref: Mapping[int, Clock],
              ends: Optional[Mapping[int, RankEnd]] = None) -> List[Unjoined]:
    """Collectives that some rank of the group entered and did not leave while another
    rank of the group never entered them; or that a rank of the group never entered because
    it had ended (``ends``) before the first member left them, however the others left
    (a gloo collective fails once its peer is gone: it ends, with an error)."""
    ends = ends or {}
    groups: Dict[tuple, Dict[int, dict]] = {}
    for info in infos:
        for c in info.collectives:
            groups.setdefault((str(c["group"]), c["seq"]), {})[info.rank] = c
    out = []
    for (group, seq), members in groups.items():
        first = next(iter(members.values()))
        missing = sorted(set(first.get("group_ranks") or []) - set(members))
        stuck = _stuck(members, missing, to_ref, ends)
        if not stuck or not missing:
            continue
        by_rank = {i.rank: i for i in infos}
        waiting = {rank: _waited(c, by_rank[rank]) for rank, c in stuck.items()}
        where = {rank: frame_text(c["frames"]) for rank, c in sorted(stuck.items()) if c.get("frames")}
        out.append(Unjoined(group, seq, str(first.get("op", "")), missing, dict(sorted(waiting.items())),
                            min(to_ref[r](c["start_ns"]) for r, c in stuck.items()), where,
                            _last_entered(by_rank, missing, group)))
    out.sort(key=lambda u: u.start_ns)
    return out


def _stuck(members: Dict[int, dict], missing: List[int], to_ref: Mapping[int, Clock],
           ends: Mapping[int, RankEnd]) -> Dict[int, dict]:
    """The members of one collective that waited in it: those that never left, or all of them
    where every ``missing`` rank had ended before the first member left it (they entered
    before or after it went: a rank raising late in its step is still the one they waited for)."""
    left = min((to_ref[r](c["end_ns"]) for r, c in members.items() if isinstance(c.get("end_ns"), int)),
               default=min(to_ref[r](c["start_ns"]) for r, c in members.items()))
    if missing and all(r in ends and ends[r].at_ns <= left for r in missing):
        return dict(members)   # every member waited in it for a rank that was gone
    return {rank: c for rank, c in members.items() if not _done(c)}


def _waited(c: dict, info: Any) -> int:
    """How long ``info``'s rank waited in the collective ``c``: to its end, else to the rank's own end."""
    stop = c["end_ns"] if isinstance(c.get("end_ns"), int) else max(
        info.stop_ns, info.last_ns if info.timed else info.stop_ns)
    return max(0, stop - c["start_ns"])


def _done(c: dict) -> bool:
    """A collective record that ended: its end is given, or its Flight Recorder entry completed."""
    return isinstance(c.get("end_ns"), int) or bool(c.get("completed"))


def _last_entered(by_rank: Mapping[int, Any], ranks: List[int], group: str) -> Dict[int, str]:
    """{rank: the last collective of ``group`` it entered, and the frame it entered it from}."""
    out = {}
    for rank in ranks:
        info = by_rank.get(rank)
        recs = [c for c in info.collectives if str(c["group"]) == group] if info is not None else []
        if recs:
            last = max(recs, key=lambda c: c["seq"])
            where = frame_text(last.get("frames") or [])
            out[rank] = f"{last.get('op', 'collective')} (seq {last['seq']})" + (f" at {where}" if where else "")
    return out


def _describe_rpc(r: dict) -> str:
    return str(r.get("name") or r.get("func") or r.get("rpc_id"))


def _describe_collective(c: dict) -> str:
    return f"{c.get('op', 'collective')} (group {c['group']}, seq {c['seq']})"


def _last_and_blocked(info: Any, ref: Clock, at_ns: int, ended: set) -> Tuple[str, Optional[int], str]:
    """(the last thing the rank completed, when, the call or collective it was in at the end);
    ``ended``: the rpc_ids and (group, seq) some rank saw end."""
    done: List[Tuple[int, str]] = []
    open_: List[Tuple[int, str]] = []
    for r in info.rpcs:
        begin, finish = ("send_ns", "complete_ns") if r.get("role") == "caller" else ("start_ns", "end_ns")
        what = _describe_rpc(r) + ("" if r.get("role") == "caller" else " (serving)")
        if isinstance(r.get(finish), int):
            done.append((ref(r[finish]), what))
        elif (isinstance(r.get(begin), int) and r.get("status", "pending") == "pending"
              and r.get("rpc_id") not in ended):
            open_.append((ref(r[begin]), what))
    for c in info.collectives:
        if isinstance(c.get("end_ns"), int):
            done.append((ref(c["end_ns"]), _describe_collective(c)))
        elif c.get("completed"):  # a Flight Recorder entry that completed at a time it does not say
            done.append((ref(c["start_ns"]), _describe_collective(c)))
        elif isinstance(c.get("start_ns"), int) and (str(c["group"]), c["seq"]) not in ended:
            open_.append((ref(c["start_ns"]), _describe_collective(c)))
    last = max(done) if done else None
    blocked = max((o for o in open_ if o[0] <= at_ns), default=None)
    return (last[1] if last else "", last[0] if last else None, blocked[1] if blocked else "")


def _ms(ns: Optional[int]) -> str:
    return "" if ns is None else f"{ns / 1e6:.3f}"


def _ended_table(ended: List[RankEnd], t0: int) -> Table:
    """The table of the ranks that ended early (times in ms from ``t0``)."""
    return (["Rank", "How", "At ms", "Known from", "Last completed", "Last completed at ms", "Blocked in", "Detail"],
            [[e.rank, e.how, _ms(e.at_ns - t0), e.known_from, e.last_done,
              _ms(None if e.last_done_ns is None else e.last_done_ns - t0), e.blocked_in or "-", e.detail or "-"]
             for e in ended])


def _in_flight_table(in_flight: List[InFlight], t0: int) -> Table:
    """The table of the RPCs in flight that never completed."""
    return (["RPC id", "Caller", "Callee", "Sent ms", "Waited ms", "Status", "Name"],
            [[c.rpc_id, c.caller, c.callee, _ms(c.send_ns - t0), _ms(c.waited_ns), c.status, c.name]
             for c in in_flight])


def _unjoined_table(unjoined: List[Unjoined], t0: int) -> Table:
    """The table of the collectives some rank never joined."""
    return (["Group", "Seq", "Op", "Entered ms", "Never joined", "Waiting (ms)", "Waiting in", "Never joined: last in"],
            [[u.group, u.seq, u.op, _ms(u.start_ns - t0), " ".join(map(str, u.missing)),
              " ".join(f"{r}:{_ms(w)}" for r, w in u.waiting.items()),
              "; ".join(f"{r}: {w}" for r, w in u.where.items()) or "-",
              "; ".join(f"{r}: {w}" for r, w in u.missing_last.items()) or "-"] for u in unjoined])


def _mismatches_table(mismatches: List[Mismatch], t0: int) -> Table:
    """The table of the Flight Recorder's collectives whose ranks disagree (no times: ``t0`` unused)."""
    return (["Group", "Seq", "Op", "Rank", "Expected as rank", "Mismatch", "Detail"],
            [[m.group, m.seq, m.op, m.rank, m.expected_rank, m.kind, m.culprit or "-"] for m in mismatches])


def _groups_table(groups: List[GroupStatus], t0: int) -> Table:
    """The table of each rank's groups at its Flight Recorder dump."""
    return (["Rank", "Group", "Last enqueued", "Last started", "Last completed", "Last completed op", "In",
             "Since ms", "Issued at"],
            [[g.rank, g.group, _seq(g.last_enqueued), _seq(g.last_started), _seq(g.last_completed),
              g.last_completed_op or "-", g.pending or "-",
              _ms(None if g.pending_since_ns is None else g.pending_since_ns - t0) or "-", g.where or "-"]
             for g in groups])


def sections(pm: PostMortem, t0: int) -> List[Tuple[str, Table]]:
    """The post-mortem as titled tables (times in ms from ``t0``, the report's start): one
    table per kind of finding, in the report's order, said only where there is one."""
    found: List[Tuple[str, Sequence[Any], Callable[[Any, int], Table]]] = [
        ("Post-mortem: ranks that ended early", pm.ended, _ended_table),
        ("Post-mortem: RPCs in flight, never completed", pm.in_flight, _in_flight_table),
        ("Post-mortem: collectives never joined", pm.unjoined, _unjoined_table),
        ("Post-mortem: collectives whose ranks disagree (Flight Recorder)", pm.mismatches, _mismatches_table),
        ("Post-mortem: each rank's groups at its Flight Recorder dump", pm.groups, _groups_table),
    ]
    return [(title, table(items, t0)) for title, items, table in found if items]


def _seq(value: Optional[int]) -> str:
    return "-" if value is None or value < 0 else str(value)


def summary(pm: PostMortem, t0: int) -> List[str]:
    """The findings in a few lines (times in ms from ``t0``), said before the tables."""
    lines = [_ended_line(e, t0) for e in pm.ended]
    lines.extend(f"{c.name or c.rpc_id} ({c.rpc_id}, rank {c.caller} -> rank {c.callee}) was sent at "
                 f"{_ms(c.send_ns - t0)} ms and never completed (waited {_ms(c.waited_ns)} ms)" for c in pm.in_flight)
    lines.extend(_unjoined_line(u) for u in pm.unjoined)
    lines.extend(f"{m.op} (group {m.group}, seq {m.seq}): rank {m.rank} does not match rank {m.expected_rank}: "
                 f"{m.kind}" + (f" ({m.culprit})" if m.culprit else "") for m in pm.mismatches)
    if pm.waited_for is not None and (pm.unjoined or pm.died):
        lines.append(f"the rank everyone waited for: rank {pm.waited_for}")
    return lines


def _ended_line(e: RankEnd, t0: int) -> str:
    """The summary's line of a rank that ended early: how (its own file's word, or its
    peers' where it left none), when, and what it was blocked in."""
    seen = e.known_from.startswith("rank ")  # its peers saw it go: it left no file
    what = ("died, leaving no file (its peers saw it go)" if seen and e.how == "died"
            else "died without writing its rank file" if e.how == "died"
            else f"was ended by {e.how}" if e.how.startswith("SIG")
            else f"raised {e.detail}" if e.how == "raised" else f"ended ({e.how})")
    line = f"rank {e.rank} {what} at {_ms(e.at_ns - t0)} ms (known from {'' if seen else 'its '}{e.known_from})"
    return line + (f", blocked in {e.blocked_in}" if e.blocked_in else "")


def _unjoined_line(u: Unjoined) -> str:
    """The summary's line of a collective some rank never joined: who did not, who waited
    how long and where, and what the absent ranks last entered."""
    return (f"{u.op} (group {u.group}, seq {u.seq}): rank{'s' if len(u.missing) > 1 else ''} "
            f"{', '.join(map(str, u.missing))} never joined; "
            + ", ".join(f"rank {r} waited {_ms(w)} ms" + (f" in it at {u.where[r]}" if r in u.where else "")
                        for r, w in u.waiting.items())
            + "".join(f"; rank {r} last entered {w}" for r, w in u.missing_last.items()))


def as_dict(pm: PostMortem) -> Dict[str, Any]:
    """The JSON report's ``"postmortem"``."""
    from dataclasses import asdict

    return {"ended": [asdict(e) for e in pm.ended], "in_flight": [asdict(c) for c in pm.in_flight],
            "unjoined": [asdict(u) for u in pm.unjoined], "waited_for": pm.waited_for,
            "mismatches": [asdict(m) for m in pm.mismatches], "groups": [asdict(g) for g in pm.groups]}
