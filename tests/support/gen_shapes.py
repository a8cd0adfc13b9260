"""One thread of N spans in the shapes of issue 35's item 11, as a Kineto-like JSON file:
``open`` (all open at once, none nesting), ``same`` (identical spans), ``nested``
(perfectly nested). Used by tests/test_hostile_resources.py and benchmarks/hostile_shapes.py."""

import json


def write_shape(path, kind: str, n: int) -> None:
    if kind == "open":
        spans = [(i, n + 10) for i in range(n)]
    elif kind == "same":
        spans = [(100, 50)] * n
    else:
        spans = [(i, 2 * (n - i) + 1) for i in range(n)]
    events = [{"ph": "X", "name": "s" if kind == "same" else f"s{i % 7}", "cat": "cpu_op", "ts": ts, "dur": dur,
               "pid": 1, "tid": 1} for i, (ts, dur) in enumerate(spans)]
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)
