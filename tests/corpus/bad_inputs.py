"""Classes of bad input found by the adversarial run of issue 16, as mutations of a real
two-rank job (the bundled rpc_profiling sample): each class is a function that changes the
two documents (or their bytes) and what every command must do with the result.

Used three ways: ``make_corpus.py`` writes one example of each class under
``tests/corpus/pairs/<class>/``; ``test_bad_inputs.py`` runs those through combine (.json
and .pftrace), info, report and offsets; ``test_bad_input_properties.py`` draws random
members of every class (which rank file, which event, which bad value) with hypothesis.

An outcome is (exit code, text the one error or warning line must hold). Exit 3 lines
must also name the file; no command may end in exit 1, leave an output after an error,
or lose an event.
"""

import gzip
import json
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "samples", "rpc_profiling")
COMMANDS = ("json", "pftrace", "info", "report", "offsets")


def sample_docs() -> List[dict]:
    """The two rank documents of the sample job, fresh copies."""
    out = []
    for r in (0, 1):
        with gzip.open(os.path.join(SAMPLE, f"rank{r}.json.gz"), "rb") as f:
            out.append(json.loads(f.read()))
    return out


def dumps(doc) -> bytes:
    return json.dumps(doc).encode()


def x_events(doc) -> List[int]:
    """Indexes of the complete (X) events of ``doc``."""
    return [i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X"]


def rpc_events(doc) -> List[int]:
    return [i for i, e in enumerate(doc["traceEvents"]) if "rpc_id" in (e.get("args") or {})]


@dataclass
class Outcome:
    code: int                      # the exit code
    text: str = ""                 # held by the error line (exit != 0) or a warning line (exit 0)
    names_file: bool = True        # an error line names the bad file
    also_ok: tuple = ()            # other exit codes that are right too (0: no text asked for)


@dataclass
class BadClass:
    """One class of bad input: ``mutate(docs, target, pick, value) -> [bytes, bytes]``
    changes the documents of rank 0 and 1 (``target`` is the rank file made bad, ``pick``
    chooses the event or record, ``value`` the bad value among ``values``)."""

    name: str
    mutate: Callable
    values: tuple
    outcomes: Dict[str, Outcome]   # by command; a missing command means exit 0
    targets: Tuple[int, ...] = (0, 1)
    extra_args: Dict[str, List[str]] = field(default_factory=dict)

    def make(self, target=1, pick=0, value=None) -> List[bytes]:
        docs = sample_docs()
        return self.mutate(docs, target, pick, self.values[0] if value is None else value)

    def outcome(self, command) -> Outcome:
        return self.outcomes.get(command, Outcome(0))


def _as_bytes(docs, target=None, raw=None):
    out = [dumps(d) for d in docs]
    if raw is not None:
        out[target] = raw
    return out


def _event_field(key, where="event"):
    """Set ``key`` (``args.k`` for an args key) of a chosen X event (or RPC span) to the value."""
    def mutate(docs, target, pick, value):
        doc = docs[target]
        idx = rpc_events(doc) if where == "rpc" else x_events(doc)
        e = doc["traceEvents"][idx[pick % len(idx)]]
        if key.startswith("args."):
            e.setdefault("args", {})[key[5:]] = value
        else:
            e[key] = value
        return _as_bytes(docs)
    return mutate


def _placeholder(key, where="event"):
    """Put the placeholder "@BAD@" in a chosen event's ``key`` and replace it in the bytes
    by the value (bytes that json.dumps cannot write: invalid UTF-8, deep nesting)."""
    set_it = _event_field(key, where)

    def mutate(docs, target, pick, value):
        out = set_it(docs, target, pick, "@BAD@")
        out[target] = out[target].replace(b'"@BAD@"', value, 1)
        return out
    return mutate


def _block_field(key):
    def mutate(docs, target, pick, value):
        docs[target]["tracemerge"][key] = value
        return _as_bytes(docs)
    return mutate


def _record_field(key, records="rpcs"):
    """Set ``key`` of a chosen record of the rank-file block (every record when pick < 0)."""
    def mutate(docs, target, pick, value):
        recs = docs[target]["tracemerge"][records]
        if records == "collectives" and not recs:
            recs += _collectives(docs)[target]
        chosen = recs if pick < 0 else [recs[pick % len(recs)]]
        for rec in chosen:
            rec[key] = value
        if records == "collectives":
            docs[1 - target]["tracemerge"]["collectives"] = _collectives(docs)[1 - target]
        return _as_bytes(docs)
    return mutate


def _collectives(docs):
    """One all_reduce between the two ranks, recorded by both (the sample has none)."""
    out = []
    for d in docs:
        t = d["tracemerge"]["profile_start_ns"] + 1_000_000
        out.append([{"op": "all_reduce", "group": "0", "group_ranks": [0, 1], "seq": 0, "bytes": 4096,
                     "start_ns": t, "end_ns": t + 50_000}])
    return out


def _base(docs, target, pick, value):
    docs[target]["baseTimeNanoseconds"] = value
    return _as_bytes(docs)


def _gzip_bomb(docs, target, pick, value):
    """The rank file followed, in the same gzip stream, by ``value`` MB of spaces."""
    import zlib
    c = zlib.compressobj(1, wbits=31)
    parts = [c.compress(dumps(docs[target]))]
    block = b" " * (1 << 20)
    parts += [c.compress(block) for _ in range(value)]
    parts.append(c.flush())
    return _as_bytes(docs, target, b"".join(parts))


def _truncate(docs, target, pick, value):
    data = dumps(docs[target])
    cut = data.index(b'"ph"', len(data) * value // 100)  # inside an event
    return _as_bytes(docs, target, data[:cut])


MALFORMED = Outcome(3, "'ts' is not a number")

CLASSES: Dict[str, BadClass] = {c.name: c for c in [
    # a malformed event in any rank file: the file and the event are named, also when a
    # worker finds it (offsets reads rank files' heads only, and says so)
    BadClass("string_ts", _event_field("ts"), ("late", "12", True),
             {c: Outcome(3, "is not a number") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    # RPC records naming a rank no file has: a warning and a correct merge
    BadClass("rpc_peer_absent", _record_field("callee"), (7, 2, 1000),
             {c: Outcome(0, "no input file has rank") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0)}, targets=(0,)),
    # a negative peer rank is no rank: the record's field is named
    BadClass("rpc_peer_negative", _record_field("callee"), (-1, -7),
             {c: Outcome(3, "'callee'") for c in COMMANDS}, targets=(0,)),
    # integers beyond what 64-bit ns hold
    BadClass("base_time_huge", _base, (10**20, -(10**20), 2**64, 2**63 - 10**6),
             {c: Outcome(3, "baseTimeNanoseconds") for c in COMMANDS}),
    BadClass("record_ns_huge", _record_field("send_ns"), (10**20, 2**64, -(10**20)),
             {c: Outcome(3, "'send_ns'") for c in COMMANDS}),
    # a base that fits but base + ts does not (near 2**63 it used to wrap silently); a base
    # beyond 2**62 is base_time_huge
    BadClass("base_time_wraps", _base, (2**62 - 10**15, 2**62 - 10**12),
             {c: Outcome(3, "out of range") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    # text that UTF-8 output cannot hold
    BadClass("name_invalid_utf8", _placeholder("name"), (b'"bad\xff\xfe"', b'"\xc3"', b'"\xed\xa0\x80"'),
             {c: Outcome(3, "UTF-8") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    BadClass("args_invalid_utf8", _placeholder("args.note"), (b'"bad\xff\xfe"', b'"\x80abc"'),
             {c: Outcome(3, "UTF-8") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    BadClass("name_lone_surrogate", _placeholder("name"), (b'"\\ud800"', b'"a\\udfff"', b'"\\ud83d x"'),
             {c: Outcome(3, "surrogate") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    # valid JSON nested deeper than a reader may follow
    # (where the args are only passed through — JSON output, info — they are kept as written:
    # exit 0 and a correct merge is right too; where they are decoded, exit 3)
    BadClass("args_deep", _placeholder("args.deep"), (b"[" * 1000 + b"]" * 1000, b'{"a":' * 900 + b"1" + b"}" * 900),
             {c: Outcome(3, "nested", also_ok=(0,)) for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    # a list (or other non-string) where a string is expected
    BadClass("job_id_not_string", _block_field("job_id"), (["x"], {"a": 1}, [1, 2]),  # (an int is taken as an id)
             {c: Outcome(3, "job_id' is not a string") for c in COMMANDS}),
    # (info and report do not use the RPC spans' args: they read them right)
    # every command that reads the events finds it: describing a rank reads its RPC spans
    BadClass("rpc_id_not_string", _event_field("args.rpc_id", "rpc"), (["x"], {"a": 1}, 1.5),
             {c: Outcome(3, "rpc_id' is not a string") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    BadClass("cat_not_string", _event_field("cat"), (5, 1.5, ["a"], {"a": 1}),
             {c: Outcome(3, "'cat'") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    BadClass("rpc_name_not_string", _record_field("name"), (5, ["a"], None),
             {c: Outcome(3, "'name'") for c in COMMANDS}),
    BadClass("group_ranks_not_list", _record_field("group_ranks", "collectives"), (5, "0,1", {"a": 1}),
             {c: Outcome(3, "'group_ranks'") for c in COMMANDS}),
    # a cut file is salvaged, and every command that reads its events says so
    BadClass("truncated", _truncate, (50, 80, 95),
             {c: Outcome(0, "truncated file") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")}),
    # a stream that inflates beyond the bound (here lowered to 16 MB): refused, file named
    BadClass("gzip_bomb", _gzip_bomb, (40, 64),
             {c: Outcome(3, "inflates to more than") for c in COMMANDS if c != "offsets"}
             | {"offsets": Outcome(0, "events were not read")},
             extra_args={c: ["--max-inflate", "16M"] for c in COMMANDS}),
]}


def write_case(directory, bad_class: BadClass, target=1, pick=0, value=None) -> List[str]:
    """The two files of one member of ``bad_class`` in ``directory``; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    names = [f"rank{r}.json" + (".gz" if bad_class.name == "gzip_bomb" and r == target else "") for r in (0, 1)]
    for name, data in zip(names, bad_class.make(target, pick, value)):
        paths.append(os.path.join(directory, name))
        with open(paths[-1], "wb") as f:
            f.write(data)
    return paths


def write_good(directory) -> List[str]:
    """The sample job's two rank files, unchanged, as JSON in ``directory``."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for r, data in enumerate(_as_bytes(sample_docs())):
        paths.append(os.path.join(directory, f"rank{r}.json"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    return paths


def command_args(command: str, paths: List[str], out_dir: str, bad_class: Optional[BadClass] = None) -> List[str]:
    """The tracemerge arguments of ``command`` over ``paths`` (outputs in ``out_dir``)."""
    extra = bad_class.extra_args.get(command, []) if bad_class else []
    if command in ("json", "pftrace"):
        return ["combine", *paths, "-o", os.path.join(out_dir, f"merged.{command}"), *extra]
    return [command, *paths, *extra]
