"""What ``tracemerge offsets`` prints: the clock model per rank, as a table or JSON."""

from typing import Any, Dict, Iterable, List, Optional

import orjson

from tracemerge.clocks.methods import machine_of
from tracemerge.files import names

FIELDS = ("rank", "method", "offset_ns", "drift_ppm", "anchor_ns", "error_bound_ns", "samples", "peers")


def offsets_document(alignment: Any, infos: Iterable[Any] = ()) -> Dict[str, Any]:
    """``{"reference": R, "ranks": [{rank, method, offset_ns, …, peers, machine, hostname}, …],
    "machines": [{machine, hostname, boot_id, ranks}, …]}`` (docs/alignment.md). A machine is
    one boot_id (one wall clock); a rank without one is a machine of its own."""
    found = machine_list(infos)
    where = {r: m for m in found for r in m["ranks"]}
    ranks = []
    for rank in sorted(alignment.clocks):
        row = alignment.clocks[rank].as_dict()
        m = where.get(rank)
        ranks.append({**{k: row[k] for k in FIELDS},
                      **({"machine": m["machine"], "hostname": m["hostname"]} if m else {})})
    return {"reference": alignment.reference, "ranks": ranks, **({"machines": found} if found else {})}


def machine_list(infos: Iterable[Any]) -> List[Dict[str, Any]]:
    """The machines of ``infos`` (RankInfo), numbered from 0 in the order of their lowest rank."""
    groups: Dict[Any, List[Any]] = {}
    for info in sorted(infos, key=lambda i: i.rank):
        groups.setdefault(machine_of(info), []).append(info)
    return [{"machine": n, "hostname": group[0].hostname, "boot_id": group[0].boot_id,
             "ranks": [i.rank for i in group]} for n, group in enumerate(groups.values())]


def offsets_json(alignment: Any, infos: Iterable[Any] = ()) -> str:
    return names.dumps(offsets_document(alignment, infos), option=orjson.OPT_INDENT_2).decode()


def offsets_table(alignment: Any, infos: Iterable[Any] = ()) -> str:
    doc = offsets_document(alignment, infos)
    rows = [("rank", "method", "offset_ns", "drift_ppm", "anchor_ns", "error_bound_ns", "samples", "peers", "machine")]
    for r in doc["ranks"]:
        rows.append((str(r["rank"]), r["method"], str(r["offset_ns"]), f"{r['drift_ppm']:.4f}", str(r["anchor_ns"]),
                     "-" if r["error_bound_ns"] is None else str(r["error_bound_ns"]), str(r["samples"]),
                     ",".join(map(str, r["peers"])) or "-", str(r.get("machine", "-"))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    for m in doc.get("machines", []):
        boot = f"boot_id {m['boot_id'][:8]}…" if m["boot_id"] else "no boot_id"
        lines.append(f"machine {m['machine']}: {m['hostname']} ({boot}): "
                     f"rank{'s' if len(m['ranks']) > 1 else ''} {', '.join(map(str, m['ranks']))}")
    return "\n".join(lines)


def clock_notes(alignment: Any) -> List[str]:
    """One line per rank whose clock came with a caveat (fallback to wall, unusable link)."""
    return [f"rank {r}: {c.note}" for r, c in sorted(alignment.clocks.items()) if c.note]


def causality_line(report: Optional[Dict[str, Any]], method: Optional[str] = None) -> str:
    """One line: violations found after alignment (by ``method``) and, when enforced, what was
    left and moved; without enforcement, the way out that fits the method."""
    if not report:
        return "causality not checked"
    before, checked = report["violations_before"], report["checked"]
    spans = (f"{before['spans']} of {checked['spans']} drawn span pairs, " if "spans" in checked else "")
    line = (f"causality: {before['total']} violations ({before['rpc']} of {checked['rpc']} rpcs, {spans}"
            f"{before['collective']} of {checked['collective']} collectives) after alignment")
    if report.get("enforced") and before["total"]:
        after = report["violations_after"]["total"]
        line += (f"; enforced: {after} left, {len(report['ranks_moved'])} ranks moved as a whole (durations "
                 f"kept), max {report['moved_ns_max'] / 1000:.3f} µs, total {report['moved_ns_total'] / 1000:.3f} µs")
        if after:
            line += " (no constant shift of a rank removes the rest: a clock that drifts; try --align auto)"
    elif before["total"]:
        line += ("; --align auto fits offsets and drift to the exchanges" if method in ("wall", "start", "none")
                 else "; --enforce-causality moves the ranks involved as a whole")
    return line
