"""The library API the CLI sits on, and the promise that merging and reporting never import torch."""

import glob
import os
import subprocess
import sys

from support.ranks import load_output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "rpc_profiling", "rank*.json.gz")))


def test_session_align_combine(tmp_path):
    from tracemerge import Session, combine
    session = Session.open(SAMPLES)
    alignment = session.align("auto")
    summary = combine(session, alignment, str(tmp_path / "t.json"))
    assert summary == load_output(tmp_path / "t.json")["tracemerge"]
    assert [r["rank"] for r in summary["alignment"]] == session.ranks == [0, 1]
    assert summary["alignment"][1]["method"] != "wall"  # the samples carry RPC records to align by


def test_merging_and_reporting_never_import_torch(tmp_path):
    code = f"""
import sys
from tracemerge.cli import main
for args in (["combine", *{SAMPLES!r}, "-o", {str(tmp_path / 'a.json')!r}],
             ["combine", *{SAMPLES!r}, "-o", {str(tmp_path / 'a.pftrace')!r}, "--report"],
             ["report", *{SAMPLES!r}], ["offsets", *{SAMPLES!r}], ["info", *{SAMPLES!r}]):
    try:
        main(args)
    except SystemExit as e:
        assert e.code == 0, (args, e.code)
assert "torch" not in sys.modules, "torch was imported"
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
