"""The compiled core for a test run of the checkout.

The tests import the checkout (its directory comes first on sys.path), where ``pip install``
never built the core: without this, every test of the compiled core would skip. Before any
test module imports tracemerge, :func:`ensure` builds ``tracemerge/native/_core`` and
``_proto`` in place with the project's own setup.py when their shared objects are missing or
older than their C sources, under a file lock (concurrent pytest runs of one checkout build
it once). Each is built in a directory of its own and renamed into place, so a run that
already loaded the previous one keeps a whole file.

When a C compiler is there and the build fails, the run must stop: :class:`BuildFailed`.
Without a compiler (or with ``TRACEMERGE_TESTS_BUILD=0``) nothing is built and the tests
of the compiled core skip; :func:`ensure` says why, once, in the run's header.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Iterator

NATIVE = os.path.join("tracemerge", "native")
EXTENSIONS = ("_core", "_proto")
SKIP_ENV = "TRACEMERGE_TESTS_BUILD"


class BuildFailed(Exception):
    """A C compiler was there and the compiled core did not build."""


def shared_object(root: str, name: str) -> str:
    """Where the import system looks for the extension first (e.g. _core.cpython-311-x86_64-linux-gnu.so)."""
    return os.path.join(root, NATIVE, name + importlib.machinery.EXTENSION_SUFFIXES[0])


def stale(root: str) -> list[str]:
    """The extensions whose shared object is missing or older than their C source."""
    out = []
    for name in EXTENSIONS:
        so, source = shared_object(root, name), os.path.join(root, NATIVE, name + ".c")
        if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(source):
            out.append(name)
    return out


def compiler() -> str | None:
    """The C compiler setuptools would run (CC, else the one Python was built with), if it is on PATH."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(cc)
    return shutil.which(words[0]) if words else None


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): concurrent runs may build twice, each renames a whole file
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure(root: str) -> str:
    """Build the compiled core of the checkout at ``root`` where it is stale; returns a line
    for the run's header, raises :class:`BuildFailed` when a compiler failed."""
    if os.environ.get(SKIP_ENV, "").strip() == "0":
        return f"compiled core: not built ({SKIP_ENV}=0); {', '.join(stale(root)) or 'none'} stale"
    if not stale(root):
        return "compiled core: up to date"
    cc = compiler()
    if cc is None:
        old = [name for name in stale(root) if os.path.exists(shared_object(root, name))]
        if old:
            return f"compiled core: {', '.join(old)} older than its C source and no C compiler on PATH: tested as built"
        return ("compiled core: not built (no C compiler on PATH); the tests of the compiled core skip, "
                "the Python path is tested")
    build = os.path.join(root, "build")
    os.makedirs(build, exist_ok=True)
    with _locked(os.path.join(build, "tests-core.lock")):
        todo = stale(root)  # another run may have built it while this one waited
        if not todo:
            return "compiled core: up to date (built by a concurrent run)"
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=build, prefix="tests-core-") as tmp:
            result = subprocess.run(
                [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", os.path.join(tmp, "lib"),
                 "--build-temp", os.path.join(tmp, "temp")],
                cwd=root, capture_output=True, text=True)
            built = {name: os.path.join(tmp, "lib", os.path.relpath(shared_object(root, name), root))
                     for name in todo}
            missing = [name for name, path in built.items() if not os.path.exists(path)]
            if result.returncode or missing:
                log = (result.stdout + result.stderr).strip().splitlines()
                raise BuildFailed(
                    f"the compiled core ({', '.join(missing or todo)}) did not build with {cc} although it is "
                    f"there (python setup.py build_ext, exit {result.returncode}); its last lines:\n  "
                    + "\n  ".join(log[-15:])
                    + f"\nFix the build (e.g. the Python headers: python3-dev), or run the tests without the "
                      f"compiled core: {SKIP_ENV}=0")
            for name, path in built.items():
                os.replace(path, shared_object(root, name))  # atomic: a loaded one keeps its file
        return f"compiled core: built {', '.join(todo)} with {cc} in {time.monotonic() - started:.1f} s"
