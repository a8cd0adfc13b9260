"""RPC records: a span and a record on each side of every RPC issued or served.

The Kineto profiler records nothing for RPCs, so while a capture is active the caller
sends ``_serve(header, func, args, kwargs)`` instead of ``func``. On the callee that
wrapper opens the ``...#remote`` span around ``func`` (the ops it runs nest under it)
and, if the callee process is capturing too, records when ``func`` started and ended.
The result, exception and timeout of the RPC are those of ``func``: ``_serve`` returns
its value unchanged, so ``rpc.remote`` RRefs hold the real value.

Whether or not the callee is capturing, ``_serve`` notes the callee's side of the call
(start, end, thread, status) in the process's ``recorder.served`` buffer; the caller's
``profile`` fetches its calls' sides from each callee when it writes its file
(:func:`collect_remote_sides`), so a callee that never records still gets its side drawn
and used for alignment. Sides travel apart from the result, which stays ``func``'s own.
"""

import functools
import socket
import threading
import time

import torch
from torch.autograd.profiler import record_function
from torch.distributed import rpc
from torch.distributed.rpc import api, rref_proxy
from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT

from tracemerge.capture import recorder
from tracemerge.capture.identity import boot_id
from tracemerge.capture.patching import swapped

# The function inside rpc_sync's wrapper, which instrumented() swaps (patching.py): the
# capture's own exchanges go out untraced.
_ORIGINAL_RPC_SYNC = getattr(rpc.rpc_sync, "__wrapped__")  # set by torch's own decorator, unknown to its stubs

# What RRef proxies (rref.rpc_sync().m(), ...) send: the method runs on the owner.
_PROXY_INVOKERS = (rref_proxy._local_invoke, rref_proxy._local_invoke_async_execution)

# The record fields the callee needs to write its own record.
_HEADER_KEYS = ("rpc_id", "kind", "func", "name", "caller", "callee", "caller_name", "callee_name")


def instrumented():
    """A context manager under which rpc_sync, rpc_async and remote are traced."""
    return swapped({
        rpc.rpc_sync: functools.partial(_traced_api, "rpc_sync"),
        rpc.rpc_async: functools.partial(_traced_api, "rpc_async"),
        rpc.remote: functools.partial(_traced_api, "remote"),
        rpc.shutdown: _fetching_shutdown,
    })


def _fetching_shutdown(original):
    """rpc.shutdown inside a ``profile`` block (every worker then records until all are
    done): the callee sides of this process's calls are asked for first, while every
    callee still answers (a graceful shutdown waits for all workers), since the file is
    written after it."""
    def shutdown(*args, **kwargs):
        rec = recorder.current
        if rec is not None:
            if rec.on_rpc_end is not None:
                rec.on_rpc_end()
            calls = rec.caller_records()
            fetched = {c["rpc_id"] for side in rec.fetched for c in side.get("calls", ())}
            rec.keep_sides(collect_remote_sides([r for r in calls if r["rpc_id"] not in fetched]))
        return original(*args, **kwargs)

    return shutdown


def _traced_api(kind, original):
    def traced(to, func, args=None, kwargs=None, timeout=UNSET_RPC_TIMEOUT):
        rec = recorder.current
        if rec is None or _is_script(func) or _is_rpc_machinery(func):
            # TorchScript functions cannot be wrapped by a Python function without
            # changing how the callee runs them, so they go out untraced.
            return original(to, func, args, kwargs, timeout)
        return _issue(rec, kind, original, to, func, args or (), kwargs or {}, timeout)

    return traced


def _is_rpc_machinery(func):
    """torch.distributed.rpc's own calls (the barrier of a graceful rpc.shutdown(), which
    may run inside the block) are not the job's RPCs."""
    return getattr(func, "__module__", None) == api.__name__


def _is_script(func):
    return isinstance(getattr(func, "_wrapped_async_rpc_function", func), torch.jit.ScriptFunction)


def _issue(rec, kind, original, to, func, args, kwargs, timeout):
    me = rpc.get_worker_info()
    dst = api._to_worker_info(to)
    func_name = _func_name(func, args)
    record = {
        "rpc_id": rec.next_rpc_id(me.id), "role": "caller", "kind": kind, "func": func_name,
        "name": f"{kind}#{func_name}({me.name} -> {dst.name})",
        "caller": me.id, "callee": dst.id, "caller_name": me.name, "callee_name": dst.name,
        "status": "pending",
    }
    serve = _serve_async if hasattr(func, "_wrapped_async_rpc_function") else _serve
    header = {k: record[k] for k in _HEADER_KEYS}
    with record_function(record["name"]) as rf:
        record["send_ns"] = time.time_ns()
        span = _register(rec, record)
        try:
            result = original(dst, serve, (header, func, args, kwargs), None, timeout)
        except BaseException:
            _complete(record, span, ok=False)
            raise
        if kind == "rpc_sync":
            _complete(record, span, ok=True)
            return result
        fut = result._get_future() if kind == "remote" else result
        # registered just before the span's end: both run on the thread that completes
        # the future (or both here, when it already has), so _on_done sees where it ends
        fut.add_done_callback(functools.partial(_on_done, record, span))
        # The span ends when the future completes, as the legacy RPC profiler did.
        ended = rf._call_end_callbacks_on_future(fut)
    return result if kind == "remote" else ended


