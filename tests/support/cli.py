"""The one way the tests run the command: :func:`invoke` in this process (click's CliRunner),
:func:`run` as its own process (``python -m tracemerge`` from the checkout's root), both
giving one :class:`Result`; :func:`argv` is the command line for a process a test drives
itself (Popen: signals, pipes, a server)."""

import dataclasses
import inspect
import os
import subprocess
import sys

from .paths import ROOT

ERROR = "tracemerge: error: "


@dataclasses.dataclass(frozen=True)
class Result:
    """How one run of the command ended: its exit code, what it wrote to stdout and stderr
    (text), and stdout's bytes (a binary output written to ``-o -``). ``output`` is stdout
    and stderr together, as a terminal shows them (in-process: in the order written)."""

    exit_code: int
    stdout: str
    stderr: str
    output: str
    stdout_bytes: bytes = b""

    def ok(self):
        """This result, checked: the run ended with exit 0 (else the test fails with its output)."""
        assert self.exit_code == 0, f"exit {self.exit_code}\n{self.output}"
        return self

    def error_line(self, code, *named, only=False):
        """The run's one ``tracemerge: error:`` line, checked: the run ended with ``code``,
        wrote exactly one such line, no traceback and no internal error, and the line holds
        each of ``named`` (a file's name, the problem); with ``only``, stderr holds nothing
        else (no warning before it)."""
        where = f"exit {self.exit_code}\n{self.output}"
        assert self.exit_code == code, where
        assert "Traceback" not in self.output and "internal error" not in self.output, where
        errors = [line for line in self.output.splitlines() if line.startswith(ERROR)]
        assert len(errors) == 1, where
        assert not only or self.stderr.strip() == errors[0], where
        for part in named:
            assert str(part) in errors[0], (part, errors[0])
        return errors[0]


def argv(*args, code=None):
    """``python -m tracemerge ARGS`` (``python -c CODE ARGS`` with ``code``) as a list; an
    argument in bytes stays bytes (a file name that is not UTF-8), any other becomes text."""
    head = ["-c", code] if code else ["-m", "tracemerge"]
    return [sys.executable, *head, *(a if isinstance(a, bytes) else str(a) for a in args)]


def invoke(*args, env=None, input=None, cwd=None, **extra):
    """The command in this process (from ``cwd`` when given), under Python's default recursion
    limit as in a real run (hypothesis raises the limit while a test runs; with it raised, deep
    args overflow the C stack of a forked worker before any RecursionError); ``extra`` goes to
    the command's ``main()`` (``terminal_width``). An exception the command lets out (not its
    exit) is raised here, traceback and all: no test expects one."""
    # imported here: a test module that only runs processes leaves tracemerge unimported
    from click.testing import CliRunner

    from tracemerge.cli import main

    limit, before = sys.getrecursionlimit(), os.getcwd()
    sys.setrecursionlimit(max(1000, len(inspect.stack(0)) + 900))
    try:
        if cwd is not None:
            os.chdir(cwd)
        r = CliRunner().invoke(main, [str(a) for a in args], env=env, input=input, **extra)
    finally:
        os.chdir(before)
        sys.setrecursionlimit(limit)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return Result(r.exit_code, r.stdout, r.stderr, r.output, r.stdout_bytes)


def run(*args, timeout=120, cwd=ROOT, env=None, input=None, code=None, **popen):
    """The command as its own process, run from ``cwd`` (the checkout's root) and waited for
    at most ``timeout`` s; ``code`` runs instead of ``python -m tracemerge`` (a command
    started some other way: its entry point, a module loaded first)."""
    return finished(subprocess.run(argv(*args, code=code), capture_output=True, timeout=timeout, cwd=cwd, env=env,
                                   input=input.encode() if isinstance(input, str) else input, **popen))


def finished(done):
    """A process the test started its own way (through a shell, with capabilities dropped),
    run with ``capture_output``, read as a :class:`Result`."""
    out, err = (s.decode(errors="replace") for s in (done.stdout, done.stderr))
    return Result(done.returncode, out, err, out + err, done.stdout)
