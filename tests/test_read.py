
import pytest
from support.ranks import BASE, kineto, rank_file, write, x

from tracemerge.errors import TraceError
from tracemerge.inputs import read_trace
from tracemerge.model import NO_DUR, NO_TS

EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
    x("aten::add", 1000.5, 20.25),
    x("span", 1001.0, 5.0, pid="Spans", tid=""),
    {"ph": "i", "name": "mark", "pid": 100, "tid": 1, "ts": 1010.001, "s": "t"},
]


def check_columns(t, base):
    assert len(t) == 4
    assert t.ts[0] == NO_TS  # metadata without ts keeps none
    assert t.ts[1:].tolist() == [base + 1_000_500, base + 1_001_000, base + 1_010_001]
    assert t.dur.tolist() == [NO_DUR, 20_250, 5_000, NO_DUR]
    assert [t.names[c] for c in t.name] == ["process_name", "aten::add", "span", "mark"]
    assert [t.pids[c] for c in t.pid] == [100, 100, "Spans", 100]
    assert [t.tids[c] for c in t.tid] == [0, 1, "", 1]
    assert t.args[1] == {}
    assert t.extra[3] == {"s": "t"} and t.extra[1] is None


def test_plain_kineto_object(tmp_path):
    t = read_trace(write(tmp_path / "a.json", kineto(EVENTS)))
    check_columns(t, BASE)
    assert t.base_ns == BASE and t.tracemerge is None
    assert t.meta["displayTimeUnit"] == "ms"


def test_gzip_recognised_by_content_not_name(tmp_path):
    t = read_trace(write(tmp_path / "a.trace", kineto(EVENTS), gz=True))
    check_columns(t, BASE)
    t = read_trace(write(tmp_path / "b.json.gz", kineto(EVENTS)))
    check_columns(t, BASE)


def test_bare_event_array_has_no_base(tmp_path):
    t = read_trace(write(tmp_path / "a.json", EVENTS))
    check_columns(t, 0)
    assert t.base_ns is None and t.meta == {}


def test_rank_file_block_is_read(tmp_path):
    doc = rank_file(EVENTS, rank=3, rpcs=[{"rpc_id": "3:1", "role": "caller"}])
    t = read_trace(write(tmp_path / "r.json.gz", doc))
    check_columns(t, BASE)
    assert t.tracemerge["rank"] == 3 and t.tracemerge["rpcs"][0]["rpc_id"] == "3:1"
    assert "tracemerge" not in t.meta


def test_microsecond_decimals_become_exact_ns(tmp_path):
    # floats such as 0.1 µs must not become 99 ns
    events = [x("a", ts, 0.1) for ts in (0.001, 0.3, 123456789.123, 4464888733311.333)]
    t = read_trace(write(tmp_path / "a.json", kineto(events, base=0)))
    assert t.ts.tolist() == [1, 300, 123456789123, 4464888733311333]
    assert t.dur.tolist() == [100] * 4


def test_bases_differ_per_file(tmp_path):
    a = read_trace(write(tmp_path / "a.json", kineto([x("a", 5.0, 1)], base=BASE)))
    b = read_trace(write(tmp_path / "b.json", kineto([x("a", 5.0, 1)], base=BASE + 7_889_238 * 10**9)))
    assert int(b.ts[0] - a.ts[0]) == 7_889_238 * 10**9


@pytest.mark.parametrize("doc, problem", [
    ({"foo": 1}, "no 'traceEvents'"),
    ({"traceEvents": {}}, "not a list"),
    (17, "expected a JSON object or array"),
    ([{"ph": "X", "name": "a", "ts": 1, "dur": -1}], "event 0: negative 'dur'"),
    ([{"name": "a", "ts": 1}], "event 0: missing 'ph'"),
    ([{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b"}], "event 1: missing 'ts'"),
    ([{"ph": "X", "ts": 1}], "event 0: missing 'name'"),
    ([{"ph": "X", "name": "a", "ts": "soon"}], "event 0: 'ts' is not a number"),
    ([{"ph": "X", "name": "a", "ts": 1, "pid": [1]}], "event 0: 'pid' must be a string or number"),
])
def test_malformed_documents_name_file_and_event(tmp_path, doc, problem):
    path = write(tmp_path / "bad.json", doc)
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value).startswith(path + ": ")
    assert problem in str(e.value)


def test_unreadable_inputs(tmp_path):
    with pytest.raises(TraceError, match="missing.json: cannot read"):
        read_trace(tmp_path / "missing.json")
    (tmp_path / "empty.json").write_bytes(b"")
    with pytest.raises(TraceError, match="empty file"):
        read_trace(tmp_path / "empty.json")
    (tmp_path / "junk.json").write_bytes(b"not json at all")
    with pytest.raises(TraceError, match="not valid JSON"):
        read_trace(tmp_path / "junk.json")


def test_metadata_keeps_the_last_thread_name(tmp_path):
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "first"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "second"}}]
    t = read_trace(write(tmp_path / "a.json", events))
    assert list(t.metadata("thread_name").values()) == ["second"]


