"""The malformed-file corpus (tests/corpus/, made by make_corpus.py): one test per case.

Every bad file gives one line naming the file (and the event), a documented exit code,
no traceback and no output file; salvageable files are read with a warning.
"""

import json
import os
import shutil

import pytest
from support.cli import invoke
from support.ranks import kineto, load_output, x

from tracemerge.errors import EXIT_CONFLICT, EXIT_INPUT, TraceError
from tracemerge.inputs import read_trace
from tracemerge.inputs.salvage import salvage

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def corpus(name):
    return os.path.join(CORPUS, name)


BAD = [
    ("empty.json", "empty file", None),
    ("blank.json", "empty file", None),
    ("not_json.json", "not valid JSON", None),
    ("corrupt.json.gz", "corrupt gzip", None),
    ("truncated_before_events.json", "nothing to recover: the data ends before the 'traceEvents' array", None),
    ("wrong_shape_number.json", "expected a JSON object or array, found int", None),
    ("wrong_shape_no_events.json", "no 'traceEvents'", None),
    ("wrong_shape_events_object.json", "'traceEvents' is a dict, not a list", None),
    ("wrong_shape_event_list.json", "event is a list, not an object", 1),
    ("missing_ph.json", "missing 'ph'", 2),
    ("missing_ts.json", "missing 'ts'", 2),
    ("missing_name.json", "missing 'name'", 2),
    ("null_ts.json", "missing 'ts'", 2),
    ("string_ts.json", "'ts' is not a number: '1000.5'", 2),
    ("bool_dur.json", "'dur' is not a number: True", 2),
    ("nan_ts.json", "'ts' is not a finite number: nan", 1),
    ("infinity_dur.json", "'dur' is not a finite number: inf", 1),
    ("negative_dur.json", "negative 'dur' -3", 2),
]


@pytest.mark.parametrize("name,problem,index", BAD)
def test_bad_file_is_named_with_its_problem(name, problem, index):
    with pytest.raises(TraceError) as e:
        read_trace(corpus(name))
    assert e.value.index == index
    where = corpus(name) + (f": event {index}: " if index is not None else ": ")
    assert str(e.value).startswith(where) and problem in str(e.value)


@pytest.mark.parametrize("name,problem,index", BAD)
def test_bad_file_cli_one_line_exit_3_no_output(tmp_path, name, problem, index):
    out = tmp_path / "out.json"
    line = invoke("combine", corpus("truncated.json"), corpus(name), "-o", out).error_line(EXIT_INPUT)
    assert corpus(name) in line and problem in line
    assert os.listdir(tmp_path) == []


def intact():
    """The document truncated.json and truncated.json.gz were cut from (see make_corpus.py)."""
    from corpus.make_corpus import events
    return kineto(events(), rank=0)


def test_truncated_json_is_salvaged_up_to_the_last_complete_event():
    t = read_trace(corpus("truncated.json"))
    assert t.truncated and len(t) == 4
    assert [t.names[c] for c in t.name] == ["op0", "op1", "op2", "op3"]
    assert t.warnings == ["truncated file (the JSON ends early): recovered 4 complete events from the first 870 "
                          "of 932 bytes; whatever followed is lost"]
    assert t.meta["distributedInfo"]["rank"] == 0  # keys before traceEvents survive


def test_truncated_gzip_is_salvaged_as_far_as_it_decompresses():
    t = read_trace(corpus("truncated.json.gz"))
    full = intact()["traceEvents"]
    assert t.truncated and 0 < len(t) < len(full)
    assert [t.names[c] for c in t.name] == [e["name"] for e in full[:len(t)]]
    assert "the gzip stream ends early" in t.warnings[0] and f"recovered {len(t)} complete events" in t.warnings[0]


def test_truncated_input_is_combined_with_the_warning_and_counted(tmp_path):
    out = tmp_path / "o.json"
    r = invoke("combine", corpus("truncated.json"), "-o", out)
    assert r.exit_code == 0
    assert "warning: " + corpus("truncated.json") + ": truncated file" in r.output
    summary = load_output(out)["tracemerge"]
    assert summary["inputs"][0]["truncated"] is True and summary["events"]["in"] == 4


def test_salvage_every_cut_point_keeps_exactly_the_complete_events():
    """Cut a document with nasty strings at every byte: the salvage keeps exactly the
    events wholly inside the cut, or says nothing is recoverable."""
    events = [x(f'op"{i}\\', i, 1, args={"s": 'a}],"traceEvents":[{', "n": {"l": [1, {"d": "\\\\"}]}})
              for i in range(4)]
    doc = json.dumps({"tracemerge": {"note": "\"traceEvents\": ["}, "traceEvents": events, "traceName": "x"},
                     indent=1).encode()
    # where each event ends, found independently with the stdlib decoder
    text, decoder, ends = doc.decode(), json.JSONDecoder(), []
    pos = text.index("[", text.index('"traceEvents": ['))
    for _ in events:
        pos = decoder.raw_decode(text, text.index("{", pos))[1]
        ends.append(pos)
    for cut in range(len(doc)):
        whole = sum(end <= cut for end in ends)
        if not whole:
            with pytest.raises(ValueError):
                salvage(doc[:cut])
            continue
        kept = salvage(doc[:cut])
        assert json.loads(kept.text)["traceEvents"] == events[:whole] and kept.events == whole, cut


def test_trailing_zero_padding_is_ignored_with_a_warning():
    t = read_trace(corpus("trailing_zeros.json"))
    assert len(t) == 6 and not t.truncated
    assert t.warnings == ["ignored 512 trailing zero/blank bytes"]


