"""What the Flight Recorder's entries say of a failed job beyond who never joined: the
collectives whose ranks disagree, and where each rank's groups stood.

The algorithm: the records that carry the Flight Recorder's fields (``source``
``flight_recorder``: a dump's, or a rank file's record a dump beside it completed) are
grouped by (group, seq); the lowest rank's entry is the expected one, and every other
rank's is checked against it by the rules of torch's own analyser
(``torch.distributed.flight_recorder.components.types.Op.match``), named as it names them
(``COLLECTIVE_TYPE_MISMATCH``, ``SIZE_OR_SYNTAX_MISMATCH``, ``COLLECTIVE_DTYPE_MISMATCH``,
``COLLECTIVE_STATE_MISMATCH``) with its messages. Per rank and group: the last collective
it enqueued, started (``pg_status``) and completed, the first it is still in at the dump,
and the frame it was issued from (the first outside torch and the launcher).
"""

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tracemerge.inputs.flight_recorder import SOURCE, frame_text

P2P = ("send", "recv")
Clock = Any


@dataclass
class Mismatch:
    """A collective whose entry on some rank differs from the lowest rank's."""

    group: str
    seq: int
    op: str
    rank: int                   # the rank whose entry differs
    expected_rank: int          # the lowest rank of the collective, whose entry is the expected one
    kind: str                   # torchfrtrace's MatchState name
    culprit: str                # torchfrtrace's message ("" where it gives none)


@dataclass
class GroupStatus:
    """Where one rank's group stood when its Flight Recorder was dumped."""

    rank: int
    group: str
    last_enqueued: Optional[int]
    last_started: Optional[int]         # pg_status's (-1: none started that it saw)
    last_completed: Optional[int]
    last_completed_op: str
    pending: str                        # the first collective it had not completed, "" when none
    pending_since_ns: Optional[int]     # its creation, on the reference clock
    where: str                          # the frame it was issued from (the pending one's, else the last's)


@dataclass
class Findings:
    mismatches: List[Mismatch]
    status: List[GroupStatus]


def is_fr(rec: Dict[str, Any]) -> bool:
    return rec.get("source") == SOURCE


def findings(infos: Sequence[Any], to_ref: Mapping[int, Clock]) -> Findings:
    """The mismatches and group status of the ranks ``infos`` (RankInfo; ``to_ref``: {rank: to reference clock})."""
    by_key: Dict[Tuple[str, int], Dict[int, Dict[str, Any]]] = {}
    for info in infos:
        for c in info.collectives:
            if is_fr(c):
                by_key.setdefault((str(c["group"]), c["seq"]), {})[info.rank] = c
    mismatches = []
    for (group, seq), members in sorted(by_key.items(), key=lambda kv: min(c["start_ns"] for c in kv[1].values())):
        first = min(members)
        for rank in sorted(members):
            if rank == first:
                continue
            found = match(members[first], members[rank], len(members[first].get("group_ranks") or members))
            if found is not None:
                mismatches.append(Mismatch(group, seq, str(members[first].get("op", "")), rank, first, *found))
    return Findings(mismatches, [s for info in infos for s in _status(info, to_ref[info.rank])])


def _status(info: Any, ref: Clock) -> List[GroupStatus]:
    fr = [c for c in info.collectives if is_fr(c)]
    pg_status = (info.ending.get("flight_recorder") or {}).get("pg_status") or {}
    return [_group_status(info.rank, group, sorted((c for c in fr if str(c["group"]) == group), key=lambda c: c["seq"]),
                          pg_status, ref)
            for group in dict.fromkeys(str(c["group"]) for c in fr)]


def _group_status(rank: int, group: str, recs: List[Dict[str, Any]], pg_status: Dict[str, Any],
                  ref: Clock) -> GroupStatus:
    """A group's state at the dump of ``rank``, from its records ``recs`` (by seq) and the
    dump's pg_status (a collective group's, not a p2p pair's)."""
    done = [c for c in recs if c.get("completed") or isinstance(c.get("end_ns"), int)]
    pending = next((c for c in recs if c not in done), None)
    status = pg_status.get(str(recs[-1].get("pg_id")), {}) if ":p2p:" not in group else {}
    last = done[-1] if done else None
    shown = pending or recs[-1]
    return GroupStatus(
        rank, group, status.get("last_enqueued", recs[-1]["seq"]), status.get("last_started"),
        last["seq"] if last else status.get("last_completed"), str(last.get("op", "")) if last else "",
        f"{pending.get('op', '')} (seq {pending['seq']})" if pending else "",
        ref(pending["start_ns"]) if pending else None, frame_text(shown.get("frames") or []))


