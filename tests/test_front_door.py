"""Nothing destroyed, the front door (issue 35, items 1, 2, 13, 14, 16, 17, 18, 19):
--force replaces only what tracemerge wrote, never an input or a special file; a killed
export's leftovers are removed by the next run; inputs that are pipes, devices, unreadable;
str/Path in the API; a merged trace fed back in; quoted globs on every command."""

import gzip
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest
from support import cli
from support.paths import ROOT

PS = os.path.join(ROOT, "samples", "parameter_server")
RANKS = [os.path.join(PS, f"rank{r}.json.gz") for r in range(3)]
with gzip.open(RANKS[0]) as _f:
    EVENTS0 = len(json.load(_f)["traceEvents"])   # rank 0's events, as info counts them


@pytest.fixture
def project(tmp_path):
    """The layout of item 1: proj/traces/rank*.json.gz and an unrelated proj/notes.txt."""
    proj = tmp_path / "proj"
    (proj / "traces").mkdir(parents=True)
    for p in RANKS:
        shutil.copy(p, proj / "traces")
    (proj / "notes.txt").write_text("mine\n")
    os.chmod(proj, 0o755)
    return proj


# item 1 --------------------------------------------------------------------------------

def test_export_force_never_deletes_a_directory_holding_its_inputs(project):
    before = sorted(os.listdir(project / "traces"))
    r = cli.invoke("export", "proj/traces/rank0.json.gz", "proj/traces/rank1.json.gz", "-o", "proj", "--force",
            cwd=project.parent)
    line = r.error_line(5)
    assert "holds the input" in line
    assert sorted(os.listdir(project / "traces")) == before
    assert (project / "notes.txt").read_text() == "mine\n"
    assert stat.S_IMODE(os.stat(project).st_mode) == 0o755


def test_export_force_never_replaces_a_directory_it_did_not_write(project, tmp_path):
    r = cli.invoke("export", *RANKS[:2], "-o", project, "--force")  # inputs elsewhere: still the user's directory
    assert "not written by tracemerge export" in r.error_line(5)
    assert (project / "notes.txt").read_text() == "mine\n"


def test_export_force_replaces_its_own_directory_with_a_plain_mode(tmp_path):
    out = tmp_path / "tables"
    assert cli.invoke("export", *RANKS[:2], "-o", out, "-q").exit_code == 0
    old = os.listdir(out)
    r = cli.invoke("export", *RANKS, "-o", out, "--force", "-q")
    assert r.exit_code == 0, r.stderr
    assert set(os.listdir(out)) >= set(old)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~umask  # not mkdtemp's 0700
    (out / "notes.txt").write_text("added by a user\n")  # now it holds something export did not write
    assert "not written by tracemerge export" in cli.invoke("export", *RANKS, "-o", out, "--force").error_line(5)
    assert (out / "notes.txt").exists()


# item 2 --------------------------------------------------------------------------------

def _special(tmp_path, kind):
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
        except PermissionError:
            pytest.skip("mknod needs root")
    else:
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    return path


@pytest.mark.parametrize("kind, force", [("fifo", True), ("chardev", True), ("socket", True), ("chardev", False)])
def test_combine_never_replaces_a_special_file(tmp_path, kind, force):
    path = _special(tmp_path, kind)
    mode = os.lstat(path).st_mode
    r = cli.invoke("combine", *RANKS, "-o", path, *(["--force"] if force else []))
    assert "not a regular file" in r.error_line(5)
    assert stat.S_IFMT(os.lstat(path).st_mode) == stat.S_IFMT(mode)  # still the FIFO / device / socket


def test_report_never_replaces_a_special_file(tmp_path):
    path = _special(tmp_path, "fifo")
    assert "not a regular file" in cli.invoke("report", *RANKS, "-o", path).error_line(5)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


def test_force_never_replaces_a_symbolic_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert "symbolic link" in cli.invoke("combine", *RANKS, "-o", link, "--force").error_line(5)
    assert os.path.islink(link) and real.read_text() == "{}"


# item 17 -------------------------------------------------------------------------------

def _leftovers(directory, name):
    return [e for e in os.listdir(directory) if e.startswith(f".{name}.tracemerge-")]


