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
    assert [c.status for c in calls] == [200, 429]  # live calls' too
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


# --- every adapter reports the live status (docs/scenarios.md, "The test's calls") ---------

#: Per registered adapter, the clients it intercepts: each a `send(url, body)` that posts
#: JSON and returns the status its client saw.
CLIENTS: dict[str, dict[str, str]] = {
    "httpx": {
        "httpx": """
import httpx
def send(url, body):
    with httpx.Client() as c:
        return c.post(url, json=body).status_code
""",
        "httpx2 async": """
import asyncio, httpx2
def send(url, body):
    async def go():
        async with httpx2.AsyncClient() as c:
            return (await c.post(url, json=body)).status_code
    return asyncio.run(go())
""",
    },
    "aiohttp": {
        "aiohttp": """
import asyncio, aiohttp
def send(url, body):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(url, json=body) as r:
                await r.read()
                return r.status
    return asyncio.run(go())
""",
    },
    "urllib3": {
        "requests": """
import requests
def send(url, body):
    return requests.post(url, json=body, timeout=10).status_code
""",
    },
    "stdlib": {
        "urllib.request": """
import json, urllib.error, urllib.request
def send(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code
""",
    },
}

#: Registered adapters that never pass an HTTP answer on, and why.
NO_HTTP_STATUS = {
    "network_guard": "it sees sockets no adapter handled, never an HTTP answer",
    # its sessions' `calls` (recorded, replayed, live) are tested in tests/cli/test_mcp_tools.py
    "mcp": "it records MCP stdio sessions, which have no HTTP status",
    "aiohttp_ws": "a WebSocket connection's calls are tested in tests/adapters/test_aiohttp_ws.py",
    # a handshake, not an HTTP API call: its live 101 is reported as the status
    # (tests/integration/test_realtime.py::test_live_mode_lists_the_connection)
    "websockets": "its calls are WebSocket handshakes, answered 101 or refused",
}

STATUS_SUITE = """
import os
import socket

URL = os.environ["FAKE_URL"]
EXPECTED = os.environ["EXPECTED_SOURCE"]

{client}

def test_statuses(hashreplay):
    chat = {{"model": "gpt-fake-1", "messages": [{{"role": "user", "content": "hi"}}]}}
    seen = [send(URL + "/v1/chat/completions", chat), send(URL + "/v1/embeddings", {{"input": "x"}})]
    assert seen == [200, 429]
    assert [(c.endpoint, c.status, c.source) for c in hashreplay.calls] == [
        ("/v1/chat/completions", 200, EXPECTED),
        ("/v1/embeddings", 429, EXPECTED),
    ]
    if EXPECTED != "replayed":  # no answer at all: no status (nothing to replay it from)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        try:
            send(f"http://127.0.0.1:{{dead}}/v1/dead", {{"input": "x"}})
        except Exception:
            pass
        else:
            raise AssertionError("a closed port answered")
        assert hashreplay.calls[-1][1:] == ("/v1/dead", {{"input": "x"}}, None, "live")
    print("STATUSES OK", EXPECTED)
"""


def _registered_clients() -> list[tuple[str, str]]:
    from hashreplay.adapters import ADAPTERS

    return [
        (entry.module, client)
        for entry in ADAPTERS
        if entry.module not in NO_HTTP_STATUS
        for client in CLIENTS.get(entry.module, {"<no client in CLIENTS>": ""})
    ]


def test_every_registered_adapter_has_a_client_here_or_says_why_not() -> None:
    from hashreplay.adapters import ADAPTERS

    modules = {entry.module for entry in ADAPTERS}
    assert modules == set(CLIENTS) | set(NO_HTTP_STATUS)


@pytest.mark.parametrize(("adapter", "client"), _registered_clients())
def test_every_adapter_reports_the_live_status_of_live_and_recorded_calls(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, adapter: str, client: str
) -> None:
    code = CLIENTS[adapter][client]  # a KeyError: add the adapter's clients to CLIENTS
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_suite=STATUS_SUITE.format(client=code))
    with FakeUpstream() as upstream:
        monkeypatch.setenv("FAKE_URL", upstream.url)
        for mode, expected in [
            ("live", "live"),
            ("record-if-missing", "recorded"),
            ("replay", "replayed"),
        ]:
            upstream.script("POST", "/v1/embeddings", Scripted(status=429))
            monkeypatch.setenv("EXPECTED_SOURCE", expected)
            result = pytester.runpytest(f"--inference-mode={mode}", "-s")
            result.assert_outcomes(passed=1)
            result.stdout.fnmatch_lines([f"*STATUSES OK {expected}*"])


def test_a_drift_run_lists_each_call_as_live_with_its_status(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-drift-calls-0123456789")  # a drift run needs keys
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_suite=SUITE)
    with FakeUpstream() as upstream:
        monkeypatch.setenv("FAKE_URL", upstream.url)
        upstream.script("POST", "/v1/embeddings", Scripted(status=429))
        monkeypatch.setenv("EXPECTED_SOURCE", "recorded")
        pytester.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=2)
        upstream.script("POST", "/v1/embeddings", Scripted(status=429))
        monkeypatch.setenv("EXPECTED_SOURCE", "live")
        result = pytester.runpytest("--hashreplay-drift", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*CALLS OK live*"])
