"""Collective records: what each rank needs to match one collective across ranks.

gloo traces carry no group, sequence number or size, so every tensor collective issued
while a capture is active is recorded with the group's name and ranks and the sequence
number the group assigned to it, which agree on every rank of the group.
"""

import functools
import inspect
import time
from typing import Any, Callable, ContextManager, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from tracemerge.capture import recorder
from tracemerge.capture.patching import swapped

# op -> the parameter holding this rank's input tensor(s), None when there is no payload
_INPUTS = {
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "reduce": "tensor",
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "gather": "tensor",
    "scatter": "scatter_list",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "barrier": None,
}


def instrumented() -> ContextManager[None]:
    """A context manager under which the collectives of ``_INPUTS`` are recorded."""
    return swapped({
        getattr(dist, op): functools.partial(_traced, op, inspect.signature(getattr(dist, op)))
        for op in _INPUTS
    })


def _traced(op: str, signature: inspect.Signature, original: Callable[..., Any]) -> Callable[..., Any]:
    def traced(*args: Any, **kwargs: Any) -> Any:
        rec = recorder.process.current
        if rec is None or not dist.is_initialized():
            return original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        group = bound.arguments.get("group")
        # Any: torch's stubs lack the C++ binding ProcessGroup._get_sequence_number_for_group
        pg: Any = c10d._get_default_group() if group is None else group
        if c10d._rank_not_in_group(pg):
            return original(*args, **kwargs)
        payload = _INPUTS[op]
        record = {
            "op": op,
            "group": c10d._get_process_group_name(pg),
            "group_ranks": dist.get_process_group_ranks(pg),
            "bytes": 0 if payload is None else _nbytes(bound.arguments.get(payload)),
            # the number it will be given (the group counts one up per collective): the
            # record is kept before issuing, so a rank that never gets out of it (a peer
            # never came) still has it in its journal (capture/journal.py)
            "seq": pg._get_sequence_number_for_group() + 1,
            "start_ns": time.time_ns(),
        }
        rec.add("collectives", record)
        try:
            work = original(*args, **kwargs)
        except Exception as e:
            # how it ended: a peer lost ("Connection closed by peer") names who died, in the post-mortem
            record["error"] = f"{type(e).__name__}: {str(e)[:500]}"
            record["error_at_ns"] = time.time_ns()
            raise
        # Read after issuing: the number this collective was given.
        record["seq"] = pg._get_sequence_number_for_group()
        if bound.arguments.get("async_op"):
            work.get_future().add_done_callback(functools.partial(_on_done, record))
        else:
            record["end_ns"] = time.time_ns()
        return work

    return traced


def _on_done(record: dict, _fut: object) -> None:
    record["end_ns"] = time.time_ns()


def _nbytes(tensors: Optional[Union[torch.Tensor, List[Any], Tuple[Any, ...]]]) -> int:
    if tensors is None:
        return 0
    if isinstance(tensors, (list, tuple)):
        return sum(_nbytes(t) for t in tensors)
    return tensors.numel() * tensors.element_size()