def _func_name(func, args):
    builtin = torch.jit._builtins._find_builtin(func)
    if builtin is not None:
        return builtin
    if func in _PROXY_INVOKERS:
        rref, method = args[0], args[1]
        return f"{_rref_type(rref).__qualname__}.{method}"
    return getattr(func, "__qualname__", type(func).__qualname__)


def _rref_type(rref):
    # The proxy fetched the type before sending, so this is the PyRRef's cached answer:
    # a future when the proxy asked without blocking, else the type itself.
    found = rref._get_type(blocking=False)
    return found.value() if isinstance(found, torch._C.Future) else found


def _on_done(record, span, fut):
    _complete(record, span, _succeeded(fut))


def _complete(record, span, ok):
    """Note the end of an RPC. Its span's ``args.async`` says whether it ends on another
    thread than it began on: torch's ``key_averages()`` counts such an event as
    asynchronous (self CPU 0, never a parent or child), and the Kineto trace does not say so."""
    record["complete_ns" if record["role"] == "caller" else "end_ns"] = time.time_ns()
    record["status"] = "ok" if ok else "error"
    span.args["async"] = threading.get_native_id() != span.tid


def _register(rec, record):
    """Keep the record, and its span for the writer to attach rpc_id, role and async to."""
    rec.add("rpcs", record)
    span = recorder.Span(
        name=record["name"] if record["role"] == "caller" else record["name"] + "#remote",
        tid=threading.get_native_id(),
        mark_ns=record["send_ns" if record["role"] == "caller" else "start_ns"],
        args={"rpc_id": record["rpc_id"], "role": record["role"]},
    )
    rec.add("spans", span)
    return span


def _serve(header, func, args, kwargs):
    """Runs on the callee in place of ``func``."""
    return _served_side(header, func, args, kwargs, False)


@rpc.functions.async_execution
def _serve_async(header, func, args, kwargs):
    """``_serve`` for ``async_execution`` functions: the span and record end when the
    returned future completes, not when ``func`` returns it."""
    return _served_side(header, func, args, kwargs, True)


def _served_side(header, func, args, kwargs, is_async):
    """:func:`_run_served` with the callee's side of the call noted for its caller (recorder.served):
    it ends when that returns, or, for async functions, when the returned future completes."""
    side = recorder.served.begin(header)
    try:
        result = _run_served(header, func, args, kwargs, is_async)
    except BaseException:
        recorder.served.end(side, ok=False)
        raise
    if is_async:
        result.add_done_callback(lambda fut: recorder.served.end(side, _succeeded(fut)))
    else:
        recorder.served.end(side, ok=True)
    return result


def _succeeded(fut):
    """Whether a completed future holds a value (not an exception)."""
    try:
        fut.value()
        return True
    except BaseException:
        return False


def collect_remote_sides(records, timeout_s=10.0):
    """The callee sides of this process's calls in ``records``, asked of each callee once
    (the caller's ``profile`` writes them, so the callee need not be recording).

    One ``"clock_rank"`` object per callee (docs/rank-file-format.md): its ``_ns`` times are
    on the callee's clock. A callee that cannot answer gives ``{"clock_rank", "error"}``.
    """
    if not (rpc.is_available() and api._is_current_rpc_agent_set()):
        return []
    wanted = {}
    for r in records:
        if r.get("role") == "caller":
            wanted.setdefault(r["callee_name"], []).append(r["rpc_id"])
    out = []
    for name, ids in wanted.items():
        dst = api._to_worker_info(name)
        try:
            # the unpatched rpc_sync: this exchange is the capture's own, not the job's
            out.append(_ORIGINAL_RPC_SYNC(dst, _take_sides, args=(ids,), timeout=timeout_s))
        except Exception as e:  # a callee gone or too slow: its sides are lost, the caller's file says why
            out.append({"clock_rank": dst.id, "rank": dst.id, "worker_name": dst.name,
                        "error": f"{type(e).__name__}: {e}".splitlines()[0]})
    return out


def _take_sides(rpc_ids):
    """Runs on the callee: its sides of ``rpc_ids``, removed from its buffer."""
    me = rpc.get_worker_info()
    return {"clock_rank": me.id, "rank": me.id, "worker_name": me.name, "hostname": socket.gethostname(),
            "boot_id": boot_id(), "calls": recorder.served.take(rpc_ids)}


def _run_served(header, func, args, kwargs, is_async):
    rec = recorder.current
    if rec is None:
        return func(*args, **kwargs)
    record = dict(header, role="callee", status="pending")
    with record_function(header["name"] + "#remote") as rf:
        record["start_ns"] = time.time_ns()
        span = _register(rec, record)
        try:
            result = func(*args, **kwargs)
        except BaseException:
            _complete(record, span, ok=False)
            raise
        if not is_async:
            _complete(record, span, ok=True)
            return result
        result.add_done_callback(functools.partial(_on_done, record, span))
        return rf._call_end_callbacks_on_future(result)
