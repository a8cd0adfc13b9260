"""Hypothesis over every class of bad input (tests/corpus/bad_inputs.py): any rank file
(first or not), any event or record, any of the class's bad values, any of the five
commands — the documented outcome, never exit 1, nothing left after an error, no event lost.

TRACEMERGE_FUZZ_EXAMPLES sets the examples per class (default 6; the adversarial run of
issue 16 is ~60)."""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from corpus.bad_inputs import CLASSES, COMMANDS, write_case
from test_bad_inputs import check_run

SETTINGS = settings(max_examples=int(os.environ.get("TRACEMERGE_FUZZ_EXAMPLES", 6)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("name", sorted(CLASSES))
@SETTINGS
@given(data=st.data())
def test_every_member_of_every_class_ends_as_documented(name, data):
    bad = CLASSES[name]
    target = data.draw(st.sampled_from(bad.targets), label="target")
    pick = data.draw(st.integers(0, 40), label="pick")
    value = data.draw(st.sampled_from(bad.values), label="value")
    command = data.draw(st.sampled_from(COMMANDS), label="command")
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_case(tmp, bad, target, pick, value)
        check_run(bad, command, paths, tmp)
