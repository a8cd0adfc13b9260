"""Nothing destroyed, the front door (issue 35, items 1, 2, 13, 14, 16, 17, 18, 19):
--force replaces only what tracemerge wrote, never an input or a special file; a killed
export's leftovers are removed by the next run; inputs that are pipes, devices, unreadable;
str/Path in the API; a merged trace fed back in; quoted globs on every command."""

import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PS = os.path.join(ROOT, "samples", "parameter_server")
RANKS = [os.path.join(PS, f"rank{r}.json.gz") for r in range(3)]


def cli(*args, cwd=ROOT, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "tracemerge", *map(str, args)], capture_output=True,
                          timeout=timeout, cwd=cwd, **kw)


def one_line_error(r, code):
    err = r.stderr.decode()
    assert r.returncode == code, err
    errors = [line for line in err.splitlines() if line.startswith("tracemerge: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


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
    r = cli("export", "proj/traces/rank0.json.gz", "proj/traces/rank1.json.gz", "-o", "proj", "--force",
            cwd=project.parent)
    line = one_line_error(r, 5)
    assert "holds the input" in line
    assert sorted(os.listdir(project / "traces")) == before
    assert (project / "notes.txt").read_text() == "mine\n"
    assert stat.S_IMODE(os.stat(project).st_mode) == 0o755


def test_export_force_never_replaces_a_directory_it_did_not_write(project, tmp_path):
    r = cli("export", *RANKS[:2], "-o", project, "--force")  # inputs elsewhere: still the user's directory
    assert "not written by tracemerge export" in one_line_error(r, 5)
    assert (project / "notes.txt").read_text() == "mine\n"


def test_export_force_replaces_its_own_directory_with_a_plain_mode(tmp_path):
    out = tmp_path / "tables"
    assert cli("export", *RANKS[:2], "-o", out, "-q").returncode == 0
    old = os.listdir(out)
    r = cli("export", *RANKS, "-o", out, "--force", "-q")
    assert r.returncode == 0, r.stderr
    assert set(os.listdir(out)) >= set(old)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~umask  # not mkdtemp's 0700
    (out / "notes.txt").write_text("added by a user\n")  # now it holds something export did not write
    assert "not written by tracemerge export" in one_line_error(cli("export", *RANKS, "-o", out, "--force"), 5)
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


@pytest.mark.parametrize("kind", ["fifo", "chardev", "socket"])
@pytest.mark.parametrize("force", [True, False])
def test_combine_never_replaces_a_special_file(tmp_path, kind, force):
    path = _special(tmp_path, kind)
    mode = os.lstat(path).st_mode
    r = cli("combine", *RANKS, "-o", path, *(["--force"] if force else []))
    assert "not a regular file" in one_line_error(r, 5)
    assert stat.S_IFMT(os.lstat(path).st_mode) == stat.S_IFMT(mode)  # still the FIFO / device / socket


def test_report_never_replaces_a_special_file(tmp_path):
    path = _special(tmp_path, "fifo")
    assert "not a regular file" in one_line_error(cli("report", *RANKS, "-o", path), 5)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


def test_force_never_replaces_a_symbolic_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert "symbolic link" in one_line_error(cli("combine", *RANKS, "-o", link, "--force"), 5)
    assert os.path.islink(link) and real.read_text() == "{}"


# item 17 -------------------------------------------------------------------------------

def _leftovers(directory, name):
    return [e for e in os.listdir(directory) if e.startswith(f".{name}.tracemerge-")]


def test_a_sigkilled_export_leaves_nothing_the_next_run_does_not_remove(tmp_path):
    out = tmp_path / "pq"
    killed = False
    for _ in range(5):  # kill it while its temporary directory exists (a run takes ~1 s here)
        p = subprocess.Popen([sys.executable, "-m", "tracemerge", "export", *RANKS, "-o", out, "--force", "-q",
                              "-j", "1"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    r = cli("export", *RANKS, "-o", out, "--force", "-q")
    assert r.returncode == 0, r.stderr
    assert _leftovers(tmp_path, "pq") == [live.name]
    assert (out / "tracemerge.json").exists()


def _boot():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip().replace("-", "")[:12]
