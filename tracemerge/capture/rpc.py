"""RPC records: a span and a record on each side of every RPC issued or served.

The Kineto profiler records nothing for RPCs, so while a capture is active the caller
sends ``_serve(header, func, args, kwargs)`` instead of ``func``. On the callee that
wrapper opens the ``...#remote`` span around ``func`` (the ops it runs nest under it)
and, if the callee process is capturing too, records when ``func`` started and ended.
The result, exception and timeout of the RPC are those of ``func``: ``_serve`` returns
its value unchanged, so ``rpc.remote`` RRefs hold the real value.

Whether or not the callee is capturing, ``_serve`` notes the callee's side of the call
(start, end, thread, status) in the process's ``recorder.process.served`` buffer; the caller's
``profile`` fetches its calls' sides from each callee when it writes its file
(:func:`collect_remote_sides`), so a callee that never records still gets its side drawn
and used for alignment. Sides travel apart from the result, which stays ``func``'s own.

Builtins (``torch.add``) are the exception when the callee records its RPC server
threads: the wrapper would move them off the callee's C++ path onto the Python one, which
costs more than the rest of the capture together. So they go out as themselves to a
callee that said it records those threads (``recorder.Peers``): the callee's writer keeps
the outermost ops of its server threads in its block (``native_sides``), and ``combine``
pairs each call with the op that served it (``tracemerge.correlate.native_calls``), from
the caller's record and span end and the callee's ops. TorchScript functions always go out as themselves, untraced.
"""

import functools
import socket
import threading
import time
from typing import Any, Callable, ContextManager, Optional

import torch
from torch.distributed import rpc
from torch.distributed.rpc import api, rref_proxy
from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT

from tracemerge.capture import recorder
from tracemerge.capture.identity import boot_id
from tracemerge.capture.patching import swapped

# The function inside rpc_sync's wrapper, which instrumented() swaps (patching.py): the
# capture's own exchanges go out untraced.
# (__wrapped__ is set by torch's own decorator, unknown to its stubs)
_ORIGINAL_RPC_SYNC: Callable = getattr(rpc.rpc_sync, "__wrapped__")
_ORIGINAL_RPC_ASYNC: Callable = getattr(rpc.rpc_async, "__wrapped__")

# How long the capture's own questions may take.
_HANDSHAKE_TIMEOUT_S = 10.0
# How long a stopping callee waits for the builtins a caller sent it natively (less than
# the question's timeout, so that the answer comes), and how often the caller looks.
_DRAIN_S = 8.0
_DRAIN_POLL_S = 0.001

# Spans opened without the dispatcher (record_function's ops cost 4x more per span); a
# handle ends on any thread, so an async span ends where its future completes. Both give
# the same user_annotation event as record_function.
_span_enter = torch._C._autograd._record_function_with_args_enter
_span_exit = torch._C._autograd._record_function_with_args_exit

# Ends a span in C++ when a future completes (what record_function's
# _call_end_callbacks_on_future calls): no Python runs on the RPC agent's thread. Called
# through the overload's C++ function (``_op``): the OpOverload's Python __call__ first
# walks the arguments for fake script objects (export tracing): 1-5 us of the call here.
_END_SPAN_OP = torch.ops.profiler._call_end_callbacks_on_jit_fut._RecordFunction
_end_span_on = getattr(_END_SPAN_OP, "_op", _END_SPAN_OP)
_no_torch_function = torch._C.DisableTorchFunctionSubclass
_time_ns = time.time_ns
_tid = threading.get_native_id

# What RRef proxies (rref.rpc_sync().m(), ...) send: the method runs on the owner.
_PROXY_INVOKERS = (rref_proxy._local_invoke, rref_proxy._local_invoke_async_execution)

_RPC_ID, _NAME = recorder.HEADER_KEYS.index("rpc_id"), recorder.HEADER_KEYS.index("name")

# rec.routes has no route for a call yet (None there: it goes untraced)
_UNKNOWN = object()
# rec.routes' entry for an RRef proxy's invoker: its routes are kept per method and type
_PROXY = object()


def instrumented() -> ContextManager[None]:
    """A context manager under which rpc_sync, rpc_async and remote are traced."""
    return swapped({
        rpc.rpc_sync: functools.partial(_traced_api, "rpc_sync"),
        rpc.rpc_async: functools.partial(_traced_api, "rpc_async"),
        rpc.remote: functools.partial(_traced_api, "remote"),
        rpc.shutdown: _fetching_shutdown,
    })


