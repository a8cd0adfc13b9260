"""A journal whose rank was never written (the process died before RPC or torch.distributed
told it, issue 47), written by the capture's own journal writer: read by the rank its
calls name it by, or refused with what would tell it — never taken as rank 0."""

import json
import os
import time
from pathlib import Path

from support import cli

from tracemerge.capture import journal, recorder

ROOT = Path(__file__).resolve().parent.parent


def _journal(path: Path, served: bool) -> Path:
    rec = recorder.Recorder()
    meta = {"job_id": "j", "rank": None, "world_size": None, "worker_name": None, "hostname": "h",
            "pid": 4242, "profile_start_ns": time.time_ns()}
    j = journal.Journal(path, lambda: meta, rec, period_s=3600).start()
    if served:  # a call served from rank 0, as the callee's wrapper records it
        header = ("0:0", "rpc_sync", "serve", "rpc_sync#serve(worker0 -> worker1)", 0, 1, "worker0", "worker1")  # HEADER_KEYS
        rec.add_served(header, {"rpc_id": "0:0", "start_ns": time.time_ns(),
                                "tid": 1, "status": "pending"})
    j.flush()
    os.close(j._fd)  # the process died: never closed
    return path


def test_a_journal_with_a_served_call_is_the_rank_the_call_names(tmp_path):
    path = _journal(tmp_path / "pid4242.journal", served=True)
    first = json.loads(path.read_text().splitlines()[0])
    assert first["meta"]["rank"] is None
    done = cli.run("info", str(path))
    assert done.exit_code == 0, done.stderr
    assert "rank 1 (from its calls" in done.stdout


def test_a_journal_with_nothing_to_tell_its_rank_is_refused_not_rank_0(tmp_path):
    path = _journal(tmp_path / "pid4242.journal", served=False)
    done = cli.run("report", str(path))
    assert done.exit_code == 4, (done.exit_code, done.stderr)
    assert done.stderr.count("\n") == 1 and "rank was never learned" in done.stderr and "pid 4242" in done.stderr
