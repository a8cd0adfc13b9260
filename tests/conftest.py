"""Fixtures shared by the test modules; helpers that build traces are in tracefiles.py and
support/ (synth: jobs with known clocks, gen_kineto: Kineto-like ranks, pftrace: a reader)."""

import pytest
from support import gen_kineto


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="tests/test_golden.py: write the outputs as tests/golden/ files instead of comparing")


@pytest.fixture(scope="session")
def rank_files(tmp_path_factory):
    """Three generated gzip rank files (~0.4 MB of JSON each, RPC records in their blocks),
    made once for the whole run: read-only for the tests that use them."""
    return gen_kineto.generate(str(tmp_path_factory.mktemp("ranks")), 3, 0.4, seed=7, rank_files=True, gz=True, jobs=1)