def _fetching_shutdown(original: Callable) -> Callable:
    """rpc.shutdown inside a ``profile`` block (every worker then records until all are
    done): the callee sides of this process's calls are asked for first, while every
    callee still answers (a graceful shutdown waits for all workers), since the file is
    written after it."""
    def shutdown(*args: Any, **kwargs: Any) -> Any:
        rec = recorder.process.current
        if rec is not None:
            if rec.on_rpc_end is not None:
                rec.on_rpc_end()
            end_samples(rec)
            calls = rec.caller_records()
            fetched = {c["rpc_id"] for side in rec.fetched for c in side.get("calls", ())}
            rec.keep_sides(collect_remote_sides([r for r in calls if r["rpc_id"] not in fetched]))
            rec.routes.clear()  # kept per agent: an init_rpc after this one makes another
        return original(*args, **kwargs)

    return shutdown


def _traced_api(kind: str, original: Callable) -> Callable:
    def traced(to: Any, func: Callable, args: Optional[tuple] = None, kwargs: Optional[dict] = None,
               timeout: float = UNSET_RPC_TIMEOUT) -> Any:
        rec = recorder.process.current
        if rec is None:
            return original(to, func, args, kwargs, timeout)
        try:  # a function called again to the same callee: how, worked out at its first call
            route = rec.routes.get((kind, func, to), _UNKNOWN)
        except TypeError:  # unhashable
            route = _UNKNOWN
        if route is _PROXY:
            route = _proxy_route(rec, kind, func, to, args)
        elif route is _UNKNOWN:  # not seen yet (under this agent), or unhashable
            route = _route(rec, kind, func, to, args)
        if route is None:
            # TorchScript functions cannot be wrapped by a Python function without
            # changing how the callee runs them, so they go out untraced; without RPC
            # up, torch says so.
            return original(to, func, args, kwargs, timeout)
        return _issue(rec, kind, original, route, func, args or (), kwargs or {}, timeout)

    return traced


def _is_rpc_machinery(func: Callable) -> bool:
    """torch.distributed.rpc's own calls (the barrier of a graceful rpc.shutdown(), which
    may run inside the block) are not the job's RPCs."""
    return getattr(func, "__module__", None) == api.__name__


def _is_script(func: Callable) -> bool:
    return isinstance(getattr(func, "_wrapped_async_rpc_function", func), torch.jit.ScriptFunction)


def _route(rec: recorder.Recorder, kind: str, func: Callable, to: Any, args: Optional[tuple]) -> Optional[tuple]:
    """How a call of ``func`` to ``to`` goes out, or None when it goes untraced:
    (callee WorkerInfo, builtin name or None, the header without its rpc_id, the wrapper
    it goes in when not sent as itself). Worked out at the first call of ``func`` to
    ``to`` and kept in ``rec.routes`` for the next (cleared when RPC shuts down inside the
    block, so a new agent's workers are read again); an RRef proxy's are kept by method and
    type too (:func:`_proxy_route`), since its name is its RRef's type's."""
    if not api._is_current_rpc_agent_set():
        return None  # torch raises its own error
    if _is_script(func) or _is_rpc_machinery(func):
        route = None
    else:
        me, dst = _worker_infos(rec, to)
        builtin = torch.jit._builtins._find_builtin(func)
        func_name = builtin if builtin is not None else _func_name(func, args or ())
        name = f"{kind}#{func_name}({me.name} -> {dst.name})"
        wrapper = _serve_async if hasattr(func, "_wrapped_async_rpc_function") else _serve
        route = (dst, builtin, (kind, func_name, name, me.id, dst.id, me.name, dst.name), wrapper)  # HEADER_KEYS[1:]
        if func in _PROXY_INVOKERS:
            _keep(rec, (kind, func, to), _PROXY)
            return route
    _keep(rec, (kind, func, to), route)
    return route


def _keep(rec: recorder.Recorder, key: tuple, route: Any) -> None:
    try:
        rec.routes[key] = route
    except TypeError:  # an unhashable callable or callee: worked out every time
        pass


