"""`hashreplay.wait_hanging(timeout=…)` that sees no hanging request names the timeout it
really waited, sync and async (docs/scenarios.md, "Faults and hangs")."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.hashreplay]

[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest"
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
"""

TESTS = """
import time
import pytest
from hashreplay.engine.faults import HangTimeout

@pytest.mark.hashreplay_fault(hang=True)
def test_sync(hashreplay):
    start = time.monotonic()
    with pytest.raises(HangTimeout) as caught:
        hashreplay.wait_hanging(timeout=0.5)
    assert time.monotonic() - start >= 0.5
    raise AssertionError(str(caught.value))

@pytest.mark.hashreplay_fault(hang=True)
async def test_async(hashreplay):
    start = time.monotonic()
    with pytest.raises(HangTimeout) as caught:
        await hashreplay.wait_hanging(timeout=0.25)
    assert time.monotonic() - start >= 0.25
    raise AssertionError(str(caught.value))

def test_bad_timeout(hashreplay):
    with pytest.raises(TypeError) as caught:
        hashreplay.wait_hanging(timeout="5")
    raise AssertionError(str(caught.value))
"""


def test_the_timeout_message_names_the_real_wait(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_hang=TESTS)
    result = pytester.runpytest("-p", "no:randomly")
    # each test re-raises the message it got, so the output shows it
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: no request of test 'test_hang.py::test_sync' was hanging within"
            " 0.5 s (the timeout given to wait_hanging)*",
            "*AssertionError: no request of test 'test_hang.py::test_async' was hanging within"
            " 0.25 s (the timeout given to wait_hanging)*",
            "*AssertionError: wait_hanging(timeout='5'): the timeout must be a number of"
            " seconds >= 0*",
        ]
    )
    assert "within 0 s" not in out
