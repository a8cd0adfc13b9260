"""Writes the malformed-file corpus beside this script: one small file per case.

The files are committed; this script documents how each was made and remakes them
(``python tests/corpus/make_corpus.py``). tests/test_errors.py says what each must do.
"""

import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support.ranks import BASE, kineto, rank_file, x  # noqa: E402
from corpus.bad_inputs import CLASSES, write_case  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def events(n=6, t0=1000.0, tid=1):
    return [x(f"op{i}", t0 + 10 * i, 5, tid=tid) for i in range(n)]


def dumps(doc, indent=None):
    return json.dumps(doc, indent=indent).encode()


def put(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    good = dumps(kineto(events(), rank=0), indent=2)
    put("empty.json", b"")
    put("blank.json", b"  \n\t\n")
    put("not_json.json", b"this is a log file, not a trace\n")
    cut = good.index(b'"op4"')  # inside the 5th event: 4 complete events before it
    put("truncated.json", good[:cut])
    put("truncated.json.gz", gzip.compress(good, mtime=0)[:-40])
    put("truncated_before_events.json", good[:good.index(b'"traceEvents"') + 5])
    flipped = bytearray(gzip.compress(good, mtime=0))
    flipped[len(flipped) // 2] ^= 0xFF
    put("corrupt.json.gz", bytes(flipped))
    put("trailing_zeros.json", good + b"\0" * 512)
    put("wrong_shape_number.json", b"42")
    put("wrong_shape_no_events.json", dumps({"schemaVersion": 1, "events": []}))
    put("wrong_shape_events_object.json", dumps({"traceEvents": {"ph": "X"}}))
    put("wrong_shape_event_list.json", dumps({"traceEvents": [x("a", 1, 1), ["X", "b", 2]]}))
    bad_event = {
        "missing_ph": {"name": "a", "ts": 1, "pid": 1, "tid": 1},
        "missing_ts": {"ph": "X", "name": "a", "dur": 1, "pid": 1, "tid": 1},
        "missing_name": {"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1},
        "null_ts": {"ph": "X", "name": "a", "ts": None, "dur": 1},
        "string_ts": {"ph": "X", "name": "a", "ts": "1000.5", "dur": 1},
        "bool_dur": {"ph": "X", "name": "a", "ts": 1, "dur": True},
        "negative_dur": {"ph": "X", "name": "a", "ts": 1, "dur": -3},
    }
    for case, event in bad_event.items():
        put(f"{case}.json", dumps(kineto(events(2) + [event], rank=1)))  # the bad event is event 2
    # orjson refuses these tokens; the stdlib reads them, then the event check names them
    put("nan_ts.json", dumps(kineto(events(2), rank=1)).replace(b'"ts": 1010.0', b'"ts": NaN'))
    put("infinity_dur.json", dumps(kineto(events(2), rank=1)).replace(b'"dur": 5, "args": {}}]', b'"dur": Infinity, "args": {}}]'))
    put("dup_rank_a.json", dumps(kineto(events(), rank=0)))
    put("dup_rank_b.json", dumps(kineto(events(), rank=0)))
    put("job_a_rank0.json", dumps(rank_file(events(), 0, job_id="job-A")))
    put("job_b_rank1.json", dumps(rank_file(events(), 1, job_id="job-B")))
    rpcs = [{"rpc_id": f"0:{i}", "role": "caller", "kind": "rpc_async", "func": "aten::add",
             "name": "rpc_async#aten::add(worker0 -> worker2)", "caller": 0, "callee": 2,
             "send_ns": BASE + 1_000_000 + i, "complete_ns": BASE + 2_000_000 + i, "status": "ok"} for i in range(3)]
    put("rpc_absent_peer_rank0.json", dumps(rank_file(events(), 0, rpcs=rpcs, world_size=3)))
    put("rpc_absent_peer_rank1.json", dumps(rank_file(events(), 1, world_size=3)))
    hour_us = 3600 * 10**6
    put("clock_jump_forward.json", dumps(kineto(events(5) + events(5, t0=1000.0 + hour_us), rank=0)))
    put("clock_jump_backward.json", dumps(kineto(events(5, t0=50 * 10**6) + events(5, t0=1000.0), rank=0)))
    put("clock_jump_window.json", dumps(rank_file(events(5) + [x("late", 1000.0 + 120 * 10**6, 5)], 0,
                                                  start_ns=BASE)))
    # the classes of issue 16, each a pair of rank files of the sample job, the bad one last
    for name, bad in CLASSES.items():
        write_case(os.path.join(HERE, "pairs", name), bad, target=bad.targets[-1])


if __name__ == "__main__":
    main()