def _proxy_route(rec: recorder.Recorder, kind: str, func: Callable, to: Any, args: Optional[tuple]) -> Optional[tuple]:
    """An RRef proxy's route, kept by its method and its RRef's type (the proxy fetched the
    type before sending: the RRef's cached answer, a few us where working the route out
    again took ~8 us of each proxy call)."""
    if not args:  # not a proxy's call: torch's own check of it raises
        return _route(rec, kind, func, to, args)
    key = (kind, func, to, args[1], _rref_type(args[0]))
    try:
        route = rec.routes.get(key, _UNKNOWN)
    except TypeError:  # an unhashable method or type
        return _route(rec, kind, func, to, args)
    if route is _UNKNOWN:
        route = _route(rec, kind, func, to, args)
        _keep(rec, key, route)
    return route


def _issue(rec: recorder.Recorder, kind: str, original: Callable, route: tuple, func: Callable,
           args: tuple, kwargs: dict, timeout: float) -> Any:
    dst, builtin, tail, wrapper = route
    header = (rec.next_rpc_id(tail[3]),) + tail  # HEADER_KEYS
    # the call, as the list recorder.issued_record reads (C_*): one allocation here
    call = [header, False, 0, _tid(), None, "pending", None, False, None, None]
    if not rec.traced and rec.unsettled:
        # trace=False: the calls ended since are settled here, before this call is
        # counted, since when they were seen done is the bound of their end. With the
        # profiler their ends are their spans', and their statuses are read when the
        # journal flushes or the file is written, not on a call's path.
        rec.settle()
    native = False
    if builtin is not None and not rec.wrap_builtins:
        # Builtins stay on the callee's C++ path when the callee records its server
        # threads (recorder.Peers): combine pairs each with its op there. Else they go
        # wrapped, like Python functions.
        way = recorder.process.peers.route(tail[4])
        if way is None:
            _ask_admission(rec, tail[3], dst)
            way = recorder.process.peers.route(tail[4])
        native = bool(way) or rec.builtins_always_native
        if way:
            _maybe_sample(rec, dst)
    call[recorder.C_NATIVE] = native
    # no span without a profiler (trace=False): nothing would record it
    handle = _span_enter(tail[2]) if rec.traced else None
    # an rpc_async or remote call is settled lazily: with the profiler its span ends in
    # C++ (below) and its end is read off the span; without, it is bounded by when
    # it was seen done. No Python runs when its future completes.
    call[recorder.C_LAZY] = handle is not None and kind != "rpc_sync"
    call[recorder.C_SEND] = _time_ns()
    rec.add_call(call)
    if native and not rec.builtins_always_native and not recorder.process.peers.admits(tail[4]):
        # The callee stopped admitting since the route was read. Its ``_revoke`` waits
        # for the native calls it finds added, so a call added before the revoke is
        # waited for, and one whose check comes after it goes wrapped: none reaches the
        # callee once its profiler has stopped.
        native = call[recorder.C_NATIVE] = False
    if native:
        if rec.shapes:
            call[recorder.C_SHAPES] = [list(a.shape) if isinstance(a, torch.Tensor) else [] for a in args]
        target, payload, kw = func, args, kwargs
    else:
        target, payload, kw = wrapper, (header, func, args, kwargs), None
    try:
        result = original(dst, target, payload, kw, timeout)
    except BaseException:
        _end(call, handle, False)
        raise
    if kind == "rpc_sync":
        _end(call, handle, True)
        return result
    if kind == "remote":
        rec.rrefs[result] = (header[0], tail[1])   # names the RRef's to_here() (capture/rref.py)
        fut = result._get_future()
    else:
        fut = result
    if handle is None:
        rec.unsettled.append((call, fut))
        return result
    with _no_torch_function():  # what record_function does: cheaper dispatch
        ended = _end_span_on(handle, fut)
    # Where the span ended (asynchronous: on another thread, as torch's key_averages()
    # counts it), as far as this thread can tell: the end has not run yet once attached.
    # A race either way (a future that completes during the ~10 us of attaching ends here,
    # one that completes just after may end elsewhere before this check), so the writer
    # takes the profiler's own record of the span's threads where it has one
    # (session.ended_elsewhere); this guess stands only where it has none.
    call[recorder.C_ASYNC] = not ended.done()
    rec.unsettled.append((call, fut))
    # rpc_async hands back the future that completes after the span ended, as torch's
    # profiled rpc_async did; a remote() RRef stays the job's own. The call is settled
    # later (``Recorder.unsettled``) and its end is the span's, read when the file is
    # written: exact, for every call, whatever else is in flight (combine pairs a native
    # builtin with its callee's op from it).
    return result if kind == "remote" else ended


