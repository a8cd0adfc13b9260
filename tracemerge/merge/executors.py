"""Where per-rank work runs. Engines only have to map a top-level function over argument
lists: :class:`LocalEngine` (processes on this machine, or inline with one job) and
:class:`DaskEngine` (a Dask cluster; a LocalCluster when no scheduler is given)."""

import contextlib
import gc
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from tracemerge.errors import TracemergeError


@contextlib.contextmanager
def gc_paused():
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

class WorkerDied(TracemergeError):
    """A worker process ended without a result (the OOM killer, a signal)."""


class LocalEngine:
    """Per-rank tasks in up to ``jobs`` processes on this machine (inline with one job)."""

    def __init__(self, jobs=None):
        self.jobs = max(1, jobs or os.cpu_count() or 1)

    def map_light(self, fn, *columns):
        """``map`` for calls cheaper than sending their results between processes."""
        return list(map(fn, *columns))

    def map(self, fn, *columns):
        calls = list(zip(*columns))
        if self.jobs == 1 or len(calls) <= 1:
            return [fn(*c) for c in calls]
        # fork: workers start in milliseconds and share the parent's imports
        ctx = multiprocessing.get_context("fork")
        try:
            with ProcessPoolExecutor(min(self.jobs, len(calls)), mp_context=ctx) as pool:
                return list(pool.map(fn, *columns))
        except BrokenProcessPool:
            raise WorkerDied(f"a worker process died (killed, or out of memory) with --jobs {self.jobs}; "
                             "each needs ~5x its largest rank's JSON size: try fewer --jobs") from None

    def close(self):
        pass


class DaskEngine:
    """Per-rank tasks on a Dask cluster: ``scheduler`` is its address (``tcp://HOST:PORT``);
    without one, a LocalCluster of ``jobs`` single-threaded worker processes on loopback.

    Workers read the inputs and write the shards by path, so on a real cluster inputs and
    output must be on a filesystem every worker and the client share.
    """

    def __init__(self, scheduler=None, jobs=None):
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

    def map_light(self, fn, *columns):
        return self.map(fn, *columns)  # the files are on the workers' side of the network

    def map(self, fn, *columns):
        # an argument shared by every call (the per-rank function with its RPC plan) is
        # sent to the workers once, not pickled into each of the ranks' tasks
        columns = [[self.client.scatter(c[0], broadcast=True, hash=False)] * len(c)
                   if len(c) > 1 and all(x is c[0] for x in c) and not isinstance(c[0], (str, int)) else c
                   for c in map(list, columns)]
        futures = self.client.map(fn, *columns, pure=False)
        try:
            return self.client.gather(futures)
        except self._killed as e:
            raise WorkerDied(f"a Dask worker died running a rank (killed, or out of memory): {e}") from None

    def close(self):
        for thing in (getattr(self, "client", None), self.cluster):
            if thing is not None:
                thing.close()


def make_engine(engine="local", jobs=None, scheduler=None):
    if engine == "local":
        if scheduler:
            raise TracemergeError("--scheduler needs --engine dask")
        return LocalEngine(jobs)
    if engine == "dask":
        return DaskEngine(scheduler, jobs)
    raise TracemergeError(f"unknown engine {engine!r} (choose from local, dask)")
