"""Where per-rank work runs. Engines only have to map a top-level function over argument
lists: :class:`LocalEngine` (processes on this machine, or inline with one job) and
:class:`DaskEngine` (a Dask cluster; a LocalCluster when no scheduler is given)."""

import collections
import contextlib
import ctypes
import gc
import multiprocessing
import multiprocessing.connection

# imported now, not on the first RawValue: it builds its properties with exec(), and a
# Ctrl-C that lands inside an exec() makes CPython 3.11 end the process by SIGINT even
# after tracemerge has caught the KeyboardInterrupt (exit -2 instead of 130)
import multiprocessing.sharedctypes  # noqa: F401
import multiprocessing.synchronize  # noqa: F401
import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple, Union, cast

from tracemerge.errors import Terminated, TracemergeError

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from tracemerge.runtime.progress import Progress


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Trace documents are trees of fresh dicts without cycles: the cyclic collector would
    only rescan them (up to 2.8× the parse time), reference counting frees them anyway."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---- engines ---------------------------------------------------------------------------

class Abandoned(Exception):
    """An earlier rank failed: this rank's body is not written (the earlier error is reported)."""


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _worker_start(parent: int) -> None:
    """In each worker: die with the parent, also when it is killed (SIGKILL leaves no chance
    to stop its workers), and take SIGTERM as the plain end the parent sends, not as the
    parent's own clean-up (which the fork inherited)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: workers end when they next find the parent's pipes closed
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)


def _kill_workers(pool: "ProcessPoolExecutor") -> None:
    """End a pool's worker processes at once (ProcessPoolExecutor has no terminate())."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            proc.kill()


class WorkerDied(TracemergeError):
    """A worker process ended without a result (the OOM killer, a signal)."""


@dataclass(frozen=True)
class Held:
    """A value kept by the worker that made it (:meth:`LocalEngine.hold`): a task given
    this as an argument runs in that worker, with the value in its place, so the value
    (a rank's events) is made once and never travels between processes."""

    key: str          # what it was made from (a path)
    worker: int       # the pool's worker that keeps it; -1: kept in this process (one job)


def _resolved(args: Iterable[Any], kept: Dict[str, Any]) -> List[Any]:
    return [kept[a.key] if isinstance(a, Held) else a for a in args]


def _serve(conn: Any, parent: int) -> None:
    """A pool worker: runs the tasks it is sent, one at a time, keeping what ``hold`` made."""
    _worker_start(parent)
    kept: Dict[str, Any] = {}   # this worker's held values, for its life
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        fn, args, keep = task
        try:
            result = fn(*_resolved(args, kept))
            if keep is not None:
                kept[keep], result = result
            reply: Tuple[bool, Any] = (True, result)
        except Exception as e:  # reported by the parent, in call order; Ctrl-C ends the worker
            reply = (False, e)
        del task, args
        try:
            conn.send(reply)
        except Exception as e:  # a result or an error that does not pickle
            conn.send((False, TracemergeError(f"a worker's result could not be sent back: {e}")))


class Turns:
    """Which of a write's ranks writes next and where (:class:`tracemerge.merge.assembly.OutputSlot`);
    shared with forked workers by inheritance."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self.cond = ctx.Condition()
        self.next, self.offset = ctx.RawValue("q", 0), ctx.RawValue("q", 0)
        self.written, self.failed = ctx.RawValue("q", 0), ctx.RawValue("q", 0)

    def reset(self, offset: int) -> "Turns":
        with self.cond:
            self.next.value, self.offset.value, self.written.value, self.failed.value = 0, offset, 0, 0
        return self


# The one module-level state: the turns of this process tree's writes. A lock and shared
# integers reach forked workers only by inheritance (multiprocessing refuses to pickle them
# into a task), so they are made once, before the first fork that needs them (a pool that
# lives from the inputs' read to the write, or a write's own workers), and reset by each write.
_TURNS: List[Turns] = []


def turns() -> Turns:
    """This process tree's :class:`Turns` (made on the first call, in the parent)."""
    if not _TURNS:
        _TURNS.append(Turns())
    return _TURNS[0]


