"""What a drift run writes and prints is redacted and escaped as recordings and `hashreplay
show` are (docs/design.md §7, §15 "Drift"): an upstream that answers with field names made
of the request's own key, of a secret-shaped value, or of terminal escape sequences puts
none of them into `.hashreplay/drift.json`, the pytest summary or `hashreplay drift-report`.
An interrupted drift run leaves no older result behind for `drift-report` to show."""

from __future__ import annotations

import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.plugin.test_drift import INTERRUPTED, KEY, chat, make_project, message_stream

pytest_plugins = ["pytester"]

#: A key no shape rule knows: only the request's own credential values can find it.
PLAIN_KEY = "plainkey0a1b2c3d4e5f6a7b8c9d"
ESCAPE = "\x1b]0;PWN\x07"

KEYED_TESTS = f"""
import os
import httpx

URL = os.environ["FAKE_URL"]


def test_chat():
    body = {{"model": "gpt-fake-1", "messages": [{{"role": "user", "content": "capital?"}}]}}
    headers = {{"authorization": "Bearer {PLAIN_KEY}"}}
    r = httpx.post(URL + "/v1/chat/completions", json=body, headers=headers, timeout=10)
    print("STATUS", r.status_code)
"""


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    for name, value in KEY.items():
        monkeypatch.setenv(name, value)


def test_echoed_keys_and_escapes_are_never_written_or_printed(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = make_project(pytester, tests=KEYED_TESTS)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.")))
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)

    shaped = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    hostile = chat("Paris.", **{PLAIN_KEY: 1, shaped: 2, ESCAPE + "x\nforged line": 3})
    upstream.script("POST", "/v1/chat/completions", Scripted(json=hostile))
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "field added" in out
    written = (root / ".hashreplay" / "drift.json").read_text()
    capsys.readouterr()
    assert main(["drift-report", "--root", str(root)]) == 1
    report = capsys.readouterr().out
    for shown in (out, written, report):
        assert PLAIN_KEY not in shown
        assert shaped not in shown
        assert "[secret removed]" in shown
    for shown in (out, report):
        assert "\x1b" not in shown
        assert "\x07" not in shown
        assert "\\x1b]0;PWN\\x07x\\nforged line" in shown
        assert not any(line.startswith("forged line") for line in shown.splitlines())


def test_an_interrupted_drift_run_leaves_no_earlier_result(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = make_project(pytester)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.")))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is."))
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.", extra=1)))
    pytester.runpytest("--hashreplay-drift")
    assert (root / ".hashreplay" / "drift.json").exists()  # the earlier run's result

    (root / "suite" / "test_app.py").write_text(INTERRUPTED)
    result = pytester.runpytest_subprocess("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*was not written*the previous run's was removed*"])
    assert not (root / ".hashreplay" / "drift.json").exists()
    capsys.readouterr()
    assert main(["drift-report", "--root", str(root)]) == 1
    assert "no drift result" in capsys.readouterr().err