def test_a_sigkilled_export_leaves_nothing_the_next_run_does_not_remove(tmp_path):
    out = tmp_path / "pq"
    killed = False
    for _ in range(5):  # kill it while its temporary directory exists (a run takes ~1 s here)
        p = subprocess.Popen(cli.argv("export", *RANKS, "-o", out, "--force", "-q", "-j", "1"), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline and not _leftovers(tmp_path, "pq"):
            time.sleep(0.002)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
            killed = bool(_leftovers(tmp_path, "pq"))
        if killed:
            break
    assert killed, "never caught the export with its temporary directory"
    # a live run's temporary directory beside it is not touched
    live = tmp_path / f".pq.tracemerge-{os.getpid()}-{_boot()}-live"
    live.mkdir()
    r = cli.invoke("export", *RANKS, "-o", out, "--force", "-q")
    assert r.exit_code == 0, r.stderr
    assert _leftovers(tmp_path, "pq") == [live.name]
    assert (out / "tracemerge.json").exists()


def _boot():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip().replace("-", "")[:12]


# items 13, 14 ----------------------------------------------------------------------------

def test_process_substitution_is_read(tmp_path):
    """`info <(zcat rank0.json.gz)`: a pipe given on the command line is read whole."""
    r = cli.finished(subprocess.run(["bash", "-c", f'"{sys.executable}" -m tracemerge info <(zcat "{RANKS[0]}")'],
                                    capture_output=True, timeout=120, cwd=ROOT))
    assert r.exit_code == 0, r.stderr
    assert f"{EVENTS0} events" in r.stdout and "empty file" not in r.stderr


def test_a_fifo_with_no_writer_ends_with_exit_3(tmp_path):
    fifo = tmp_path / "nobody_writes"
    os.mkfifo(fifo)
    import glob
    import tempfile

    spools = os.path.join(tempfile.gettempdir(), "tracemerge-pipes-*")
    before = set(glob.glob(spools))
    t = time.monotonic()
    r = cli.invoke("info", RANKS[0], fifo, env={"TRACEMERGE_PIPE_WAIT": "1"})
    assert "no writer" in r.error_line(3)
    assert time.monotonic() - t < 30
    assert set(glob.glob(spools)) <= before  # nothing left of the temporary copies


@pytest.mark.parametrize("command, device", [("info", "/dev/zero"), ("combine", "/dev/urandom"),
                                             ("report", "/dev/zero"), ("offsets", "/dev/urandom")])
def test_endless_devices_are_refused(tmp_path, device, command):
    out = ["-o", tmp_path / "t.json"] if command == "combine" else []
    r = cli.invoke(command, device, *out)
    assert "character device" in r.error_line(3)


def test_a_device_is_skipped_by_skip_bad():
    r = cli.invoke("info", "/dev/zero", RANKS[0], "--skip-bad")
    assert r.exit_code == 0, r.stderr
    assert "skipped /dev/zero" in r.stderr and f"{EVENTS0} events" in r.stdout


NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


def test_an_unreadable_input_exits_3_and_skip_bad_skips_it(tmp_path):
    """chmod 000 stops root only without its DAC override capabilities (setpriv drops them)."""
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux); a user other than root cannot make root-proof files")
    good, bad = tmp_path / "rank0.json.gz", tmp_path / "rank1.json.gz"
    shutil.copy(RANKS[0], good)
    shutil.copy(RANKS[1], bad)
    os.chmod(bad, 0o000)
    run = [*NO_DAC, *cli.argv("info", good, bad)]
    r = cli.finished(subprocess.run(run, capture_output=True, timeout=60, cwd=ROOT))
    line = r.error_line(3)
    assert str(bad) in line and "ermission denied" in line
    r = cli.finished(subprocess.run(run + ["--skip-bad"], capture_output=True, timeout=60, cwd=ROOT))
    assert r.exit_code == 0, r.stderr
    assert f"skipped {bad}" in r.stderr and f"{EVENTS0} events" in r.stdout


# item 16 -------------------------------------------------------------------------------

def test_the_api_takes_one_str_or_path(tmp_path):
    import pathlib

    import tracemerge
    from tracemerge.tables.export import export

    for one in (RANKS[0], pathlib.Path(RANKS[0])):
        tables = tracemerge.load(one)
        assert [i.events for i in tables.job.infos] == [EVENTS0] and len(tables.events) >= EVENTS0
        assert len(tracemerge.Job.open(one).infos) == 1
    job = tracemerge.Job.open([pathlib.Path(p) for p in RANKS], align=tracemerge.AlignRequest())
    assert len(tracemerge.load([pathlib.Path(p) for p in RANKS]).job.infos) == 3
    assert tracemerge.combine(job, None, tmp_path / "t.json")["events"]["in"] == sum(i.events for i in job.infos)
    assert export(job, tmp_path / "pq")["inputs"] and (tmp_path / "pq" / "tracemerge.json").exists()


# item 18 -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "trace.json"
    r = cli.invoke("combine", *RANKS, "-o", out, "-q")
    assert r.exit_code == 0, r.stderr
    return out


@pytest.mark.parametrize("command, extra, with_ranks", [("combine", ["-o", "OUT.json"], True),
                                                        ("combine", ["-o", "OUT.json"], False),
                                                        ("offsets", [], False), ("export", ["-o", "OUT"], True),
                                                        ("whatif", ["--speedup", "x=2"], False)])
def test_a_merged_trace_fed_back_is_refused_naming_its_rank_files(tmp_path, merged, command, extra, with_ranks):
    extra = [str(tmp_path / e) if e.startswith("OUT") else e for e in extra]
    r = cli.invoke(command, *(RANKS if with_ranks else []), merged, *extra)
    line = r.error_line(3)
    assert "a merged trace written by tracemerge combine" in line and "rank0.json.gz" in line
    assert "--rank-from order" not in r.stderr


def test_a_merged_trace_is_still_read_alone_by_report_and_info(merged):
    assert cli.invoke("report", merged).exit_code == 0
    r = cli.invoke("info", merged)
    assert r.exit_code == 0 and "merged trace" in r.stdout


# item 19 -------------------------------------------------------------------------------

@pytest.mark.parametrize("command, extra", [("combine", ["-o", "OUT.json"]), ("report", []), ("info", []),
                                            ("offsets", []), ("export", ["-o", "OUT"]),
                                            ("whatif", ["--speedup", "aten::addmm=2"])])
def test_every_command_takes_a_quoted_glob(tmp_path, command, extra):
    extra = [str(tmp_path / e) if e.startswith("OUT") else e for e in extra]
    r = cli.invoke(command, os.path.join(PS, "rank*.json.gz"), *extra, "-q")
    assert r.exit_code == 0, r.stderr
    if command == "combine":  # one callback expands FILES for every command
        nothing = cli.invoke(command, os.path.join(PS, "nothing*.json.gz"), *extra)
        assert "matches no file" in nothing.error_line(2)


def test_one_rank_file_of_a_current_capture_is_not_called_an_older_capture():
    r = cli.invoke("report", RANKS[0])
    assert r.exit_code == 0, r.stderr
    err = r.stderr
    assert "older tracemerge" not in err
    # the calls with the other ranks are said to lack those ranks' files
    assert "have no input file: give every rank's file" in err
