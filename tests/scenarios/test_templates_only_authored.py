"""Templates are only what the author wrote (docs/scenarios.md, "Templates"), through whole
pytest runs against the fake upstream: an answer that prints `{{` is stored escaped and
replays as exactly what the upstream said, re-recording it is a zero diff, and a template
value cannot add framing to a stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio"

[tool.hashreplay]
"""

APP = """
import json
import os
import httpx

URL = os.environ["FAKE_URL"]
SAID = "{{request:body.model}} and {{{ {{x}} here"

def test_streamed_answer_with_braces():
    text = []
    with httpx.stream("POST", URL + "/v1/chat/completions", json={
        "model": "gpt-fake-1", "stream": True, "note": "one\\ntwo",
        "messages": [{"role": "user", "content": SAID}],
    }) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                text.append(delta.get("content") or "")
    assert "".join(text) == "echo: " + SAID
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_app=APP)
    return pytester


def _recording(root: Path) -> Path:
    (path,) = sorted(root.rglob("recordings/*.json"))
    return path


def test_live_braces_are_stored_escaped_replay_exactly_and_rerecord_to_zero_diff(
    project: pytest.Pytester,
) -> None:
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    path = _recording(project.path)
    first = path.read_bytes()
    events = json.loads(first)["response"]["body"]
    said = "".join(
        e["data"]["choices"][0]["delta"].get("content") or ""
        for e in events
        if isinstance(e["data"], dict)
    )
    assert said == "echo: {{{{request:body.model}} and {{{{{ {{{{x}} here"  # escaped
    project.runpytest().assert_outcomes(passed=1)  # replay: the exact text, no template
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert path.read_bytes() == first  # re-recording unchanged behaviour: zero diff


def test_a_template_value_with_a_line_break_cannot_frame_a_stream(
    project: pytest.Pytester,
) -> None:
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    path = _recording(project.path)
    data = json.loads(path.read_text())
    events = data["response"]["body"]
    events[1]["event"] = "{{request:body.note}}"  # an SSE `event:` line, from the request
    path.write_text(json.dumps(data, indent=2))
    run = project.runpytest()
    run.assert_outcomes(failed=1)
    run.stdout.fnmatch_lines(
        [
            "hashreplay: test_app.py::test_streamed_answer_with_braces: template "
            "{{request:body.note}} in stream event 1, field 'event' is refused: its value "
            "holds '\\n', which would break the stream's framing *",
        ]
    )
    # inside the event's JSON data the same value is JSON-escaped, and replays as sent
    events[1]["event"] = "chunk"
    events[1]["data"]["note"] = "{{request:body.note}}"
    path.write_text(json.dumps(data, indent=2))
    project.runpytest().assert_outcomes(passed=1)