def _worker_infos(rec: recorder.Recorder, to: Any) -> tuple:
    """(this worker, the callee) as WorkerInfo, read from the agent once per capture and
    agent (init_rpc may run again inside the block) and callee name."""
    agent = api._get_current_rpc_agent()
    if agent is not rec.agent:
        rec.agent, rec.me, rec.workers = agent, agent.get_worker_info(), {}
        rec.routes.clear()
    if not isinstance(to, str):
        return rec.me, api._to_worker_info(to)
    dst = rec.workers.get(to)
    if dst is None:
        dst = rec.workers[to] = api._to_worker_info(to)
    return rec.me, dst


def _func_name(func: Callable, args: tuple) -> str:
    """The name of a function that is not a builtin (builtins go by their schema name)."""
    if func in _PROXY_INVOKERS:
        rref, method = args[0], args[1]
        return f"{_rref_type(rref).__qualname__}.{method}"
    return getattr(func, "__qualname__", type(func).__qualname__)


def _rref_type(rref: Any) -> type:
    # The proxy fetched the type before sending, so this is the PyRRef's cached answer:
    # a future when the proxy asked without blocking, else the type itself.
    found = rref._get_type(blocking=False)
    return found.value() if isinstance(found, torch._C.Future) else found


def _end(call: list, handle: Any, ok: bool) -> None:
    """Note the end of an issued call and close its span (after: it then covers the noted
    end). The span's ``args.async``
    says whether it ends on another thread than it began on: torch's ``key_averages()``
    counts such an event as asynchronous (self CPU 0, never a parent or child), and the
    Kineto trace does not say so."""
    call[recorder.C_COMPLETE] = _time_ns()
    call[recorder.C_STATUS] = "ok" if ok else "error"
    call[recorder.C_ASYNC] = False  # noted on the thread that issued the call
    if handle is not None:
        _span_exit(handle)


