"""The proxy's own error bodies and log lines carry no credential (docs/design.md §7, §8):
a key in the URL (`?key=…`, `?api_key=…`, a key-shaped path segment) or in the request's
headers, repeated by a fault header the proxy refuses, is removed from every JSON error and
every log line, as the plugin's miss report removes it from the same URLs."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import httpx2
import pytest

from hashreplay.core.constants import FAULT_HEADER, SECRET_PLACEHOLDER
from hashreplay.server.app import ProxyApp
from tests.fakes.upstream import FakeUpstream

AppFactory = Callable[..., ProxyApp]

#: A key with no known shape: only the request's own credential values can find it.
PLAIN_KEY = "plainkey0a1b2c3d4e5f6a7b8c9d"
SHAPED = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8"
GOOGLE = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
TEST_ID = {"x-hashreplay-test-id": "tests/test_keys.py::test_it"}


def client(app: ProxyApp) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://proxy")


def assert_clean(text: str) -> None:
    for secret in (PLAIN_KEY, SHAPED, GOOGLE):
        assert secret not in text


async def test_error_bodies_and_log_lines_never_echo_a_credential(
    make_app: AppFactory, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hashreplay.serve")
    routed = make_app("record", f"openai={upstream.url}")
    unrouted = make_app("record")
    auth = {"authorization": f"Bearer {PLAIN_KEY}", **TEST_ID}
    bad_fault = {**auth, FAULT_HEADER: json.dumps({"status": f"Bearer {PLAIN_KEY}"})}
    async with client(routed) as c:
        answers = [
            await c.get(f"/nope/v1/models?key={GOOGLE}&alt=json"),
            await c.get(f"/nope/v1beta/models/{GOOGLE}:generateContent"),
            await c.get(f"/nope/v1/models?api_key={PLAIN_KEY}"),
            await c.post("/openai/v1/chat/completions", json={}, headers=bad_fault),
            await c.post(
                f"/openai/v1/chat/completions?key={SHAPED}",
                json={},
                headers={**TEST_ID, FAULT_HEADER: "[1]"},
            ),
        ]
    async with client(unrouted) as c:
        answers.append(await c.get(f"/v1/models?key={PLAIN_KEY}", headers=TEST_ID))
    codes = [a.json()["error"]["code"] for a in answers]
    assert codes == [
        "unknown_upstream",
        "unknown_upstream",
        "unknown_upstream",
        "bad_fault",
        "bad_fault",
        "no_upstream",
    ]
    for answer in answers:
        assert_clean(answer.text)
    assert SECRET_PLACEHOLDER in answers[0].json()["error"]["message"]
    assert "alt=json" in answers[0].json()["error"]["message"]  # the rest stays readable
    assert SECRET_PLACEHOLDER in answers[3].json()["error"]["message"]
    assert upstream.calls == []
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged.count("->") == len(answers)  # one warning line each
    assert_clean(logged)
