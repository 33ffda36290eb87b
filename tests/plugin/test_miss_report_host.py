"""The miss report shows where the request really went: host and port as the client sent
them (a loopback upstream is stored without its port, but the report is not the file),
with credentials in the URL still removed (docs/design.md §6, §7)."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.hashreplay]

[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest"
asyncio_default_fixture_loop_scope = "function"
"""

TESTS = """
import os
import httpx2

def test_local():
    httpx2.post(os.environ["FAKE_URL"] + "/v1/chat/completions", json={"model": "m"})

def test_remote_with_key_in_query():
    httpx2.get("https://models.example.com:8443/v1/models/m?key=AIzaSyTopSecret0123456789abcdef&alt=json")
"""


def test_the_miss_report_names_the_real_host_and_port(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_app=TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(failed=2)
    port = upstream.url.rsplit(":", 1)[1]
    result.stdout.fnmatch_lines(
        [
            f"hashreplay: no recording for POST http://127.0.0.1:{port}/v1/chat/completions"
            " (replay mode)",
            "hashreplay: no recording for GET https://models.example.com:8443/v1/models/m?"
            "*alt=json* (replay mode)",
        ]
    )
    out = result.stdout.str()
    assert "AIzaSyTopSecret0123456789abcdef" not in out
    assert "key=%5Bsecret+removed%5D" in out or "key=[secret removed]" in out
    assert "http://localhost/v1/chat/completions" not in out
    assert upstream.calls == []  # replay never went there