def _serve(header: tuple, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Runs on the callee in place of ``func``."""
    return _served_side(header, func, args, kwargs, False)


@rpc.functions.async_execution
def _serve_async(header: tuple, func: Callable, args: tuple, kwargs: dict) -> Any:
    """``_serve`` for ``async_execution`` functions: the span and record end when the
    returned future completes, not when ``func`` returns it."""
    return _served_side(header, func, args, kwargs, True)


def _served_side(header: tuple, func: Callable, args: tuple, kwargs: dict, is_async: bool) -> Any:
    """Run ``func`` with the callee's side of the call noted for its caller (recorder.process.served)
    and, when this process's profiler runs, its ``#remote`` span (its record is made from the
    side when taken): they end when ``func`` returns, or, for async functions, when the
    returned future completes."""
    rec = recorder.process.current
    if rec is None:
        handle = None
        side = recorder.process.served.begin(header[_RPC_ID])
    else:
        # the span only with this process's profiler, as on the caller's side: under
        # trace=False nothing records it, and making its handle cost ~25 us of each served
        # call on a server thread just woken (its code and data cold in the caches)
        handle = _span_enter(header[_NAME] + "#remote") if rec.traced else None
        side = recorder.process.served.begin(header[_RPC_ID])
        rec.add_served(header, side)
    try:
        result = func(*args, **kwargs)
    except BaseException:
        _served_end(side, handle, False)
        raise
    if not is_async:
        _served_end(side, handle, True)
        return result
    if result.done():
        # completed already (the function finished its work before returning): noted
        # now, on this thread, as a callback added now would be, without one
        _served_end(side, handle, recorder.succeeded(result), True)
        return result
    # No Python runs when the job's future completes. With the profiler, the span ends in
    # C++ then, attached before the RPC server adds the callback that sends the response
    # (a future runs its callbacks in the order added), and its end is read off the span
    # when the file is written; the status is read off the future when the side is read.
    # Without (this process not capturing, or trace=False: no span), when the side was
    # seen done bounds its end (``end_by_ns``). The job's future goes back as it is.
    in_span = handle is not None
    if in_span:
        with _no_torch_function():
            _end_span_on(handle, result)
    recorder.process.served.later(side, result, in_span)
    return result


def _served_end(side: dict, handle: Any, ok: bool, is_async: bool = False) -> None:
    recorder.process.served.end(side, ok, is_async)
    if handle is not None:
        _span_exit(handle)  # after the noted end, which the span then covers


def collect_remote_sides(records: list, timeout_s: float = 10.0) -> list:
    """The callee sides of this process's calls in ``records``, asked of each callee once
    (the caller's ``profile`` writes them, so the callee need not be recording).

    One ``"clock_rank"`` object per callee (docs/rank-file-format.md): its ``_ns`` times are
    on the callee's clock. A callee that cannot answer gives ``{"clock_rank", "error"}``.
    """
    if not (rpc.is_available() and api._is_current_rpc_agent_set()):
        return []
    wanted: dict = {}
    for r in records:
        # a builtin sent natively has its side in the callee's own file, not in its notes
        if r.get("role") == "caller" and not r.get("native"):
            wanted.setdefault(r["callee_name"], []).append(r["rpc_id"])
    out: list = []
    for name, ids in wanted.items():
        dst = api._to_worker_info(name)
        try:
            # the unpatched rpc_sync: this exchange is the capture's own, not the job's
            out.append(_ORIGINAL_RPC_SYNC(dst, _take_sides, args=(ids,), timeout=timeout_s))
        except Exception as e:  # a callee gone or too slow: its sides are lost, the caller's file says why
            out.append({"clock_rank": dst.id, "rank": dst.id, "worker_name": dst.name,
                        "error": f"{type(e).__name__}: {e}".splitlines()[0]})
    return out


def _take_sides(rpc_ids: list) -> dict:
    """Runs on the callee: its sides of ``rpc_ids``, removed from its buffer."""
    me = rpc.get_worker_info()
    return {"clock_rank": me.id, "rank": me.id, "worker_name": me.name, "hostname": socket.gethostname(),
            "boot_id": boot_id(), "calls": recorder.process.served.take(rpc_ids)}


# ---------------------------------------------------------------- builtins sent natively

def _ask_admission(rec: recorder.Recorder, me: int, dst: Any) -> None:
    """Ask ``dst`` whether it records the ops of its RPC server threads (recorder.Peers):
    once, at the first builtin to it (again after a no, now and then), one round trip
    waited for, so that the calls that follow take one path. Its answer carries a reading
    of its clock, kept with the round trip's ends (the block's ``native_callees``): combine
    places the calls on the callee's clock with it when the two do not share one."""
    try:
        asked = time.time_ns()
        token, read_ns, their_boot = _ORIGINAL_RPC_SYNC(dst, _admit, args=(me,), timeout=_HANDSHAKE_TIMEOUT_S)
        answered = time.time_ns()
    except Exception:  # e.g. the callee has no tracemerge (or an older one): builtins to it go wrapped
        return
    if token is not None:
        rec.add("native_callees", {"callee": dst.id, "asked_ns": asked, "answered_ns": answered,
                                   "answer": {"clock_rank": dst.id, "boot_id": their_boot, "read_ns": read_ns}})
    recorder.process.peers.answer(dst.id, token)


def _maybe_sample(rec: recorder.Recorder, dst: Any) -> None:
    """A clock sample of ``dst`` while builtins flow to it natively: none at the first
    call (the admission's pipe may have been cold: its reading is only a prior), then at
    the next call and at most one every SAMPLE_EVERY_S after it (one dict lookup and a
    clock read on a call's path otherwise)."""
    now = time.monotonic()
    due = rec.clock_due.get(dst.id)
    if due is None:
        rec.clock_due[dst.id] = now
    elif now >= due:
        rec.clock_due[dst.id] = now + SAMPLE_EVERY_S
        sample_clock(rec, dst, wait=False)


# At most one clock sample of a callee a second while builtins flow to it.
SAMPLE_EVERY_S = 1.0