class _Pool:
    """Worker processes that live as long as their engine, each keeping the values it made
    (:meth:`LocalEngine.hold`) for the tasks that name them."""

    def __init__(self, n: int) -> None:
        ctx = multiprocessing.get_context("fork")
        turns()  # made before the fork: the workers' writes take turns through it
        self.conns: List[Any] = []
        self.procs: List[Any] = []
        for _ in range(n):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(there, os.getpid()), daemon=True)
            proc.start()
            there.close()
            self.conns.append(here)
            self.procs.append(proc)

    def run(self, calls: List[Tuple[int, Callable[..., Any], tuple, Optional[str]]],
            tick: Callable[[int, int, Any], None]) -> list:
        """Each (worker, fn, args, keep) in its worker, in order per worker; the results in
        call order (the first failure in call order is raised once every call has ended)."""
        queues: List[Deque[Tuple[int, tuple]]] = [collections.deque() for _ in self.conns]
        for i, (w, fn, args, keep) in enumerate(calls):
            queues[w].append((i, (fn, args, keep)))
        results: List[Any] = [None] * len(calls)
        failed: Dict[int, BaseException] = {}
        busy: Dict[int, int] = {}

        def feed(w: int) -> None:
            if queues[w]:
                i, task = queues[w].popleft()
                self.conns[w].send(task)
                busy[w] = i

        try:
            for w in range(len(self.conns)):
                feed(w)
            done = 0
            while busy:
                for ready in multiprocessing.connection.wait([self.conns[w] for w in busy]):
                    w = self.conns.index(ready)
                    conn = self.conns[w]
                    try:
                        ok, value = conn.recv()
                    except (EOFError, OSError):
                        raise WorkerDied(f"a worker process died (killed, or out of memory) with --jobs "
                                         f"{len(self.conns)}; each keeps its ranks' events: try fewer --jobs") from None
                    i = busy.pop(w)
                    done += 1
                    if ok:
                        results[i] = value
                        tick(i, done, value)
                    else:
                        failed[i] = cast(BaseException, value)
                    feed(w)
        except BaseException:
            self.kill()
            raise
        if failed:
            # the first real failure: a rank that gave up its turn because another one failed says nothing
            first = next((failed[i] for i in sorted(failed) if not isinstance(failed[i], Abandoned)),
                         failed[min(failed)])
            raise first
        return results

    def kill(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                proc.kill()
        for proc in self.procs:
            with contextlib.suppress(OSError, ValueError, AttributeError, AssertionError):
                proc.join(5)
        self.procs, self.conns = [], []

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        for proc in self.procs:
            proc.join(5)
        self.kill()


def available_memory() -> int:
    """Bytes of memory this machine has free for new work (MemAvailable), 0 where unknown."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class LocalEngine:
    """Per-rank tasks in up to ``jobs`` processes on this machine (inline with one job)."""

    def __init__(self, jobs: Optional[int] = None, progress: Optional["Progress"] = None) -> None:
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.progress = progress  # called as each task ends (tracemerge.runtime.progress.Progress)
        self._pool: Optional[_Pool] = None      # started by the first hold with more than one job
        self._kept: Dict[str, Any] = {}         # what hold made in this process (one job)

    def map_light(self, fn: Callable[..., Any], *columns: Iterable[Any]) -> list:
        """``map`` for calls cheaper than sending their results between processes."""
        return list(map(fn, *columns))

    def hold(self, fn: Callable[..., Tuple[Any, Any]], keys: List[str], *columns: Iterable[Any],
             ) -> List[Tuple[Any, Held]]:
        """[(result, Held)] of ``fn(*call)`` for each call, which returns (value, result):
        the value stays with the worker that made it, under its key, for later tasks
        (:meth:`map` with the :class:`Held` as an argument) until the engine is closed.
        With one job the values are kept in this process."""
        calls = list(zip(*columns))
        if self.jobs == 1:
            out: List[Tuple[Any, Held]] = []
            for key, c in zip(keys, calls):
                self._kept[key], result = fn(*c)
                self._tick(fn, len(out) + 1, len(calls), (key,), result)
                out.append((result, Held(key, -1)))
            return out
        if self._pool is None:
            self._pool = _Pool(min(self.jobs, len(calls)))
        n = len(self._pool.conns)
        results = self._pool.run([(k % n, fn, c, key) for k, (key, c) in enumerate(zip(keys, calls))],
                                 lambda i, done, r: self._tick(fn, done, len(calls), (keys[i],), r))
        return [(r, Held(key, k % n)) for k, (key, r) in enumerate(zip(keys, results))]

    def map(self, fn: Callable[..., Any], *columns: Iterable[Any]) -> list:
        calls = list(zip(*columns))
        if self._pool is not None:  # in the pool: each call that names a held value in its worker
            n = len(self._pool.conns)
            where = [next((a.worker for a in c if isinstance(a, Held)), k % n) for k, c in enumerate(calls)]
            return self._pool.run([(w, fn, c, None) for w, c in zip(where, calls)],
                                  lambda i, done, r: self._tick(fn, done, len(calls), _named(calls[i]), r))
        if self._kept:
            calls = [tuple(_resolved(c, self._kept)) for c in calls]
        if self.jobs == 1 or len(calls) <= 1:
            results = []
            for c in calls:
                results.append(fn(*c))
                self._tick(fn, len(results), len(calls), c, results[-1])
            return results
        # here, not at the top: a held job (combine's usual case) never comes this way, and
        # the module brings logging with it (~16 ms of the main job's start-up)
        import concurrent.futures
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        # fork: workers start in milliseconds and share the parent's imports
        ctx = multiprocessing.get_context("fork")
        pool = ProcessPoolExecutor(min(self.jobs, len(calls)), mp_context=ctx, initializer=_worker_start,
                                   initargs=(os.getpid(),))
        try:
            futures = [pool.submit(fn, *c) for c in calls]
            pending, finished = set(futures), 0
            while pending:
                done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for f in done:
                    finished += 1
                    if f.exception() is None:
                        self._tick(fn, finished, len(calls), calls[futures.index(f)], f.result())
            failed = [cast(BaseException, f.exception()) for f in futures if f.exception() is not None]
        except BaseException:
            # Ctrl-C, SIGTERM: the workers go now, not when their ranks are done
            _kill_workers(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if failed:
            # the first real failure: a rank that gave up its turn because another one failed
            # (Abandoned) or a worker that died of a killed sibling says nothing about the input
            first = next((e for e in failed if not isinstance(e, (Abandoned, BrokenProcessPool))), failed[0])
            if isinstance(first, BrokenProcessPool):
                raise WorkerDied(f"a worker process died (killed, or out of memory) with --jobs {self.jobs}; "
                                 "each needs ~5x its largest rank's JSON size: try fewer --jobs") from None
            raise first
        return [f.result() for f in futures]

    def _tick(self, fn: Callable[..., Any], done: int, total: int, call: tuple, result: Any) -> None:
        if self.progress is not None:
            self.progress(fn, done, total, call, result)

    def close(self) -> None:
        """Let the held values go (the pool's workers end); clear the progress line."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._kept.clear()
        if self.progress is not None:
            self.progress.clear()


def _named(call: tuple) -> tuple:
    """A call's arguments as the progress line reads them: a held value by its path."""
    return tuple(a.key if isinstance(a, Held) else a for a in call)


def _ignore_ctrl_c() -> None:
    """Run on each LocalCluster worker: Ctrl-C at a terminal goes to the whole process group,
    and each worker's event loop turned it into a traceback of its own; tracemerge itself
    stops the workers (:meth:`DaskEngine.map`)."""
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _quiet_logs() -> None:
    """distributed's warnings off, in the process it runs in: once work is interrupted each
    cancelled task and closed connection is a warning (or a traceback) of its own."""
    import logging

    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


SCHEDULER_SCHEMES = ("tcp", "tls")
CONNECT_PROBE_S = 5.0  # a scheduler address where nothing answers fails within this, not Dask's 30 s


def parse_scheduler(address: str) -> Tuple[str, str, int]:
    """(scheme, host, port) of a ``--scheduler`` address, ``tcp://HOST:PORT`` (``HOST:PORT``
    is tcp), checked before any work: distributed took ``garbage`` or ``tcp://`` to an
    internal error, and an impossible port to a 30 s wait. ValueError says what is wrong."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in SCHEDULER_SCHEMES:
        raise ValueError(f"{address!r}: the scheme {scheme!r} is not one of {', '.join(SCHEDULER_SCHEMES)}")
    host, colon, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]:8786
    if not colon or not host or "/" in rest:
        raise ValueError(f"{address!r} is not {scheme}://HOST:PORT (e.g. tcp://10.0.0.5:8786)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r}: the port {port!r} is not a number from 1 to 65535")
    if scheme == "tls" and not _tls_configured():
        raise ValueError(f"{address!r}: tls:// needs the client's certificates in Dask's configuration "
                         "(distributed.comm.tls.ca-file and client.cert); tracemerge passes none of its own")
    return scheme, host, int(port)


def _tls_configured() -> bool:
    """Whether Dask's configuration names the certificates a TLS client needs."""
    try:
        import dask.config
    except ImportError:
        return False
    return bool(dask.config.get("distributed.comm.tls.ca-file", None)
                and dask.config.get("distributed.comm.tls.client.cert", None))


def _probe(address: str) -> None:
    """Fail at once, in one line, where nothing listens at ``address`` (refused, no such
    host, no route): distributed would retry for its whole timeout, then raise."""
    import socket

    _, host, port = parse_scheduler(address)
    try:
        socket.create_connection((host, port), timeout=CONNECT_PROBE_S).close()
    except OSError as e:
        reason = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise TracemergeError(f"--scheduler {address}: cannot connect: {reason}") from None


class DaskEngine:
    """Per-rank tasks on a Dask cluster: ``scheduler`` is its address (``tcp://HOST:PORT``);
    without one, a LocalCluster of ``jobs`` single-threaded worker processes on loopback.

    Workers read the inputs and write the shards by path, so on a real cluster inputs and
    output must be on a filesystem every worker and the client share.
    """

    progress: Optional["Progress"] = None  # not drawn: the workers' progress is Dask's own

    def __init__(self, scheduler: Optional[str] = None, jobs: Optional[int] = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise TracemergeError("--engine dask needs dask.distributed: pip install 'tracemerge[dask]'") from None
        from distributed.scheduler import KilledWorker
        self._killed = KilledWorker
        self.cluster = None
        try:
            if scheduler:
                _probe(scheduler)
                self.client = Client(scheduler, timeout="30s")
            else:
                self.cluster = LocalCluster(n_workers=max(1, jobs or os.cpu_count() or 1), threads_per_worker=1,
                                            processes=True, host="127.0.0.1", dashboard_address=None)
                self.client = Client(self.cluster)
                self.client.run(_ignore_ctrl_c)
        except (OSError, ValueError, TypeError) as e:  # TLS without certificates: a TypeError of distributed's
            self.close()
            where = f"--scheduler {scheduler}: cannot connect" if scheduler else "cannot start a Dask LocalCluster"
            raise TracemergeError(f"{where}: {e}") from None

    def map_light(self, fn: Callable[..., Any], *columns: Iterable[Any]) -> list:
        return self.map(fn, *columns)  # the files are on the workers' side of the network

    def map(self, fn: Callable[..., Any], *columns: Iterable[Any]) -> list:
        # an argument shared by every call (the per-rank function with its RPC plan) is
        # sent to the workers once, not pickled into each of the ranks' tasks
        lists = [[self.client.scatter(c[0], broadcast=True, hash=False)] * len(c)
                 if len(c) > 1 and all(x is c[0] for x in c) and not isinstance(c[0], (str, int)) else c
                 for c in map(list, columns)]
        futures = self.client.map(fn, *lists, pure=False)
        try:
            return self.client.gather(futures)
        except self._killed as e:
            raise WorkerDied(f"a Dask worker died running a rank (killed, or out of memory): {e}") from None
        except (KeyboardInterrupt, Terminated):
            # the workers stop before the caller removes what they were writing (export's
            # temporary directory), as the local engine's do
            self.stop(futures)
            raise

    def stop(self, futures: list) -> None:
        """Cancel ``futures`` and end a LocalCluster's workers (those of a scheduler given
        finish the task they run, unseen), with distributed's own complaints about the
        interrupted work silenced: the command says what happened in one line."""
        _quiet_logs()
        with contextlib.suppress(Exception):
            if self.cluster is not None:
                self.client.run(_quiet_logs)  # the workers warn of each task cancelled
            self.client.cancel(futures, force=True)
        self.close()

    def close(self) -> None:
        for thing in (getattr(self, "client", None), self.cluster):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()
        self.cluster = None


Engine = Union[LocalEngine, DaskEngine]


def map_where_held(runner: "Engine", fn: Callable[..., Any], sources: List[Any], *columns: Iterable[Any]) -> list:
    """``fn(source, *rest)`` for each rank, each where its source is: a value already in this
    process (a rank's events joined from its cycle files; a core-read trace holds a map of
    its file, which does not pickle) here, a path or a :class:`Held` by ``runner`` (a held
    rank in the worker that holds it). A job mixes them when one rank is several cycle files
    and another one file: all run here once handed a worker's Held, which only that worker
    can resolve."""
    calls = list(zip(sources, *columns))
    away = [i for i, c in enumerate(calls) if isinstance(c[0], (str, Held))]
    out: List[Any] = [None] * len(calls)
    if away:
        for i, made in zip(away, runner.map(fn, *zip(*[calls[i] for i in away]))):
            out[i] = made
    for i in sorted(set(range(len(calls))) - set(away)):
        out[i] = fn(*calls[i])
    return out


def make_engine(engine: str = "local", jobs: Optional[int] = None, scheduler: Optional[str] = None) -> Engine:
    if engine == "local":
        if scheduler:
            raise TracemergeError("--scheduler needs --engine dask")
        return LocalEngine(jobs)
    if engine == "dask":
        return DaskEngine(scheduler, jobs)
    raise TracemergeError(f"unknown engine {engine!r} (choose from local, dask)")
