"""The HTML report and ``diff --html`` opened in a real browser (issue 35, item 20): Debian's
headless ``chromium`` loads each page with a probe added at its start and end — no error
(script, resource, console.error), every plot (each <svg>) laid out with a size and shapes
drawn in it — and a screenshot of the page is kept in ``test-artifacts/`` (git-ignored).
Skipped, with the reason, where no chromium is installed (.ci/run installs it when it can)."""

import json
import os
import re
import shutil
import subprocess

import pytest
from support import cli
from support.paths import ROOT, SAMPLES

ARTIFACTS = os.path.join(ROOT, "test-artifacts")
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH (apt-get install chromium; "
                                                        ".ci/run installs it where it runs as root)")

HEAD_PROBE = """<script>window.__errors=[];
addEventListener("error",e=>__errors.push(String(e.message||(e.target&&(e.target.src||e.target.href))||e)),true);
const __ce=console.error;console.error=(...a)=>{__errors.push(a.join(" "));__ce(...a)};</script>"""
TAIL_PROBE = """<script>addEventListener("load",()=>{
const plots=[...document.querySelectorAll("svg")].map(s=>{const r=s.getBoundingClientRect();
 const drawn=[...s.querySelectorAll("rect,line,path,polyline,circle,text")].filter(e=>{const b=e.getBBox();
 return b.width>0||b.height>0}).length;return {w:r.width,h:r.height,drawn}});
const p=document.createElement("pre");p.id="probe";
p.textContent=JSON.stringify({errors:__errors,plots,title:document.title});document.body.appendChild(p)});</script>"""
CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            "--no-first-run", "--allow-file-access-from-files"]


def browse(page, tmp_path):
    """(probe result, browser's console lines) of ``page`` rendered by chromium."""
    text = open(page, encoding="utf-8").read()
    probed = tmp_path / ("probed-" + os.path.basename(page))
    head = re.search(r"<head[^>]*>", text)
    assert head, "no <head>"
    body_end = text.rfind("</body>")
    body_end = len(text) if body_end < 0 else body_end
    probed.write_text(text[:head.end()] + HEAD_PROBE + text[head.end():body_end] + TAIL_PROBE + text[body_end:],
                      encoding="utf-8")
    r = subprocess.run([BROWSER, *CHROMIUM, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
                        f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probed.as_uri()],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    found = re.search(rb'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert found, "the probe did not run: " + r.stderr.decode(errors="replace")[-2000:]
    import html

    console = [line for line in r.stderr.decode(errors="replace").splitlines() if ":CONSOLE" in line]
    return json.loads(html.unescape(found.group(1).decode())), console


def screenshot(page, name, tmp_path):
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, name)
    if os.path.exists(shot):
        os.unlink(shot)
    r = subprocess.run([BROWSER, *CHROMIUM, f"--user-data-dir={tmp_path / 'profile-shot'}",
                        f"--screenshot={shot}", "--window-size=1280,2400", f"file://{os.path.abspath(page)}"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0 and os.path.exists(shot), r.stderr.decode(errors="replace")[-2000:]
    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1280, 2400)
    assert len(png) > 20_000, "a blank page compresses to almost nothing"
    return shot


def check(page, tmp_path, shot_name, plots_expected=True):
    source = open(page, encoding="utf-8").read()
    probe, console = browse(page, tmp_path)
    assert probe["errors"] == [] and console == [], (probe["errors"], console)
    plots = probe["plots"]
    assert len(plots) == source.count("<svg") and (len(plots) > 0) == plots_expected
    for k, plot in enumerate(plots):
        assert plot["w"] > 0 and plot["h"] > 0 and plot["drawn"] > 0, (k, plot)
    screenshot(page, shot_name, tmp_path)
    return probe


def test_the_report_page_renders_in_a_browser(tmp_path):
    page = tmp_path / "report.html"
    cli.run("report", *sorted(os.path.join(SAMPLES, "rpc_profiling", f) for f in ("rank0.json.gz", "rank1.json.gz")),
        "--analysis", "--html", page, "-o", tmp_path / "report.txt").ok()
    probe = check(page, tmp_path, "report.png")
    assert probe["title"]


def test_the_diff_page_renders_in_a_browser(tmp_path):
    page = tmp_path / "diff.html"
    cli.run("diff", os.path.join(SAMPLES, "threads_1"), os.path.join(SAMPLES, "threads_8"), "--html", page,
        "-o", tmp_path / "diff.txt").ok()
    check(page, tmp_path, "diff.png", plots_expected=False)  # the diff page is tables only


def test_the_probe_sees_a_broken_page(tmp_path):
    """The check can fail: a page whose script throws and whose plot has no size."""
    page = tmp_path / "broken.html"
    page.write_text("<html><head><title>x</title></head><body><svg width='0' height='0'></svg>"
                    "<script>undefinedFunction()</script></body></html>")
    probe, _ = browse(page, tmp_path)
    assert any("undefinedFunction" in e for e in probe["errors"])
    assert probe["plots"] == [{"w": 0, "h": 0, "drawn": 0}]
