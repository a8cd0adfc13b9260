"""``profile``: a torch profiler session that also records RPCs and collectives and
writes this rank's file on exit (or one file per completed schedule cycle)."""

import contextlib
import os
import socket
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from tracemerge.capture import collectives, recorder, rpc, writer
from tracemerge.capture.identity import boot_id, identify, job_id

_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class profile:
    """Profile this worker and write ``out_dir/rank{R}.json.gz``, also if the block raises.

    Keyword arguments go to ``torch.profiler.profile`` (``self.profiler``); activities
    default to CPU plus CUDA when available, and all threads are profiled so that the
    ops of RPC server threads are recorded. With ``schedule=``, every completed cycle
    writes ``rank{R}.cycle{N}.json.gz`` (N counts from 0) instead; ``on_trace_ready`` is
    taken for that, since a profiling session can be exported only once.
    """

    def __init__(self, out_dir, rank=None, worker_name=None, **torch_profiler_kwargs):
        if "on_trace_ready" in torch_profiler_kwargs:
            raise TypeError("tracemerge.capture.profile writes the trace itself; "
                            "on_trace_ready cannot be given")
        self.out_dir = Path(out_dir)
        self._rank, self._worker_name = rank, worker_name
        kwargs = dict(torch_profiler_kwargs)
        kwargs.setdefault("activities", _default_activities())
        kwargs.setdefault("experimental_config",
                          torch._C._profiler._ExperimentalConfig(profile_all_threads=True))
        schedule = kwargs.pop("schedule", None)
        self._cycle = None
        if schedule is not None:
            self._cycle = 0
            kwargs["schedule"] = self._watch(schedule)
            kwargs["on_trace_ready"] = self._cycle_ready
        self._window_start_ns = None
        self.profiler = torch.profiler.profile(**kwargs)

    def __enter__(self):
        rank, worker_name, world_size = identify(self._rank, self._worker_name)
        self.rank = rank
        self._meta = {"job_id": job_id(), "rank": rank, "world_size": world_size,
                      "worker_name": worker_name, "hostname": socket.gethostname(),
                      "boot_id": boot_id(), "pid": os.getpid()}
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._recorder = recorder.Recorder(rank, worker_name)
        with contextlib.ExitStack() as stack:
            recorder.activate(self._recorder)
            stack.callback(recorder.deactivate)
            stack.enter_context(rpc.instrumented())
            stack.enter_context(collectives.instrumented())
            self.profiler.__enter__()
            self._window_start_ns = time.time_ns()
            self._undo = stack.pop_all()
        return self

    def __exit__(self, *exc_info):
        with self._undo:
            stop_ns = time.time_ns()
            self.profiler.__exit__(*exc_info)
            if self._cycle is None:
                self._write(f"rank{self.rank}.json.gz", stop_ns, self.profiler)
        return False

    def step(self):
        """``self.profiler.step()``: marks a step for ``schedule``."""
        self.profiler.step()

    def _watch(self, schedule):
        """Wrap ``schedule`` to note when each recording cycle begins."""
        last = ProfilerAction.NONE

        def watched(step):
            nonlocal last
            action = schedule(step)
            if action in _RECORDING and last in (ProfilerAction.NONE, ProfilerAction.WARMUP,
                                                 ProfilerAction.RECORD_AND_SAVE):
                self._window_start_ns = time.time_ns()
            last = action
            return action

        return watched

    def _cycle_ready(self, prof):
        self._write(f"rank{self.rank}.cycle{self._cycle}.json.gz", time.time_ns(), prof)
        self._cycle += 1

    def _write(self, name, stop_ns, prof):
        kineto_json = self.out_dir / f".{name}.kineto.json"
        prof.export_chrome_trace(str(kineto_json))
        meta = dict(self._meta, cycle=self._cycle,
                    profile_start_ns=self._window_start_ns, profile_stop_ns=stop_ns)
        taken = self._recorder.take(self._window_start_ns, stop_ns)
        taken["remote_sides"] = rpc.collect_remote_sides(taken["rpcs"])
        writer.write(self.out_dir / name, kineto_json, meta, taken)


def _default_activities():
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return activities
