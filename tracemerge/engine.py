"""Where per-rank work runs. Engines only have to map a top-level function over argument
lists: :class:`LocalEngine` (processes on this machine, or inline with one job) and
:class:`DaskEngine` (a Dask cluster; a LocalCluster when no scheduler is given)."""

import concurrent.futures
import contextlib
import ctypes
import gc
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Union, cast

from tracemerge.errors import TracemergeError

if TYPE_CHECKING:
    from tracemerge.progress import Progress


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


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """End a pool's worker processes at once (ProcessPoolExecutor has no terminate())."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            proc.kill()


class WorkerDied(TracemergeError):
    """A worker process ended without a result (the OOM killer, a signal)."""


class LocalEngine:
    """Per-rank tasks in up to ``jobs`` processes on this machine (inline with one job)."""

    def __init__(self, jobs: Optional[int] = None, progress: Optional["Progress"] = None) -> None:
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.progress = progress  # called as each task ends (tracemerge.progress.Progress)

    def map_light(self, fn: Callable[..., Any], *columns: Iterable[Any]) -> list:
        """``map`` for calls cheaper than sending their results between processes."""
        return list(map(fn, *columns))

    def map(self, fn: Callable[..., Any], *columns: Iterable[Any]) -> list:
        calls = list(zip(*columns))
        if self.jobs == 1 or len(calls) <= 1:
            results = []
            for c in calls:
                results.append(fn(*c))
                self._tick(fn, len(results), len(calls), c, results[-1])
            return results
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
        if self.progress is not None:
            self.progress.clear()


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
                self.client = Client(scheduler, timeout="30s")
            else:
                self.cluster = LocalCluster(n_workers=max(1, jobs or os.cpu_count() or 1), threads_per_worker=1,
                                            processes=True, host="127.0.0.1", dashboard_address=None)
                self.client = Client(self.cluster)
        except OSError as e:
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

    def close(self) -> None:
        for thing in (getattr(self, "client", None), self.cluster):
            if thing is not None:
                thing.close()


Engine = Union[LocalEngine, DaskEngine]


def make_engine(engine: str = "local", jobs: Optional[int] = None, scheduler: Optional[str] = None) -> Engine:
    if engine == "local":
        if scheduler:
            raise TracemergeError("--scheduler needs --engine dask")
        return LocalEngine(jobs)
    if engine == "dask":
        return DaskEngine(scheduler, jobs)
    raise TracemergeError(f"unknown engine {engine!r} (choose from local, dask)")