def test_typed_structs_become_the_generic_readers_output_events(tmp_path):
    """The transform patches the typed reader's structs into output events; they must encode
    as the generic reader's events do, also for absent or null keys, and again when the same
    trace is transformed a second time."""
    from tracemerge.clocks.clock import ClockModel
    from tracemerge.formats.chrome import encode_events
    from tracemerge.inputs.chrome import build
    from tracemerge.place.placement import Placement, transform

    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}},
        {"ph": "M", "name": "process_sort_index", "pid": 1, "tid": 0},
        {"ph": "M", "name": 7, "pid": 1, "tid": None, "ts": 5, "args": None},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "dur": 3, "args": {"name": "t"}},
        {"ph": "X", "cat": None, "name": "a", "pid": 1, "tid": 2, "ts": 10, "dur": 1,
         "args": {"External id": 5, "correlation": 6}},
        {"ph": "X", "cat": "c", "name": "b", "pid": "P", "tid": "T", "ts": 11.5, "dur": 0.25,
         "args": {"External id": 2**40, "n": {"correlation": 1}}},
        {"ph": "s", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 2, "ts": 10, "id": 3, "bind_id": 9},
        {"ph": "f", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 2, "ts": 12, "id": "x", "id2": {"global": 4},
         "bp": "e"},
    ]
    path = write(tmp_path / "t.json", {"traceEvents": events, "baseTimeNanoseconds": BASE})
    typed = read_trace(path)
    assert typed.events is not None
    generic = build(str(path), events, {"baseTimeNanoseconds": BASE}, None)
    place = Placement(rank=1, label="r", pid_base=1000, out_base_ns=BASE,
                      clock=ClockModel(rank=1, method="test", offset_ns=7, drift_ppm=3.0, anchor_ns=BASE))
    expected = encode_events(transform(generic, place)[0])
    assert encode_events(transform(typed, place)[0]) == expected
    assert encode_events(transform(typed, place)[0]) == expected


def test_extra_columns_args_dicts_and_dropped_structs_agree_with_the_generic_reader(tmp_path):
    """Extra.column and Args.dicts give what the per-event dicts give, for both readers, and
    a trace whose typed structs were freed (drop_events) keeps every extra key."""
    from msgspec import UNSET

    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"k": 1}},
              {"ph": "s", "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 2, "id": 7, "bp": "e"},
              {"ph": "f", "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 3, "id": None, "args": [1]},
              {"ph": "i", "name": "i", "pid": 1, "tid": 1, "ts": 4, "s": "p", "args": None}]
    typed = read_trace(write(tmp_path / "typed.json", kineto(events)))
    generic = read_trace(write(tmp_path / "generic.json", kineto(events + [{"ph": "i", "name": "j", "pid": 1, "ts": 5,
                                                                            "unknown": 1}])))
    assert typed.events is not None and generic.events is None
    idx = [3, 0, 1, 2]
    for trace in (typed, generic):
        assert trace.extra.column("id", idx) == [UNSET, UNSET, 7, None]
        assert trace.extra.column("bp", idx) == [UNSET, UNSET, "e", UNSET]
        assert trace.extra.column("tts", idx) == [UNSET] * 4
        assert trace.args.dicts(idx) == [None, {"k": 1}, None, None]
    typed.drop_events()
    assert typed.events is None
    assert [typed.extra[i] for i in range(4)] == [generic.extra[i] for i in range(4)]
