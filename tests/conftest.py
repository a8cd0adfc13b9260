"""Fixtures shared by the test modules; the helpers are in support/ (README.md there: cli runs
the command, ranks builds rank files, jobs runs real torch jobs, synth: jobs with known clocks,
gen_kineto: Kineto-like ranks, pftrace: a reader, golden: the golden files' layout, corebuild:
the compiled core of the checkout)."""

import importlib.util
import os

import pytest
from support import corebuild, gen_kineto

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE_LINE = pytest.StashKey[str]()


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="tests/test_golden.py: write the outputs as tests/golden/ files instead of comparing")


def pytest_configure(config):
    """Build the checkout's compiled core before any test module imports tracemerge (see
    support/corebuild.py); a compiler that fails stops the run."""
    spec = importlib.util.find_spec("tracemerge")
    origin = os.path.realpath(spec.origin) if spec and spec.origin else ""
    if not origin.startswith(os.path.join(os.path.realpath(ROOT), "")):
        config.stash[CORE_LINE] = f"compiled core: as installed ({os.path.dirname(origin)})"
        return
    try:
        config.stash[CORE_LINE] = corebuild.ensure(ROOT)
    except corebuild.BuildFailed as e:
        pytest.exit(f"tracemerge tests: {e}", returncode=pytest.ExitCode.INTERNAL_ERROR)


def pytest_report_header(config):
    return config.stash.get(CORE_LINE, None)


@pytest.fixture(scope="session")
def rank_files(tmp_path_factory):
    """Three generated gzip rank files (~0.4 MB of JSON each, RPC records in their blocks),
    made once for the whole run: read-only for the tests that use them."""
    return gen_kineto.generate(str(tmp_path_factory.mktemp("ranks")), 3, 0.4, seed=7, rank_files=True, gz=True, jobs=1)
