"""``profile``: a torch profiler session that also records RPCs and collectives and
writes this rank's file on exit (or one file per completed schedule cycle)."""

import contextlib
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, List, Literal, Optional

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from tracemerge.capture import collectives, journal, recorder, rpc, rref, signals, writer
from tracemerge.capture.identity import boot_id, identify, in_job, job_id, on_init

_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class profile:
    """Profile this worker and write ``out_dir/rank{R}.json.gz``, also if the block raises
    or a signal ends the process (SIGTERM, SIGINT, SIGHUP, SIGABRT: the file is written,
    then the signal does what it would have done; capture/signals.py). While the block
    runs, ``out_dir/rank{R}.journal`` holds its records up to the last second, for when the
    process dies without writing (capture/journal.py).

    Keyword arguments go to ``torch.profiler.profile`` (``self.profiler``); activities
    default to CPU plus CUDA when available, and all threads are profiled so that the
    ops of RPC server threads are recorded. With ``schedule=``, every completed cycle
    writes ``rank{R}.cycle{N}.json.gz`` (N counts from 0) instead; ``on_trace_ready`` is
    taken for that, since a profiling session can be exported only once.

    ``wrap_builtins=True`` sends builtins wrapped like Python functions, as before issue
    27: every call of a builtin then gets its own callee side exactly, also among calls of
    one builtin in flight together and from a callee that does not trace, at the cost of
    the callee's Python path (docs/capture.md, "Builtins").

    ``trace=False`` runs no torch profiler (``self.profiler`` is None): the file holds the
    records only (ids and times of every RPC and collective, no events), and builtins
    keep their C++ path to every callee, so a callee that does not trace gives them no
    callee side (docs/capture.md, "Without the profiler").
    """

    def __init__(self, out_dir: "str | os.PathLike[str]", rank: Optional[int] = None,
                 worker_name: Optional[str] = None, trace: bool = True, wrap_builtins: bool = False,
                 **torch_profiler_kwargs: Any) -> None:
        if "on_trace_ready" in torch_profiler_kwargs:
            raise TypeError("tracemerge.capture.profile writes the trace itself; "
                            "on_trace_ready cannot be given")
        if not trace and torch_profiler_kwargs:
            raise TypeError(f"trace=False runs no torch profiler: {sorted(torch_profiler_kwargs)} cannot be given")
        self.out_dir = Path(out_dir)
        self._rank, self._worker_name = rank, worker_name
        self._trace = trace
        self._wrap_builtins = wrap_builtins
        self._record_shapes = torch_profiler_kwargs.get("record_shapes", False)
        kwargs = dict(torch_profiler_kwargs)
        kwargs.setdefault("activities", _default_activities())
        # Builtins may reach this worker natively only when its trace holds the ops of
        # its RPC server threads throughout: all threads (the default config; a config
        # of the user's cannot be read back), no schedule (cycles skip steps).
        self._serves_natively = "experimental_config" not in kwargs and kwargs.get("schedule") is None
        kwargs.setdefault("experimental_config",
                          torch._C._profiler._ExperimentalConfig(profile_all_threads=True))
        schedule = kwargs.pop("schedule", None)
        self._cycle: Optional[int] = None  # the next cycle's number, under a schedule
        if schedule is not None:
            self._cycle = 0
            kwargs["schedule"] = self._watch(schedule)
            kwargs["on_trace_ready"] = self._cycle_ready
        self._window_start_ns: Optional[int] = None
        self.profiler = torch.profiler.profile(**kwargs) if trace else None

    def __enter__(self) -> "profile":
        self._meta: dict = {}
        self._known = self._in_job = self._asked = False
        # who it is without asking rank 0 (which takes a while): the journal is named by its
        # rank before a call can come in and end the process; the job's token just after it
        self._identify(ask=False)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._recorder = recorder.Recorder(on_rpc_end=self._learned, wrap_builtins=self._wrap_builtins,
                                           traced=self._trace,
                                           builtins_always_native=not self._trace and not self._wrap_builtins,
                                           shapes=bool(self._record_shapes))
        with contextlib.ExitStack() as stack:
            recorder.process.activate(self._recorder)
            stack.callback(recorder.process.deactivate)
            stack.enter_context(rpc.instrumented())
            stack.enter_context(rref.instrumented())
            stack.enter_context(collectives.instrumented())
            self._by_signal = self._ended = self._written = False
            self._ending = threading.Lock()  # one ending: the block's, or a signal's
            # the journal before the profiler, which takes up to a second to start on busy
            # cores: a rank serving calls meanwhile (its peers' profilers started first) and
            # dying in one leaves them (its window's start is the profiler's once it runs)
            self._window_start_ns = time.time_ns()
            self._journal = journal.Journal(self.out_dir / journal.name_of(self.rank if self._known else None,
                                                                           os.getpid()),
                                            self._journal_meta, self._recorder).start()
            self._identify()
            # once the block's file is written the journal holds nothing more: removed then
            # (a journal left behind is a rank that died, or whose file could not be written)
            stack.callback(lambda: self._journal.close(remove=self._written))
            self._recorder.on_first = self._first_record
            # init_rpc / init_process_group inside the block: who it is, known at once
            stack.enter_context(on_init(self._learned))
            if self.profiler is not None:
                self.profiler.__enter__()
            self._window_start_ns = time.time_ns()
            # callees that refused native builtins before may record now
            recorder.process.peers.forget_refusals()
            self._recorder.serves_natively = self._trace and self._serves_natively
            self._signals = stack.enter_context(signals.OnSignal(self._on_signal))
            self._undo = stack.pop_all()
        return self

    def __exit__(self, *exc_info: Any) -> Literal[False]:
        with self._undo, self._ending:
            if self._ended:  # the file was written when the signal came
                return False
            self._ended = True
            # while RPC is up and the profiler records: callers sending builtins here
            # natively send them wrapped from now on (their ops would not be recorded)
            rpc.stop_serving_natively(self._recorder)
            stop_ns = time.time_ns()
            if self.profiler is not None:
                self.profiler.__exit__(*exc_info)
            if self._cycle is None:
                self._write("rank{rank}.json.gz", stop_ns, self.profiler, raised=_raised(exc_info, stop_ns))
            self._written = True
            # now, under the lock: a signal that comes next finds the block ended and ends the
            # process at once, before the undo below would have removed the journal
            self._journal.close(remove=True)
        return False

    def _on_signal(self, signum: int) -> None:
        """A signal ends the process (signals.OnSignal, on its watcher thread): the file now,
        without asking other workers anything (they may be dead, or ending too), so that it
        is written well within a launcher's grace period."""
        with self._ending:
            if self._ended:  # the block ended first (its file is written, or being finished)
                return
            self._ended = self._by_signal = True
            stop_ns = time.time_ns()
            self._journal.flush()
            if self.profiler is not None:
                self.profiler.__exit__(None, None, None)
            if self._cycle is None:
                self._write("rank{rank}.json.gz", stop_ns, self.profiler, ask=False,
                            ended_by=(signal.Signals(signum).name, self._signals.seen_ns))
            self._written = True
            self._journal.close(remove=True)

    def _journal_meta(self) -> dict:
        """What the journal says of this rank first: who it is (rank, world size and name
        once known: None until RPC or torch.distributed tells them) and its window's start."""
        unknown = {} if self._known else {"rank": None, "world_size": None, "worker_name": None}
        return dict(self._meta, profile_start_ns=self._window_start_ns, **unknown)

    def _first_record(self) -> None:
        """The first call sent or served, the first collective (once per kind, on its thread):
        flushed before it can die, the journal named by its rank if it is known by now (a call
        served while ``init_rpc`` has not yet returned here: its peers' returned first)."""
        self._identify(ask=False)
        if self._known:
            self._journal.rename(self.out_dir / journal.name_of(self.rank, os.getpid()))
        self._journal.flush()

    def _learned(self) -> None:
        """RPC or torch.distributed started inside the block (or RPC is ending): who this
        worker is, written to the journal at once, which becomes ``rank{R}.journal``; then the
        job's token, asked of rank 0: calls served meanwhile can end the process (a death in
        the first second), which leaves the journal named by its rank, its job id the address's."""
        self._first_record()
        if self._known:
            self._identify()
            self._journal.flush()

    def _identify(self, ask: bool = True) -> None:
        """Who this worker is (rank, name, world size, job id): told when the block starts
        if RPC or torch.distributed is up, else as soon as it is — ``rpc.init_rpc`` inside
        the block (every worker then records before any call, since init_rpc waits for all),
        told at ``rpc.shutdown()`` in the block or when the file is written. ``ask``: the job's
        token from rank 0 too (else the job id is the rendezvous address's, which the reader
        takes for its job's agreed one: ``job.job_ids``)."""
        joined = in_job()
        if self._known and (self._in_job or not joined) and (self._asked or not ask):
            return
        # a rank given to profile() is known at once, but the world size and the job's id
        # only once RPC or torch.distributed is up: told again then
        known = joined or self._rank is not None
        rank, worker_name, world_size = identify(self._rank, self._worker_name)
        # the journal's flusher reads these from its thread: the identity first, "known" last
        # (job_id may ask rank 0, which takes a while: never half an identity in the journal)
        self._meta = {"job_id": job_id(ask=ask), "rank": rank, "world_size": world_size,
                      "worker_name": worker_name, "hostname": socket.gethostname(),
                      "boot_id": boot_id(), "pid": os.getpid()}
        self.rank = rank
        self._in_job = joined
        self._asked = ask
        self._known = known

    def step(self) -> None:
        """``self.profiler.step()``: marks a step for ``schedule`` (nothing with trace=False)."""
        if self.profiler is not None:
            self.profiler.step()

    def _watch(self, schedule: Callable[[int], ProfilerAction]) -> Callable[[int], ProfilerAction]:
        """Wrap ``schedule`` to note when each recording cycle begins."""
        last = ProfilerAction.NONE

        def watched(step: int) -> ProfilerAction:
            nonlocal last
            action = schedule(step)
            if action in _RECORDING and last in (ProfilerAction.NONE, ProfilerAction.WARMUP,
                                                 ProfilerAction.RECORD_AND_SAVE):
                self._window_start_ns = time.time_ns()
            last = action
            return action

        return watched

    def _cycle_ready(self, prof: torch.profiler.profile) -> None:
        assert self._cycle is not None  # on_trace_ready is given with a schedule only, which counts cycles
        self._write(f"rank{{rank}}.cycle{self._cycle}.json.gz", time.time_ns(), prof, ask=not self._by_signal)
        self._cycle += 1

    def _write(self, name: str, stop_ns: int, prof: Optional[torch.profiler.profile], ask: bool = True,
               ended_by: Optional[tuple] = None, raised: Optional[dict] = None) -> None:
        """Write a rank file; ``ask``: fetch the callee sides of this rank's calls (by RPC);
        ``ended_by``: (name, time seen) of the signal that ends the process (``signal``, ``signal_ns``);
        ``raised``: the exception that ended the block (``exception``: type, message, time, thread)."""
        self._identify()
        self._journal.flush()  # a block boundary: its records are on disk before they are taken
        name = name.format(rank=self.rank)
        kineto_json = None
        if prof is not None:
            kineto_json = self.out_dir / f".{name}.kineto.json"
            prof.export_chrome_trace(str(kineto_json))
        meta = dict(self._meta, cycle=self._cycle,
                    profile_start_ns=self._window_start_ns, profile_stop_ns=stop_ns)
        if ended_by:
            meta["signal"], meta["signal_ns"] = ended_by
        if raised:
            meta["exception"] = raised
        taken = self._recorder.take(self._window_start_ns or 0, stop_ns)
        calls = [r for r in taken["rpcs"] if r["role"] == "caller"]
        early = self._recorder.fetched_sides(calls)  # asked for when rpc.shutdown() ran in the block
        got = {c["rpc_id"] for side in early for c in side.get("calls", ())}
        later = [r for r in calls if r["rpc_id"] not in got]
        taken["remote_sides"] = early + (rpc.collect_remote_sides(later) if ask else [])
        taken["native_callees"] = list(self._recorder.native_callees)
        ended = None if prof is None else ended_elsewhere(prof, {s.name for s in taken["spans"] if s.ends is not None})
        writer.write(self.out_dir / name, kineto_json, meta, taken, served_ops=bool(self._recorder.admitted),
                     ended_elsewhere=ended)


