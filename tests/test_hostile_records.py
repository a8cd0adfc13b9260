"""Fields trusted as written (issue 48, class 1): every field read from any input —
journals, rank-file blocks, merged summaries read back, served ops — goes through one
schema check that names the file, the field and the value (exit 3), times that run
backwards included. Each input is rebuilt here from the bundled samples or by hand."""

import copy
import glob
import gzip
import json
import os
import traceback

import pytest
from support import cli
from support.paths import ROOT
from support.ranks import load_output, write
from test_native_pairing import _call, _files, _op

from tracemerge.commands.summary_lines import merged_lines
from tracemerge.errors import TracemergeError
from tracemerge.report import build as reports
from tracemerge.report.diff import diff_reports
from tracemerge.report.render import FORMATS, render, render_diff

SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "rpc_profiling", "rank*.json.gz")))
COMMANDS = {"info": lambda files, out: ["info", *files],
            "report": lambda files, out: ["report", *files],
            "combine": lambda files, out: ["combine", *files, "-o", str(out / "t.json")]}


def _sample(rank):
    with gzip.open(SAMPLES[rank]) as f:
        return json.load(f)


def _journal_of(doc, path, change=None):
    """The journal rank ``doc``'s capture would have left had it died before writing its
    file: its meta, then each of its RPC records as a line (``change`` edits the lines)."""
    block = doc["tracemerge"]
    meta = {k: v for k, v in block.items() if not isinstance(v, list)}
    lines = [{"tracemerge_journal": 1, "meta": meta}] + [{"rpc": dict(r)} for r in block["rpcs"]]
    if change:
        change(lines)
    lines.append({"alive_ns": block["profile_stop_ns"]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


@pytest.mark.parametrize("change, named", [
    (lambda lines: lines[1]["rpc"].update(rpc_id=[1, 2]), "journal line 2: rpc: missing or bad 'rpc_id' ([1, 2])"),
    (lambda lines: lines[2]["rpc"].update(role={}), "journal line 3: rpc: missing or bad 'role' ({})"),
    (lambda lines: lines.append({"collective": {"group": [0], "seq": 1, "start_ns": 5}}),
     "collective: missing or bad 'group' ([0])"),
    (lambda lines: lines.append({"collective": {"group": "0", "op": {"a": 1}, "seq": 1, "start_ns": 5}}),
     "collective: 'op' is not a str"),
    (lambda lines: lines.append({"collective": {"group": "0", "seq": 1, "start_ns": [5]}}),
     "collective: missing or bad 'start_ns' ([5])"),
])
def test_a_journal_record_that_cannot_make_its_key_is_named(tmp_path, change, named):
    caller = str(tmp_path / "rank0.json")
    with open(caller, "w") as f:
        json.dump(_sample(0), f)
    journal = _journal_of(_sample(1), tmp_path / "rank1.journal", change)
    # every command reads the journal through the same check: each is run on the first case
    for command in sorted(COMMANDS) if "rpc_id" in named else ["info"]:
        err = cli.run(*COMMANDS[command]([caller, journal], tmp_path)).error_line(3, only=True)
        assert f"{journal}: " in err and named in err
        assert sorted(os.listdir(tmp_path)) == ["rank0.json", "rank1.journal"]


@pytest.mark.parametrize("value", [True, {"alive_ns": 5}, "x", {"alive_ns": "x", "closed": False, "cut": False}])
def test_a_rank_files_own_journal_key_is_named(tmp_path, value):
    paths = []
    for rank in (0, 1):
        doc = _sample(rank)
        if rank == 1:
            doc["tracemerge"]["journal"] = value
        paths.append(str(tmp_path / f"rank{rank}.json"))
        with open(paths[-1], "w") as f:
            json.dump(doc, f)
    for command in sorted(COMMANDS) if value is True else ["report"]:
        err = cli.run(*COMMANDS[command](paths, tmp_path)).error_line(3, only=True)
        assert f"{paths[1]}: 'tracemerge.journal' is not a journal's ending" in err


@pytest.mark.parametrize("where, change, named", [
    ("callee", lambda rec: rec.update(end_ns=rec["start_ns"] - 1000), "'end_ns'"),
    ("caller", lambda rec: rec.update(complete_ns=rec["send_ns"] - 5), "'complete_ns'"),
])
def test_a_record_whose_times_run_backwards_is_named(tmp_path, where, change, named):
    docs = [_sample(0), _sample(1)]
    rank = 1 if where == "callee" else 0
    change(docs[rank]["tracemerge"]["rpcs"][0])
    paths = []
    for n, doc in enumerate(docs):
        paths.append(str(tmp_path / f"rank{n}.json"))
        with open(paths[-1], "w") as f:
            json.dump(doc, f)
    for command in ("report", "combine"):
        err = cli.run(*COMMANDS[command](paths, tmp_path)).error_line(3, only=True)
        assert f"{paths[rank]}: tracemerge.rpcs[0]: {named}" in err and "its times run backwards" in err


def test_a_served_op_that_ends_before_it_starts_is_named(tmp_path):
    calls = [_call(0, 0, 100), _call(1, 200, 300)]
    paths = _files(tmp_path, calls, [_op(210, 250, 11), _op(10, 40, 12)])
    callee = load_output(paths[1])
    op = callee["tracemerge"]["served_ops"][1]
    op["end_ns"] = op["start_ns"] - 30_000  # the record runs backwards, its event does not
    write(paths[1], callee)
    err = cli.run("report", *paths).error_line(3, only=True)
    assert "tracemerge.served_ops[1]: 'end_ns'" in err and "its times run backwards" in err


def test_served_ops_with_int_and_string_tids_are_drawn(tmp_path):
    calls = [_call(0, 0, 100), _call(1, 200, 300)]
    ops = [_op(210, 250, "11"), _op(10, 40, 12)]
    paths = _files(tmp_path, calls, ops)
    for out in ("t.json", "t.pftrace"):
        r = cli.run("combine", *paths, "-o", tmp_path / out)
        assert r.exit_code == 0, r.stderr
    remote = [e for e in load_output(tmp_path / "t.json")["traceEvents"] if e.get("name", "").endswith("#remote")]
    assert sorted(e["args"]["rpc_id"] for e in remote) == ["0:0", "0:1"]
    r = cli.run("export", *paths, "-o", tmp_path / "tables")
    assert r.exit_code == 0, r.stderr


BAD_VALUES = [None, "x", -1, 2**70, 1.5, [], {}, True]


def _places(value, at=()):
    """Every place in a JSON value (a list's first item standing for the others)."""
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _places(v, at + (k,))
    elif isinstance(value, list) and value:
        yield from _places(value[0], at + (0,))


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "merged.json"
    r = cli.run("combine", *SAMPLES, "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    return str(out)


def test_a_merged_summary_read_back_is_checked_field_by_field(merged, tmp_path):
    """Every place of a real merged trace's summary given each wrong kind of value: info's
    lines, the report in every format and a diff against the good trace either succeed or
    name the file (a TracemergeError: one line, exit 3) — never another exception."""
    with open(merged) as f:
        doc = json.load(f)
    good = reports.merged_report(reports.read_merged(merged))
    target = str(tmp_path / "m.json")
    crashes, refused, runs = [], 0, 0
    for place in list(_places(doc["tracemerge"]))[1:]:
        for value in BAD_VALUES:
            bad = copy.deepcopy(doc)
            holder = bad["tracemerge"]
            for key in place[:-1]:
                holder = holder[key]
            holder[place[-1]] = value
            with open(target, "w") as f:
                json.dump(bad, f)
            runs += 1
            try:
                trace = reports.read_merged(target)
                if trace is None:
                    continue
                merged_lines(target, trace)
                report = reports.merged_report(trace)
                for fmt in FORMATS:
                    render(report, fmt)
                diff = diff_reports(good, report, [merged], [target])
                for fmt in FORMATS:
                    render_diff(diff, fmt)
            except TracemergeError as e:
                assert str(e).startswith(f"{target}: "), str(e)
                refused += 1
            except Exception as e:  # noqa: BLE001 - what the test is for
                crashes.append((place, value, f"{type(e).__name__}: {e}", traceback.format_exc(limit=-1)))
    assert runs > 800 and refused > 100
    assert not crashes, crashes[:5]


def test_a_bad_merged_summary_is_one_line_on_every_reader(merged, tmp_path):
    with open(merged) as f:
        doc = json.load(f)
    doc["tracemerge"]["records"][0]["rpcs"][0]["send_ns"] = "x"
    target = tmp_path / "m.json"
    target.write_text(json.dumps(doc))
    for command in (["info", target], ["report", target], ["diff", merged, target]):
        err = cli.run(*command).error_line(3, only=True)
        assert f"{target}: tracemerge.records[0].rpcs[0]: 'send_ns' is not integer ns ('x')" in err