def sample_clock(rec: recorder.Recorder, dst: Any, wait: bool) -> None:
    """An NTP-style sample of ``dst``'s clock on the warm pipe: asked, read there, answered,
    kept like the admission's reading (the block's ``native_callees``, ``"sample":
    true``); combine takes, for each call, the reading whose round trip bounds its offset
    tightest there. ``wait``: block until the answer (the block's end); else the answer is
    noted when it comes, on the RPC agent's thread."""
    try:
        asked = _time_ns()
        fut = _ORIGINAL_RPC_ASYNC(dst, _clock_reading, timeout=_HANDSHAKE_TIMEOUT_S)
    except Exception:  # a callee gone: no sample
        return

    def answered(f: Any) -> None:
        done = _time_ns()
        try:
            read_ns, their_boot = f.value()
        except Exception:
            return
        rec.add("native_callees", {"callee": dst.id, "asked_ns": asked, "answered_ns": done, "sample": True,
                                   "answer": {"clock_rank": dst.id, "boot_id": their_boot, "read_ns": read_ns}})

    if wait:
        try:
            fut.wait()
        except Exception:
            return
        answered(fut)
    else:
        fut.add_done_callback(answered)


def end_samples(rec: recorder.Recorder) -> None:
    """One clock sample of every callee builtins went to natively, at the block's end
    (while every worker still answers): the last of the calls then lies between two."""
    if not rec.clock_due or not (rpc.is_available() and api._is_current_rpc_agent_set()):
        return
    for callee in sorted(rec.clock_due):
        try:
            dst = api._to_worker_info(callee)
        except Exception:
            continue
        sample_clock(rec, dst, wait=True)


def _clock_reading() -> tuple:
    """Runs on the callee: its clock and boot id (a clock sample's answer)."""
    return time.time_ns(), boot_id()


def _admit(caller: int) -> tuple:
    """Runs on the callee: (its capture's token if builtins may come natively, else None;
    its clock; its boot id)."""
    rec = recorder.process.current
    token = None if rec is None else rec.admit(caller)
    return token, time.time_ns(), boot_id()


@rpc.functions.async_execution
def _revoke(callee: int, token: str) -> Any:
    """Runs on a caller: ``callee``'s capture stops; builtins to it go wrapped from now on.
    Answers once the calls this process sent it natively have ended (at most _DRAIN_S), so
    that the callee, which waits for the answer, records until they were served: one
    still in flight would be served after its profiler stopped (no op in its file), or
    cut there (an op that seems to end at the stop). Asynchronous, so that no RPC server
    thread of this process waits: their answers may need one."""
    recorder.process.peers.revoke(callee, token)
    answered: Any = torch.futures.Future()
    rec = recorder.process.current
    pending = [] if rec is None else rec.native_in_flight(callee)
    if not pending:
        answered.set_result(None)
    else:
        threading.Thread(target=_answer_when_ended, args=(rec, pending, answered), daemon=True,
                         name="tracemerge-revoke").start()
    return answered


def _answer_when_ended(rec: recorder.Recorder, pending: list, answered: Any) -> None:
    # an rpc_async's or remote's status is set when it is settled, an rpc_sync's when it
    # returns: polled, since no Python runs when their futures complete (_issue)
    deadline = time.monotonic() + _DRAIN_S
    try:
        while time.monotonic() < deadline:
            rec.settle(everything=True)
            if all(c[recorder.C_STATUS] != "pending" for c in pending):
                break
            time.sleep(_DRAIN_POLL_S)
    finally:  # answered whatever happens here: the callee waits for it
        answered.set_result(None)


def stop_serving_natively(rec: recorder.Recorder) -> None:
    """Before this capture stops recording (at its end, while every caller still answers):
    admit no more native builtins and tell each caller admitted so far, so that builtins
    sent after go wrapped (their callee side then comes back to the caller), and wait
    until the builtins they sent natively before have been served (``_revoke``: every
    caller at once, each at most _DRAIN_S). A call still running after that (or whose
    caller did not answer) may be cut by the stop: combine then pairs it with what the
    profiler wrote, or keeps its caller's side."""
    askers = rec.stop_admitting()
    if not askers or not (rpc.is_available() and api._is_current_rpc_agent_set()):
        return
    me = rpc.get_worker_info().id
    told = []
    for caller in askers:
        try:
            told.append(_ORIGINAL_RPC_ASYNC(caller, _revoke, args=(me, rec.token), timeout=_HANDSHAKE_TIMEOUT_S))
        except Exception:  # the caller is gone: it calls no more
            continue
    for answer in told:
        try:
            answer.wait()
        except Exception:  # gone since, or too slow: its calls in flight may be cut
            continue