MESSAGE_LIMIT = 2000  # an exception's message kept in the rank file, in characters


def _raised(exc_info: tuple, at_ns: int) -> Optional[dict]:
    """The exception that ends the block, as the rank file keeps it; None when it ends normally."""
    kind, value = exc_info[0], exc_info[1]
    if kind is None:
        return None
    return {"type": kind.__name__, "message": str(value)[:MESSAGE_LIMIT], "time_ns": at_ns,
            "thread": threading.current_thread().name}


def ended_elsewhere(prof: torch.profiler.profile, names: set) -> dict:
    """{(name, start ns): whether it ended on another thread than it began on} of the
    profile's spans named in ``names`` (the RPC spans ended in C++ when their futures
    completed), as the profiler itself recorded it: what torch's ``key_averages()`` counts
    as asynchronous. The call's own path cannot tell it without a race: a future that
    completes while its end is being attached runs the end at once on the calling thread,
    one that completes just after runs it on the agent's."""
    results = getattr(prof.profiler, "kineto_results", None) if names else None
    if results is None:
        return {}
    # each event named once: there may be millions, and name() makes a str each time
    return {(name, e.start_ns()): e.start_thread_id() != e.end_thread_id()
            for e in results.events() if (name := e.name()) in names}


def _default_activities() -> List[ProfilerActivity]:
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return activities
