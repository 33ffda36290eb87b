"""The conftest hooks `pytest_hashreplay_request` and `pytest_hashreplay_before_record`, and
`scrub` patterns (docs/design.md §14), through whole pytest runs against the fake upstream:
what they change is keyed and written, replay serves what was written, a hook cannot write
a secret, and a hook that raises or returns the wrong thing fails its test by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream, Scripted

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio"

[tool.hashreplay]
"""

APP = """
import os

import httpx

URL = os.environ["FAKE_URL"]


def ask(text, **extra):
    body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}], **extra}
    response = httpx.post(URL + "/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response


def test_chat():
    ask("hello", user=os.environ.get("RUN_USER", "alice"))
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


def recordings(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("recordings/*.json"))]


# --- pytest_hashreplay_request -----------------------------------------------------------


@pytest.mark.parametrize("style", ["in place", "returned"])
def test_a_request_hook_changes_what_is_keyed_in_every_mode(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, style: str
) -> None:
    if style == "in place":
        hook = 'def pytest_hashreplay_request(request):\n    request["body"].pop("user")\n'
    else:
        hook = (
            "def pytest_hashreplay_request(request):\n"
            '    body = {k: v for k, v in request["body"].items() if k != "user"}\n'
            '    return {**request, "body": body, "query": {"v": "2"}}\n'
        )
    project.makeconftest(hook)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (recording,) = recordings(project.path)
    assert "user" not in recording["request"]["body"]
    if style == "returned":
        assert recording["request"]["endpoint"] == "/v1/chat/completions?v=2"
    # another user: the same key, in replay
    monkeypatch.setenv("RUN_USER", "bob")
    project.runpytest("--inference-mode=replay").assert_outcomes(passed=1)
    # without the hook the field counts again: a miss that shows it
    (project.path / "conftest.py").unlink()
    result = project.runpytest("--inference-mode=replay")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no recording*"])


def test_a_request_hook_that_raises_fails_its_test_by_name(project: pytest.Pytester) -> None:
    project.makeconftest(
        "def pytest_hashreplay_request(request):\n    raise KeyError('messages')\n"
    )
    result = project.runpytest("--inference-mode=record")
    result.assert_outcomes(failed=1)
    conftest = project.path / "conftest.py"
    result.stdout.fnmatch_lines(
        [
            f"*hashreplay: test_app.py::test_chat: pytest_hashreplay_request (in {conftest}:1) "
            "raised KeyError: 'messages'; nothing was sent or recorded. Fix the hook (in your "
            'conftest.py; docs/usage.md, "Hooks") and run the test again*'
        ]
    )
    assert recordings(project.path) == []


@pytest.mark.parametrize(
    ("returned", "shown"), [("['a']", "list ['a']"), ("'body'", "str 'body'"), ("1", "int 1")]
)
def test_a_request_hook_that_returns_no_dict_fails_its_test(
    project: pytest.Pytester, returned: str, shown: str
) -> None:
    project.makeconftest(f"def pytest_hashreplay_request(request):\n    return {returned}\n")
    result = project.runpytest("--inference-mode=record")
    result.assert_outcomes(failed=1)
    conftest = project.path / "conftest.py"
    assert (
        f"hashreplay: test_app.py::test_chat: pytest_hashreplay_request (in {conftest}:1) "
        f"returned {shown}; it must change the dict it is given in place (and return None) or "
        "return the changed dict; nothing was sent or recorded"
    ) in result.stdout.str()
    assert recordings(project.path) == []


def test_a_request_hook_that_breaks_the_request_is_named(project: pytest.Pytester) -> None:
    project.makeconftest("def pytest_hashreplay_request(request):\n    request['headers'] = []\n")
    result = project.runpytest("--inference-mode=record")
    result.assert_outcomes(failed=1)
    assert (
        "pytest_hashreplay_request left request['headers'] as []; it must stay a dict"
    ) in result.stdout.str()


# --- pytest_hashreplay_before_record --------------------------------------------------------

RECORD_HOOK = """
def pytest_hashreplay_before_record(recording):
    recording["response"]["headers"]["x-reviewed"] = "yes"
    recording["response"]["headers"]["x-leak"] = "Bearer sk-proj-AbCdEfGhIjKlMnOpQrStUvWx"
    return recording
"""


def test_a_record_hook_changes_what_is_written_but_never_writes_a_secret(
    project: pytest.Pytester,
) -> None:
    project.makeconftest(RECORD_HOOK)
    project.makepyfile(
        test_served="""
        import os, httpx
        def test_served(hashreplay):
            r = httpx.post(os.environ["FAKE_URL"] + "/v1/chat/completions",
                           json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
            # the live answer while recording; what was written on replay
            expected = "yes" if hashreplay.mode.value == "replay" else None
            assert r.headers.get("x-reviewed") == expected
        """
    )
    project.runpytest("--inference-mode=record", "test_app.py").assert_outcomes(passed=1)
    (recording,) = recordings(project.path)
    headers = recording["response"]["headers"]
    assert headers["x-reviewed"] == "yes"
    assert headers["x-leak"] == "[secret removed]"
    raw = b"".join(p.read_bytes() for p in project.path.rglob("recordings/*.json"))
    assert b"sk-proj-AbCd" not in raw
    # replay serves what was written
    project.runpytest("--inference-mode=record", "test_served.py").assert_outcomes(passed=1)
    project.runpytest("--inference-mode=replay", "test_served.py").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("    raise RuntimeError('no response')\n", " (in *conftest.py:1) raised RuntimeError"),
        ("    return 'done'\n", " (in *conftest.py:1) returned str 'done'; it must change"),
        (
            "    del recording['response']\n",
            " left a dict that is no recording: response: Field required (1 problem(s))",
        ),
    ],
)
def test_a_record_hook_that_fails_writes_nothing_and_fails_its_test(
    project: pytest.Pytester, body: str, message: str
) -> None:
    project.makeconftest(f"def pytest_hashreplay_before_record(recording):\n{body}")
    result = project.runpytest("--inference-mode=record")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*hashreplay: test_app.py::test_chat: pytest_hashreplay_before_record{message}*"
            "the live answer was not recorded*"
        ]
    )
    assert recordings(project.path) == []


# --- scrub ------------------------------------------------------------------------------------


def test_scrub_patterns_apply_to_what_is_keyed_and_written(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyprojecttoml(
        PYPROJECT + 'scrub = [{pattern = "user-[0-9]+", replace = "user-N"},\n'
        '         {pattern = "acct=\\\\w+", replace = "acct=ACCOUNT"}]\n'
    )
    upstream.script(
        "POST",
        "/v1/chat/completions",
        Scripted(json={"id": "x", "choices": [], "note": "for user-4711 acct=zz9"}),
    )
    monkeypatch.setenv("RUN_USER", "user-4711")
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (recording,) = recordings(project.path)
    assert recording["request"]["body"]["user"] == "user-N"
    assert recording["response"]["body"]["note"] == "for user-N acct=ACCOUNT"
    monkeypatch.setenv("RUN_USER", "user-1")
    project.runpytest("--inference-mode=replay").assert_outcomes(passed=1)


def test_a_scrub_pattern_that_does_not_compile_is_a_config_error(project: pytest.Pytester) -> None:
    project.makepyprojecttoml(PYPROJECT + 'scrub = [{pattern = "user-(", replace = "u"}]\n')
    result = project.runpytest("--inference-mode=replay")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*`scrub`: entry 1: pattern 'user-(' (replace 'u') does not compile under RE2, the "
            "linear-time engine scrub patterns run on: missing ): user-(*"
        ]
    )
