"""A fault that breaks a recorded response (`hashreplay_fault(error=…, after_chunks=N)`) in a
recording mode with nothing recorded yet: the call is recorded whole and the fault applies
from the next replay (docs/scenarios.md, "Faults and hangs"); in replay mode it is a miss
that names the command."""

from __future__ import annotations

import json

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest"
asyncio_default_fixture_loop_scope = "function"

# the project opts in to hashreplay (docs/design.md §16 Activation)
[tool.hashreplay]
"""

TESTS = """
import os
import httpx2, pytest

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
BODY = {"model": "gpt-fake-1", "stream": True, "messages": [{"role": "user", "content": "cut me"}]}

@pytest.mark.hashreplay_fault(error="read_timeout", after_chunks=1)
def test_partial_answer():
    with httpx2.stream("POST", URL, json=BODY) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        with pytest.raises(httpx2.ReadTimeout):
            list(lines)

@pytest.mark.hashreplay_fault(error="disconnect", after_chunks=0, endpoint="/chat/completions")
def test_tolerant():
    try:
        httpx2.post(URL, json={**BODY, "stream": False}).json()
    except httpx2.RemoteProtocolError:
        pass
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_app=TESTS)
    return pytester


@pytest.mark.parametrize("mode", ["record-if-missing", "record"])
def test_a_breaking_fault_records_first_then_applies_on_replay(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("INFERENCE_MODE", mode)
    first = project.runpytest("-W", "always")
    # the live stream was whole, so the test that expects the fault fails, saying why
    first.assert_outcomes(passed=1, failed=1)
    first.stdout.fnmatch_lines(
        [
            "*hashreplay: test_app.py::test_partial_answer: hashreplay_fault(error='read_timeout',"
            " after_chunks=1) had no recorded response to break, so the call was made live and"
            " recorded whole; the fault applies from the next replay:"
            " pytest test_app.py::test_partial_answer",
        ]
    )
    # a test that passes anyway is told with a warning
    first.stdout.fnmatch_lines(
        [
            "*HashReplayWarning: hashreplay: test_app.py::test_tolerant: hashreplay_fault(error="
            "'disconnect', after_chunks=0, endpoint='/chat/completions') had no recorded *"
        ]
    )
    assert "record the test without the marker" not in first.stdout.str()
    files = [json.loads(p.read_text()) for p in project.path.rglob("recordings/*.json")]
    assert len(files) == 2
    for stored in files:
        assert "ended" not in stored["response"]  # recorded whole, never cut by the fault
        assert stored["response"]["status"] == 200
    assert len(upstream.calls) == 2

    # the next run replays, and the fault breaks the recorded stream
    upstream.stop()
    monkeypatch.setenv("INFERENCE_MODE", "record-if-missing")
    again = project.runpytest("-W", "always")
    again.assert_outcomes(passed=2)
    assert "had no recorded response" not in again.stdout.str()
    monkeypatch.delenv("INFERENCE_MODE")
    project.runpytest().assert_outcomes(passed=2)


def test_replay_without_the_recording_names_the_command(project: pytest.Pytester) -> None:
    result = project.runpytest("test_app.py::test_partial_answer")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*hashreplay_fault(error='read_timeout', after_chunks=1) breaks a recorded response,"
            " and this request has none left to break: record it first in record-if-missing"
            " mode (the fault applies from the next replay):"
            " INFERENCE_MODE=record-if-missing pytest test_app.py::test_partial_answer*",
        ]
    )
