"""Re-recording unchanged behaviour is a zero-line git diff (docs/design.md §4, §5).

A temporary project records a suite through the openai SDK against the fake upstream, commits
it to its own git repository, re-records everything against the same upstream (which mints
new ids, timestamps, durations and noise headers on every call), and `git status` stays
empty: not one recording changed, and hashreplay's own files under `.hashreplay/` are
ignored by the `.gitignore` that folder carries.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream

SUITE = """
import os
import openai

TOOLS = [{
    "type": "function",
    "function": {
        "name": "lookup_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}]


def client():
    return openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-zero-diff-0123456789abcdef", max_retries=0)


def test_tool_calling_conversation():
    c = client()
    messages = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    first = c.chat.completions.create(model="gpt-fake-1", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
    second = c.chat.completions.create(model="gpt-fake-1", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "tool said: sunny, 21 C"
    messages.append(second.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "user", "content": "And in Oslo?"})
    third = c.chat.completions.create(model="gpt-fake-1", messages=messages, tools=TOOLS)
    assert third.choices[0].message.tool_calls[0].function.name == "lookup_weather"


def test_streamed_reply():
    stream = client().chat.completions.create(
        model="gpt-fake-1",
        messages=[{"role": "user", "content": "tell me a short story"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "echo: tell me a short story"


def test_responses_conversation():
    c = client()
    first = c.responses.create(model="gpt-fake-1", input="turn one")
    second = c.responses.create(model="gpt-fake-1", input="turn two", previous_response_id=first.id)
    assert second.output_text == "echo: turn two (turn 2)"


def test_models():
    assert [m.id for m in client().models.list()] == ["gpt-fake-1", "gpt-fake-2"]
"""

PYPROJECT = """
[tool.pytest.ini_options]
testpaths = ["suite"]
addopts = "-p no:hypothesispytest -p no:asyncio"

# the project opts in to hashreplay (docs/design.md §16 Activation)
[tool.hashreplay]
"""


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


@pytest.fixture
def suite(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_agent.py").write_text(SUITE)
    # What a project ignores anyway; `.hashreplay/` is deliberately not listed here.
    (pytester.path / ".gitignore").write_text(".pytest_cache/\n__pycache__/\n")
    return pytester


def test_rerecording_unchanged_behaviour_changes_nothing(
    suite: pytest.Pytester, upstream: FakeUpstream
) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    root = suite.path
    git(root, "init", "-q")
    git(root, "config", "user.name", "hashreplay tests")
    git(root, "config", "user.email", "tests@hashreplay.invalid")
    git(root, "config", "commit.gpgsign", "false")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "recordings")
    tracked = git(root, "ls-files").splitlines()
    recordings = [f for f in tracked if "/recordings/" in f or f.startswith("recordings/")]
    # 3 tool turns + 1 stream + 2 Responses turns in suite/recordings, 1 shared model list
    assert len([f for f in recordings if f.startswith("suite/")]) == 6
    assert len([f for f in recordings if f.startswith("recordings/models-")]) == 1
    assert not any(f.startswith(".hashreplay") for f in tracked)
    assert (root / ".hashreplay" / "usage.json").is_file()
    calls_before = len(upstream.calls)
    written = {f: (root / f).stat().st_mtime_ns for f in recordings if f.startswith("suite/")}

    again = suite.runpytest("--inference-mode=record")
    again.assert_outcomes(passed=4)
    again.stdout.fnmatch_lines(["hashreplay: 0 replayed, 7 recorded, 0 missed (record)"])
    assert len(upstream.calls) == calls_before + 7  # every call really went upstream again
    assert all((root / f).stat().st_mtime_ns > t for f, t in written.items())  # and was written
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(root, "diff", "--stat") == ""

    upstream.stop()
    suite.runpytest().assert_outcomes(passed=4)  # and the committed files replay offline
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""


def test_rerecording_against_the_fake_on_another_port_changes_nothing(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither host nor port is hashed, and a loopback upstream's URL is stored without its
    port, so a local server on a new port re-records to the same bytes."""
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    root = suite.path
    git(root, "init", "-q")
    git(root, "config", "user.name", "hashreplay tests")
    git(root, "config", "user.email", "tests@hashreplay.invalid")
    git(root, "config", "commit.gpgsign", "false")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "recordings")
    stored = (root / "recordings").glob("models-*.json")
    assert '"url": "http://localhost/v1/models"' in next(iter(stored)).read_text()

    with FakeUpstream() as elsewhere:
        monkeypatch.setenv("FAKE_URL", elsewhere.url)
        suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
        assert len(elsewhere.calls) == 7
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
