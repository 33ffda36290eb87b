"""The `hashreplay` fixture's `calls` (docs/scenarios.md, "The test's calls"): this test's
exchanges in order, through real pytest runs against a fake upstream that answers with fresh
random ids, in each mode: recorded, then replayed, then live."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import FakeUpstream, Scripted

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:randomly"

[tool.hashreplay]
"""

SUITE = """
import os
import httpx2

URL = os.environ["FAKE_URL"]
EXPECTED = os.environ["EXPECTED_SOURCE"]


def test_calls(hashreplay):
    assert hashreplay.calls == []
    with httpx2.Client() as c:
        body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "hi"}]}
        assert c.post(URL + "/v1/chat/completions", json=body).status_code == 200
        assert c.post(URL + "/v1/embeddings", json={"model": "e", "input": "x"}).status_code == 429
    calls = hashreplay.calls
    assert [(c.method, c.endpoint, c.source) for c in calls] == [
        ("POST", "/v1/chat/completions", EXPECTED),
        ("POST", "/v1/embeddings", EXPECTED),
    ]
    first, second = calls
    assert first.body["messages"][0]["content"] == "hi"
    assert second.body == {"model": "e", "input": "x"}
    if EXPECTED == "live":  # a live call's status is the client's to see
        assert [c.status for c in calls] == [None, None]
    else:
        assert [c.status for c in calls] == [200, 429]
    print("CALLS OK", EXPECTED)


def test_no_calls_of_another_test(hashreplay):
    assert hashreplay.calls == []
"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("record-if-missing", "recorded"), ("replay", "replayed"), ("live", "live")],
)
def test_calls_lists_the_tests_exchanges_in_order_in_every_mode(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str, expected: str
) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_suite=SUITE)
    with FakeUpstream() as upstream:
        monkeypatch.setenv("FAKE_URL", upstream.url)
        if mode != "record-if-missing":  # recorded first, then run in the mode under test
            upstream.script("POST", "/v1/embeddings", Scripted(status=429))
            monkeypatch.setenv("EXPECTED_SOURCE", "recorded")
            pytester.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=2)
        upstream.script("POST", "/v1/embeddings", Scripted(status=429))
        monkeypatch.setenv("EXPECTED_SOURCE", expected)
        result = pytester.runpytest(f"--inference-mode={mode}", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*CALLS OK {expected}*"])
