"""What ``tracemerge offsets`` prints: the clock model per rank, as a table or JSON."""

import orjson

FIELDS = ("rank", "method", "offset_ns", "drift_ppm", "anchor_ns", "error_bound_ns", "samples", "peers")


def offsets_document(alignment):
    """``{"reference": R, "ranks": [{rank, method, offset_ns, …, peers}, …]}`` (docs/alignment.md)."""
    ranks = []
    for rank in sorted(alignment.clocks):
        row = alignment.clocks[rank].as_dict()
        ranks.append({k: row[k] for k in FIELDS})
    return {"reference": alignment.reference, "ranks": ranks}


def offsets_json(alignment):
    return orjson.dumps(offsets_document(alignment), option=orjson.OPT_INDENT_2).decode()


def offsets_table(alignment):
    rows = [("rank", "method", "offset_ns", "drift_ppm", "anchor_ns", "error_bound_ns", "samples", "peers")]
    for r in offsets_document(alignment)["ranks"]:
        rows.append((str(r["rank"]), r["method"], str(r["offset_ns"]), f"{r['drift_ppm']:.4f}", str(r["anchor_ns"]),
                     "-" if r["error_bound_ns"] is None else str(r["error_bound_ns"]), str(r["samples"]),
                     ",".join(map(str, r["peers"])) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)


def clock_notes(alignment):
    """One line per rank whose clock came with a caveat (fallback to wall, unusable link)."""
    return [f"rank {r}: {c.note}" for r, c in sorted(alignment.clocks.items()) if c.note]


def causality_line(report):
    """One line: violations found after alignment and, when enforced, what was left and moved."""
    if not report:
        return "causality not checked"
    before, checked = report["violations_before"], report["checked"]
    line = (f"causality: {before['total']} violations ({before['rpc']} of {checked['rpc']} rpcs, "
            f"{before['collective']} of {checked['collective']} collectives) after alignment")
    if report.get("enforced") and before["total"]:
        line += (f"; enforced: {report['violations_after']['total']} left, {report['points_moved']} points moved, "
                 f"max {report['moved_ns_max'] / 1000:.3f} µs, total {report['moved_ns_total'] / 1000:.3f} µs")
    elif before["total"]:
        line += "; --enforce-causality removes them"
    return line