def _set(values: Any) -> str:
    return str(set(values))


def match(a: Dict[str, Any], b: Dict[str, Any], pg_size: int) -> Optional[Tuple[str, str]]:
    """(kind, message) when entry ``b`` does not match the expected ``a``, else None: torch's
    ``Op.match`` for the types a dump holds."""
    ta, tb = str(a.get("op", "")), str(b.get("op", ""))
    ins, outs = a.get("input_sizes"), a.get("output_sizes")
    if ta in P2P:
        other = "recv" if ta == "send" else "send"
        same = (tb == other and (a.get("src"), a.get("dst")) == (b.get("src"), b.get("dst"))
                and (ins == b.get("output_sizes") if ta == "send" else outs == b.get("input_sizes")))
        return None if same else ("SIZE_OR_SYNTAX_MISMATCH", "")
    if ta != tb:
        return ("COLLECTIVE_TYPE_MISMATCH",
                f"Expected collective type: '{ta}' does not match found collective type: '{tb}'")
    sizes = _size_mismatch(ta, a, b, pg_size)
    if sizes is not None:
        return ("SIZE_OR_SYNTAX_MISMATCH", sizes)
    if _dtype_mismatch(a, b):
        return ("COLLECTIVE_DTYPE_MISMATCH",
                f"Expected dtypes: '{_set(a.get('input_dtypes') or [])}' does not match found dtype: "
                f"'{_set(a.get('output_dtypes') or [])}/{_set(b.get('input_dtypes') or [])}/"
                f"{_set(b.get('output_dtypes') or [])}'")
    if a.get("state") != b.get("state"):
        return ("COLLECTIVE_STATE_MISMATCH",
                f"Expected state: '{a.get('state')}' does not match found state: '{b.get('state')}'")
    return None


def _size_mismatch(ta: str, a: Dict[str, Any], b: Dict[str, Any], pg_size: int) -> Optional[str]:
    """torch's size checks of ``Op.match`` for collectives of one type ``ta``: the message of
    the first that ``b`` fails, else None."""
    ins, outs = a.get("input_sizes"), a.get("output_sizes")
    if ta not in ("all_to_all", "scatter") and ins != b.get("input_sizes"):
        return f"Expected input sizes: '{ins}' does not match found input sizes: '{b.get('input_sizes')}'"
    if ta not in ("all_to_all", "gather") and outs != b.get("output_sizes"):
        return f"Expected output sizes: '{outs}' does not match found output sizes: '{b.get('output_sizes')}'"
    if ta in ("all_reduce", "allreduce_coalesced") and ins != b.get("output_sizes"):
        return f"Expected input sizes: '{ins}' does not match found output sizes: '{b.get('output_sizes')}'"
    numel = _first_numel
    if ta in ("all_gather", "all_gather_base", "all_gather_into_tensor_coalesced") and \
            numel(b.get("output_sizes")) != numel(ins) * pg_size:
        return (f"Found input numel '{numel(b.get('input_sizes'))} * pg size {pg_size}' "
                f"does not match output numel '{numel(b.get('output_sizes'))}'")
    if ta in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced") and \
            numel(b.get("input_sizes")) != numel(outs) * pg_size:
        return (f"Found input numel '{numel(b.get('input_sizes'))}' does not match output "
                f"numel '{numel(b.get('output_sizes'))} * pg size {pg_size}'")
    return None


def _first_numel(sizes: Any) -> int:
    return math.prod(sizes[0]) if isinstance(sizes, list) and sizes and isinstance(sizes[0], list) else 0


def _dtype_mismatch(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    """torch's ``Op.dtype_mismatch``: a's own input and output dtypes, then each against b's."""
    t = a.get("op")
    ai, ao = set(a.get("input_dtypes") or []), set(a.get("output_dtypes") or [])
    bi, bo = set(b.get("input_dtypes") or []), set(b.get("output_dtypes") or [])
    a_in, a_out = _nonempty(a.get("input_sizes")), _nonempty(a.get("output_sizes"))
    b_in, b_out = _nonempty(b.get("input_sizes")), _nonempty(b.get("output_sizes"))
    return bool((t not in ("scatter", "gather", "broadcast") and ai != ao and a_in and a_out)
                or (t not in ("scatter", "broadcast") and ai != bi and a_in and b_in)
                or (t != "gather" and ao != bo and a_out and b_out))


def _nonempty(sizes: Any) -> bool:
    return bool(isinstance(sizes, list) and sizes and sizes[0])