def test_duplicate_ranks_conflict():
    line = invoke("info", corpus("dup_rank_a.json"), corpus("dup_rank_b.json")).error_line(EXIT_CONFLICT)
    assert "rank 0 (from distributedInfo) is also claimed by" in line and corpus("dup_rank_a.json") in line


def test_files_of_different_jobs_warn_or_are_refused_with_strict(tmp_path):
    files = [corpus("job_a_rank0.json"), corpus("job_b_rank1.json")]
    r = invoke("combine", *files, "-o", tmp_path / "o.json")
    assert r.exit_code == 0
    assert "warning: the files come from different jobs: job_id differs ('job-A' in " in r.output
    assert load_output(tmp_path / "o.json")["tracemerge"]["warnings"][0].startswith("the files come from different jobs")
    line = invoke("combine", *files, "--strict", "-o", tmp_path / "p.json").error_line(EXIT_CONFLICT)
    assert "job_id differs" in line and "refused by --strict" in line
    assert not (tmp_path / "p.json").exists()


def test_world_size_disagreement_in_kineto_distributed_info(tmp_path):
    from support.ranks import write
    a = write(tmp_path / "a.json", kineto([x("a", 1, 1)], rank=0, world_size=2))
    b = write(tmp_path / "b.json", kineto([x("a", 1, 1)], rank=1, world_size=4))
    r = invoke("info", a, b)
    assert r.exit_code == 0 and f"world_size differs (2 in {a}; 4 in {b})" in r.output
    assert "refused by --strict" in invoke("info", a, b, "--strict").error_line(EXIT_CONFLICT)


def test_rpc_records_with_absent_peer_warn_with_counts():
    r = invoke("info", corpus("rpc_absent_peer_rank0.json"), corpus("rpc_absent_peer_rank1.json"))
    assert r.exit_code == 0
    assert "warning: 3 RPC records name rank 2 as their peer, but no input file has rank 2" in r.output
    assert "warning: world_size is 3 but rank 2 has no input file" in r.output


@pytest.mark.parametrize("name,says", [
    ("clock_jump_forward.json", "no event starts for 3600.000 s between event 4 and event 5"),
    ("clock_jump_backward.json", "time goes backwards on a thread 1 times, by up to 49.999 s (event 5 ends before event 4"),
    ("clock_jump_window.json", "1 events start outside the profiling window by up to 119.001 s (first: event 5)"),
])
def test_clock_jumps_warn(name, says):
    r = invoke("info", corpus(name))
    assert r.exit_code == 0 and "possible clock jump: " + says in r.output


def test_clock_jump_keys_of_huge_tables_order_events_alike(tmp_path):
    """The (pid, tid, cat) key the backwards-time check sorts by, as one int64 and as the
    dense ranks a trace with tables too large for one int64 gets: the same groups in the
    same order, on a trace with several processes, threads and categories (some absent)."""
    import numpy as np

    from tracemerge.inputs.rankchecks import _thread_cat_key
    events = []
    for i in range(200):
        e = x(f"op{i}", ts=i, dur=1, pid=1 + i % 3, tid=i % 5, cat=("cpu_op", "user_annotation", "")[i % 7 % 3])
        if not e["cat"]:
            del e["cat"]
        events.append(e)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(kineto(events)))
    trace = read_trace(str(path))
    idx = np.flatnonzero(trace.ph == ord("X"))
    cat = trace.cat[idx]
    fast, dense = _thread_cat_key(trace, idx, cat), _thread_cat_key(trace, idx, cat, limit=0)
    assert np.argsort(fast, kind="stable").tolist() == np.argsort(dense, kind="stable").tolist()
    assert (fast[:, None] == fast[None, :]).tolist() == (dense[:, None] == dense[None, :]).tolist()
    groups = {(e["pid"], e["tid"], e.get("cat")) for e in events}
    assert len(set(fast.tolist())) == len(set(dense.tolist())) == len(groups)


def test_no_clock_jump_warning_on_real_traces():
    samples = os.path.join(os.path.dirname(CORPUS), "..", "samples", "kineto_rpc")
    r = invoke("info", *(os.path.join(samples, f"worker{i}.json.gz") for i in (0, 1)))
    # (the only warnings: nothing links these two plain traces, so each clock is taken on trust)
    assert r.exit_code == 0 and "clock jump" not in r.output
    assert r.output.count("warning") == r.output.count("is linked to no other rank") == 2


def test_skip_bad_goes_on_and_says_what_was_skipped(tmp_path):
    good = [corpus("job_a_rank0.json"), corpus("truncated.json")]
    bad = [corpus("not_json.json"), corpus("missing_ts.json")]
    out = tmp_path / "o.json"
    r = invoke("combine", *good, *bad, "--rank-from", "order", "--skip-bad", "-o", out)
    assert r.exit_code == 0, r.output
    assert f"warning: skipped {bad[0]}: not valid JSON" in r.output
    assert f"warning: skipped {bad[1]}: event 2: missing 'ts'" in r.output
    summary = load_output(out)["tracemerge"]
    assert [s["path"] for s in summary["skipped"]] == bad
    assert summary["events"]["in"] == 6 + 4


def test_skip_bad_with_nothing_readable_fails():
    line = invoke("info", corpus("empty.json"), corpus("not_json.json"), "--skip-bad").error_line(EXIT_INPUT)
    assert "no readable input: all 2 files were skipped" in line


def test_skip_bad_still_refuses_writing_over_a_skipped_input(tmp_path):
    bad = tmp_path / "bad.json"
    shutil.copy(corpus("not_json.json"), bad)
    r = invoke("combine", corpus("truncated.json"), bad, "--skip-bad", "--force", "-o", bad)
    assert r.exit_code == 5 and "the output is also an input" in r.output
    assert bad.read_bytes() == open(corpus("not_json.json"), "rb").read()
