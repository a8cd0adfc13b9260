"""The ops that served paired builtins, as their calls' callee spans.

A builtin sent as itself (``rpc_async(w, torch.add, ...)``) leaves no ``#remote`` span on
its callee: the op that ran it is all there is, and the job pairs that op with the call
(:mod:`tracemerge.correlate.native_calls`, ``remote_rpcs`` of ``source: "paired"``).
Wherever the job is analysed that op is the call's callee span, as a wrapped call's
``#remote`` span is: combine draws the span (:mod:`tracemerge.place.remote_spans`), the
analyses' timelines take the op as the served call, and the key averages count it under
the span's name. This module says which ops those are (:func:`served_spans`, from the
records, once per job), which events of a rank's trace (:func:`served_events`, in the
worker that holds the rank), and the span's name (:func:`callee_span_name`), one for all.
"""

from typing import Any, Dict, Iterable, Mapping, NamedTuple, Tuple

import numpy as np

from tracemerge.model import RankTrace

REMOTE_SUFFIX = "#remote"


class Served(NamedTuple):
    """A paired builtin, as its callee rank sees it."""

    rpc_id: str
    span: str   # the callee span's name: the call's name plus ``#remote``


# {(tid as the trace spells it, op start ns on the callee's clock): the call it served}
ServedOps = Mapping[Tuple[Any, int], Served]


def callee_span_name(rec: Mapping[str, Any]) -> str:
    """The ``#remote`` name of a call's callee span: its name, else its function, else its
    rpc_id (a record may lack a name: the span is still drawn and counted)."""
    return f"{rec.get('name') or rec.get('func') or rec['rpc_id']}{REMOTE_SUFFIX}"


def served_spans(infos: Iterable[Any]) -> Dict[int, Dict[Tuple[Any, int], Served]]:
    """{callee rank: {(tid, op start ns): Served}} of every builtin the job paired with the
    op that served it (the callers' ``remote_rpcs`` of ``source: "paired"``)."""
    out: Dict[int, Dict[Tuple[Any, int], Served]] = {}
    for info in infos:
        for r in info.remote_rpcs:
            if r.get("source") == "paired":
                out.setdefault(r["callee"], {})[(r["tid"], r.get("op_start_ns", r["start_ns"]))] = \
                    Served(r["rpc_id"], callee_span_name(r))
    return out


def served_events(trace: RankTrace, idx: np.ndarray, served: ServedOps) -> Dict[int, Served]:
    """{event index: Served} of the events ``idx`` (a rank's host ops) that ``served`` names,
    by thread and start: one bisection per paired call; an event serves one call at most."""
    found: Dict[int, Served] = {}
    if not served or not len(idx):
        return found
    order = idx[np.argsort(trace.ts[idx], kind="stable")]
    starts = trace.ts[order]
    for (tid, start), call in served.items():
        at = int(np.searchsorted(starts, start))
        while at < len(order) and starts[at] == start:
            i = int(order[at])
            if i not in found and trace.tids[int(trace.tid[i])] == tid:
                found[i] = call
                break
            at += 1
    return found
