"""``rref.to_here()`` named in the trace.

torch opens a span of its own around a UserRRef's fetch from its owner
(``RECORD_USER_SCOPE`` in ``UserRRef::toHere``), named ``to_here#(caller)->(owner)`` only
under the legacy autograd profiler; under Kineto the name is empty, and the merged trace
showed an unnamed span. The fetch is a message torch's C++ sends and its owner serves in
C++, past the RPC wrappers (:mod:`tracemerge.capture.rpc`): it has no record, no
``rpc_id`` and no owner's span to draw a flow to. So while a capture is active
``PyRRef.to_here`` notes when it is called, and the writer gives torch's span the name
``to_here#FUNC(caller -> owner)`` (FUNC: the function of the ``rpc.remote`` call that
made the RRef, when this capture issued it) and ``args.rref_rpc_id``, that call's id.
"""

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

from torch._C._distributed_rpc import PyRRef
from torch.distributed.rpc import api
from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT

from tracemerge.capture import recorder


@contextlib.contextmanager
def instrumented() -> Iterator[None]:
    """Within the block, ``rref.to_here()`` notes its span's name for the writer.
    ``PyRRef`` is the class of every RRef (``rpc.remote`` returns it, and ``RRef``
    subclasses it), so the method is swapped on it and put back on exit."""
    original = PyRRef.to_here
    # setattr: the stubs declare a method, which mypy will not let be assigned
    setattr(PyRRef, "to_here", _named(original))
    try:
        yield
    finally:
        setattr(PyRRef, "to_here", original)


def _named(original: Callable) -> Callable:
    def to_here(self: Any, timeout: float = UNSET_RPC_TIMEOUT) -> Any:
        rec = recorder.process.current
        # an owner's to_here() is its local value: torch opens no span
        if rec is not None and api._is_current_rpc_agent_set() and not self.is_owner():
            rpc_id, func = rec.rrefs.get(self, (None, ""))
            me, owner = api._get_current_rpc_agent().get_worker_info().name, self.owner_name()
            args = {"owner": owner} if rpc_id is None else {"rref_rpc_id": rpc_id, "owner": owner}
            # noted before the call: torch's span opens inside it, just after this mark
            rec.add("spans", recorder.Span("", threading.get_native_id(), time.time_ns(), args,
                                           f"to_here#{func}({me} -> {owner})"))
        return original(self, timeout)

    return to_here
