"""Job.open's read strategies (tracemerge.job.reads), each as the command that picks it uses
it: what each keeps of the events, whether it reads them at all, and that the commands pick
theirs (a rank file whose events are bad after a good head shows who read the events)."""

import pytest
from support import cli
from support.ranks import BASE, rank_file, write, x

from tracemerge.job import AlignRequest, Job, reads
from tracemerge.runtime.engine import Held, LocalEngine

EVENTS = 7  # planted per rank


@pytest.fixture
def ranks(tmp_path):
    """Two rank files, EVENTS spans each, rank r's last span ending at (100 + 10 r + 9) µs."""
    return [write(tmp_path / f"rank{r}.json", rank_file(
        [x(f"op{k}", 100.0 + 10 * r + k, 1.0 + (k == EVENTS - 1)) for k in range(EVENTS)], r)) for r in (0, 1)]


@pytest.fixture
def bad_events(tmp_path):
    """rank1's head is good, its third event's ts a string: only a reader of the events sees it."""
    good = write(tmp_path / "rank0.json", rank_file([x("a", 100.0, 1.0)], 0))
    events = [x("a", 100.0, 1.0), x("b", 102.0, 1.0), x("c", "later", 1.0)]
    return [good, write(tmp_path / "rank1.json", rank_file(events, 1))]


def last_ns(r):
    return BASE + (100 + 10 * r + EVENTS - 1 + 2) * 1000


def op_names(trace):
    return sorted(n for n in (trace.names[c] for c in trace.name.tolist()) if n.startswith("op"))


@pytest.mark.parametrize("core", ["native", "python"])
@pytest.mark.parametrize("read", [reads.events, reads.columns])
def test_small_inputs_stay_in_memory_for_the_writer_they_serve(ranks, read, core, monkeypatch):
    """events (combine's, whatif's) keeps what the JSON writer encodes: the core's scan, or
    the Python reader's structs; columns (report's, diff's, export's) the columns and args only."""
    monkeypatch.setenv("TRACEMERGE_CORE", core)
    job = Job.open(ranks, read=read)  # inline, no engine: small inputs stay in memory
    assert sorted(job.traces) == sorted(ranks)
    for r in (0, 1):
        trace = job.traces[ranks[r]]
        assert op_names(trace) == [f"op{k}" for k in range(EVENTS)]
        assert job.info(r).last_ns == last_ns(r) and not job.info(r).partial
        if core == "native":
            assert getattr(trace, "scan", None) is not None  # the core reads the same for both
        elif read is reads.events:
            assert trace.events is not None and len(trace.events) == len(trace.ts)
        else:
            assert trace.events is None


@pytest.mark.parametrize("read", [reads.events, reads.columns])
def test_a_local_engine_holds_each_rank_in_the_worker_that_read_it(ranks, read):
    engine = LocalEngine(2)  # combine's, report's and export's
    try:
        job = Job.open(ranks, engine=engine, read=read, align=AlignRequest("start"))
        assert sorted(job.traces) == sorted(ranks) and all(isinstance(h, Held) for h in job.traces.values())
        assert [job.info(r).last_ns for r in (0, 1)] == [last_ns(0), last_ns(1)]
        assert job.alignment is not None and sorted(job.alignment.clocks) == [0, 1]
    finally:
        engine.close()


def test_descriptions_describe_every_event_and_keep_none(ranks):
    engine = LocalEngine(2)  # info's and align's
    try:
        job = Job.open(ranks, engine=engine, read=reads.descriptions)
    finally:
        engine.close()
    assert job.traces == {}
    assert [(i.partial, i.last_ns) for i in job.infos] == [(False, last_ns(0)), (False, last_ns(1))]


def test_heads_describe_rank_files_from_their_heads(ranks, bad_events):
    engine = LocalEngine(1)  # offsets'
    try:
        job = Job.open(bad_events, engine=engine, read=reads.heads)  # the bad events are never read
        assert job.traces == {} and [i.partial for i in job.infos] == [True, True]
        skipped = Job.open(bad_events, engine=engine, read=reads.heads, skip_bad=True)
        assert [p for p, _ in skipped.skipped] == [bad_events[1]] and [i.partial for i in skipped.infos] == [False]
    finally:
        engine.close()


def test_each_command_reads_the_events_only_where_it_needs_them(bad_events, tmp_path):
    offsets = cli.run("offsets", *bad_events)  # heads: the bad event is never read
    assert offsets.exit_code == 0 and "events were not read" in offsets.stderr, offsets.stderr
    for args in (["info"], ["align", "-o", tmp_path / "aligned"], ["report"], ["combine", "-o", tmp_path / "t.json"]):
        r = cli.run(*args[:1], *bad_events, *args[1:])
        assert r.exit_code == 3 and "rank1.json" in r.stderr and "event 2" in r.stderr, (args, r.stderr)
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "aligned").exists()
