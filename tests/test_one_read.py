"""Each command reads each input once: the bytes it reads of a file (by ``read`` or by a map
of it), in the parent and in its workers, are at most 1.05x the file's size.

The command runs in a process whose ``open`` and ``mmap`` count what they hand out of the
inputs (a test-only hook installed before the CLI starts; forked workers inherit it and
append to the same log)."""

import collections
import os

import pytest
from support import cli, gen_kineto

HOOK = r"""
import builtins, mmap, os, sys
inputs = {os.path.realpath(p) for p in os.environ["COUNT_INPUTS"].split(os.pathsep)}
log = os.open(os.environ["COUNT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

def note(path, n):
    if n:
        os.write(log, f"{path}\t{n}\n".encode())

class Counted:
    def __init__(self, f, path):
        self._f, self._path = f, path
    def read(self, *a):
        data = self._f.read(*a)
        note(self._path, len(data))
        return data
    def readinto(self, b):
        n = self._f.readinto(b)
        note(self._path, n or 0)
        return n
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self._f.close()
    def __iter__(self):
        for line in self._f:
            note(self._path, len(line))
            yield line

real_open = builtins.open
def counting_open(file, mode="r", *a, **k):
    f = real_open(file, mode, *a, **k)
    if isinstance(file, (str, bytes, os.PathLike)) and "r" in mode and os.path.realpath(file) in inputs:
        return Counted(f, os.path.realpath(file))
    return f
builtins.open = counting_open

class CountedMap(mmap.mmap):
    def __new__(cls, fileno, length, *a, **k):
        m = super().__new__(cls, fileno, length, *a, **k)
        path = os.path.realpath(f"/proc/self/fd/{fileno}")
        if path in inputs:
            note(path, len(m))  # the core's scan touches every byte of the map
        return m
mmap.mmap = CountedMap

from tracemerge.cli import main
sys.argv[0] = "tracemerge"
main()
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("one-read")
    return {"rank": gen_kineto.generate(str(root / "rank"), 3, 1.0, seed=5, jobs=1, rank_files=True),
            "kineto": gen_kineto.generate(str(root / "kineto"), 3, 1.0, seed=5, jobs=1)}


def read_per_input(tmp_path, paths, *args):
    log = tmp_path / "reads.log"
    os.environ["COUNT_INPUTS"] = os.pathsep.join(map(str, paths))
    os.environ["COUNT_LOG"] = str(log)
    try:
        r = cli.run(*args, code=HOOK, timeout=300)
    finally:
        del os.environ["COUNT_INPUTS"], os.environ["COUNT_LOG"]
    assert r.exit_code == 0, r.stderr
    total = collections.Counter({os.path.realpath(p): 0 for p in paths})
    for line in log.read_text().splitlines() if log.exists() else []:
        path, n = line.split("\t")
        total[path] += int(n)
    return {p: total[p] / os.path.getsize(p) for p in total}


COMMANDS = {
    "combine -j 1": lambda out: ["combine", "-o", out / "t.json", "-j", "1"],
    "combine -j 2": lambda out: ["combine", "-o", out / "t.json", "-j", "2"],
    "combine .pftrace": lambda out: ["combine", "-o", out / "t.pftrace", "-j", "2"],
    "combine --report": lambda out: ["combine", "-o", out / "t.json", "-j", "2", f"--report={out / 'r.txt'}"],
    "combine --critical-path": lambda out: ["combine", "-o", out / "t.json", "-j", "2", "--critical-path"],
    "report": lambda out: ["report", "-o", out / "r.txt"],
    "report --analysis": lambda out: ["report", "--analysis", "--format", "json", "-o", out / "r.json"],
    "export": lambda out: ["export", "-o", out / "tables", "-j", "2"],
}


@pytest.mark.parametrize("kind", ["rank", "kineto"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_input_is_read_once(inputs, kind, command, tmp_path):
    if command == "export":
        pytest.importorskip("pyarrow")
    paths = inputs[kind]
    args = COMMANDS[command](tmp_path)
    read = read_per_input(tmp_path, paths, args[0], *paths, *args[1:])
    assert all(0.99 <= share <= 1.05 for share in read.values()), read
