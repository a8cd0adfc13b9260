"""The report sections' own per-rank products: each a function of one rank's
:class:`~tracemerge.place.rank_pass.RankView`, named by its section's ``per_rank``
(:mod:`tracemerge.report.sections`) and run by the per-rank pass in the worker that holds
the rank. The op tree and the correlations are built once per rank, for every product that
reads them (``RankView.shared``)."""

from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from tracemerge.algorithms.nesting import unfinished
from tracemerge.errors import TracemergeError
from tracemerge.inputs.admit import is_merged_block
from tracemerge.place.rank_pass import RankView
from tracemerge.place.served import Served, served_events
from tracemerge.report.gpu import GpuRank, gpu_rank
from tracemerge.report.keyavg import Correlations, KeyAverage, OpTree, correlations, key_averages, op_tree
from tracemerge.report.rpcstats import server_threads


def _tree(view: RankView) -> OpTree:
    return view.shared("op_tree", op_tree)


def _links(view: RankView) -> Correlations:
    return view.shared("correlations", correlations)


def _served(view: RankView) -> Dict[int, Served]:
    """{event index: Served} of the rank's ops that served paired builtins (place/served.py)."""
    return view.shared("served", lambda trace: served_events(trace, _tree(view).index, view.ask.served or {}))


def key_average_rows(view: RankView) -> List[KeyAverage]:
    """The rank's key-average partials (``node_id`` its rank), grouped by (name, rank) later."""
    if is_merged_block(view.trace.tracemerge):  # the rows would count every rank of it again
        raise TracemergeError(f"{view.trace.path}: a merged trace; report on it alone, or on the rank files")
    trace = view.trace
    tree = _tree(view)
    # the ops that served paired builtins count as their calls' callee spans, as a wrapped call's do
    served = {i: call.span for i, call in _served(view).items()}
    return key_averages(trace, np.full(len(trace.pids), view.rank, dtype=np.int64), view.options.remote_ops,
                        tree, _links(view), served)


def open_at_stop(view: RankView) -> int:
    """How many of the rank's spans were still open when its profiler stopped (a note)."""
    return int(unfinished(view.trace).sum())


def gpu_time(view: RankView) -> Optional[GpuRank]:
    """The rank's GPU time (None: no device events, or not asked for)."""
    if not view.options.gpu:
        return None
    return gpu_rank(view.trace, view.rank, comm_kernels=view.options.comm_kernels, links=_links(view))


def rpc_server_threads(view: RankView) -> int:
    """How many RPC server threads the rank's events show (the callee load): those of its
    callee spans, the ops that served paired builtins among them."""
    return server_threads(view.trace, served=list(_served(view)))


def top_spans(tree: OpTree, to_ref: Callable[[np.ndarray], np.ndarray],
              rows: Union[bool, np.ndarray] = True) -> Tuple[np.ndarray, np.ndarray]:
    """(start, end) reference-clock ns of the top-level host ops of an op tree (of its
    ``rows``): what keeps a thread busy. Asynchronous spans (calls in flight, gloo work)
    keep no thread busy: they are left out."""
    top = rows & tree.kept & (tree.parent < 0) & ~tree.is_async
    return to_ref(tree.start[top]), to_ref(tree.end[top])


def busy_spans(view: RankView) -> Tuple[np.ndarray, np.ndarray]:
    """The rank's :func:`top_spans` on the reference clock (the busy timeline)."""
    return top_spans(_tree(view), view.clock.to_reference)
