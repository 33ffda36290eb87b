"""A recording that names a BaseException which is not an Exception (KeyboardInterrupt,
SystemExit, pytest's Exit/Skipped/XFailed) is never raised on replay: it fails only the test
that replays it, with an error naming the file and the type (docs/design.md §2), through
requests, urllib3 and urllib.request, in a real pytest session; `verify` reports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream
from tests.plugin.test_plugin import PYPROJECT

pytest_plugins = ["pytester"]

TESTS = """
import json, os, urllib.request
import requests, urllib3

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
JSON = {"content-type": "application/json"}

def chat(who):
    return {"model": "gpt-fake-1", "messages": [{"role": "user", "content": who}]}

def test_requests_interrupt():
    requests.post(URL, json=chat("a"))

def test_requests_exit():
    requests.post(URL, json=chat("b"))

def test_urllib3_system_exit():
    urllib3.request("POST", URL, json=chat("c"))

def test_urllib_skipped():
    body = json.dumps(chat("d")).encode()
    urllib.request.urlopen(urllib.request.Request(URL, data=body, headers=JSON))

def test_requests_stream_xfailed():
    with requests.post(URL, json={**chat("e"), "stream": True}, stream=True) as r:
        list(r.iter_lines())

def test_untouched():
    assert requests.post(URL, json=chat("f")).json()["choices"]
"""

#: test → the type its recording is edited to name, and whether it broke mid-stream
EDITS = {
    "test_requests_interrupt": ("builtins.KeyboardInterrupt", False),
    "test_requests_exit": ("_pytest.outcomes.Exit", False),
    "test_urllib3_system_exit": ("builtins.SystemExit", False),
    "test_urllib_skipped": ("_pytest.outcomes.Skipped", False),
    "test_requests_stream_xfailed": ("_pytest.outcomes.XFailed", True),
}


def _edit(path: Path, dotted: str, *, mid_stream: bool) -> None:
    data = json.loads(path.read_text())
    response = data["response"]
    if not mid_stream:
        response.update(status=None, headers={}, body=None, body_encoding="empty")
        response["is_streaming"] = False
        response.pop("stream_format", None)
    response["is_exception"] = True
    response["exception"] = {"type": dotted, "message": "stopped", "args": []}
    response["ended"] = {"state": "error", "after_chunks": 1}
    path.write_text(json.dumps(data))


def test_a_recorded_base_exception_fails_only_its_test(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_app.py").write_text(TESTS)
    pytester.runpytest_subprocess("--inference-mode=record").assert_outcomes(passed=6)
    files = {
        json.loads(p.read_text())["test_id"].rpartition("::")[2]: p
        for p in (pytester.path / "suite" / "recordings").glob("*.json")
    }
    for test, (dotted, mid_stream) in EDITS.items():
        _edit(files[test], dotted, mid_stream=mid_stream)
    upstream.stop()

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    # every edited test fails on its own; the session runs to its end (not rc 2 or 3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=5)
    out = result.stdout.str()
    for test, (dotted, _) in EDITS.items():
        name = files[test].name
        assert (
            f"recordings/{name}: response.exception.type: the recorded exception {dotted} is a BaseException that is not an Exception"
            in out
        ), test
    assert (
        "replay never raises it; re-record it (INFERENCE_MODE=record pytest 'suite/test_app.py::test_requests_exit')"
        in out
    )

    monkeypatch.chdir(pytester.path)
    assert main(["verify"]) == 1
    verified = capsys.readouterr().out
    for test, (dotted, _) in EDITS.items():
        assert (
            f"suite/recordings/{files[test].name}: unreadable: response.exception.type: the recorded exception {dotted}"
            in verified
        )


@pytest.mark.parametrize(
    "dotted",
    [
        "builtins.KeyboardInterrupt",
        "builtins.SystemExit",
        "builtins.GeneratorExit",
        "_pytest.outcomes.Exit",
        "_pytest.outcomes.Skipped",
        "_pytest.outcomes.XFailed",
        "asyncio.exceptions.CancelledError",
    ],
)
def test_no_adapter_lookup_ever_returns_a_base_exception(dotted: str) -> None:
    """The lookup every http.client-based adapter uses defers to the core's rule."""
    from hashreplay.adapters._shared import find_exception_class

    assert find_exception_class(dotted, [], ConnectionError) is ConnectionError
    # by its last name in a client's namespace too
    namespace = type("Namespace", (), {dotted.rpartition(".")[2]: KeyboardInterrupt})
    assert find_exception_class(f"x.{dotted}", [namespace], ValueError) is ValueError
