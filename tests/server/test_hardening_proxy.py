"""The proxy under hostile input: an undecodable recording is answered with the miss error,
a header test id stays inside the project, the upstream's userinfo is never shown, a failed
write is a 5xx and per-test state is bounded."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx2
import pytest

import hashreplay.core.atomic as atomic_module
from hashreplay.core.config import load_config
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session
from hashreplay.server.app import ProxyApp
from hashreplay.server.cli import ServeSettings, parse_upstream
from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import free_port

TEST_ID = "tests/api/test_blob.py::test_download"


async def test_an_undecodable_body_is_the_miss_error_not_a_bug_report(root: Path) -> None:
    recorder = Session(load_config(root, env={}, mode="record"))
    prep = recorder.prepare(
        IncomingRequest("GET", "http://proxy/v1/files/a", [], b""), test_id=TEST_ID
    )
    exchange = LiveExchange(200, [("content-type", "application/octet-stream")], [b"\x00\xff"])
    path = recorder.record(prep, exchange)
    data = json.loads(path.read_text())
    data["response"]["body"] = "!!not base64!!"
    path.write_text(json.dumps(data))

    config = load_config(root, env={}, mode="replay")
    app = ProxyApp(ServeSettings(root=str(root)), session=Session(config))
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://proxy") as client:
        answer = await client.get("/v1/files/a", headers={"x-hashreplay-test-id": TEST_ID})
    await app.aclose()
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    assert "invalid base64 data" in message
    assert path.name in message
    assert "bug in hashreplay" not in answer.text


async def test_a_header_test_id_never_creates_directories_outside_the_tests(
    root: Path, upstream: FakeUpstream
) -> None:
    """A test id from a header names a recordings directory under the tests, nowhere else."""
    config = load_config(root, env={}, mode="record")
    settings = ServeSettings(upstreams=(parse_upstream(upstream.url),), root=str(root))
    app = ProxyApp(settings, session=Session(config))
    transport = httpx2.ASGITransport(app=app)
    hostile = [".git/hooks/test_x.py::t", "~/test_x.py::t", "%2e%2e/%2e%2e/test_x.py::t"]
    async with httpx2.AsyncClient(transport=transport, base_url="http://proxy") as client:
        for test_id in hostile:
            body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": test_id}]}
            answer = await client.post(
                "/v1/chat/completions", json=body, headers={"x-hashreplay-test-id": test_id}
            )
            assert answer.status_code == 200
    await app.aclose()
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    assert [f.parent for f in files if f.suffix == ".json"] == [Path("recordings")] * 3
    assert not (root / ".git").exists()
    assert not any("%2e" in str(f) or "~" in str(f) for f in files)


async def test_upstream_userinfo_is_never_shown(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not in stats, error bodies or logs (docs/design.md §7)."""
    port = free_port()  # nothing listens there: the upstream is down
    upstream = parse_upstream(f"http://admin:hunter2-upstream@127.0.0.1:{port}")
    config = load_config(root, env={}, mode="record")
    app = ProxyApp(ServeSettings(upstreams=(upstream,), root=str(root)), session=Session(config))
    caplog.set_level(logging.INFO)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://proxy") as client:
        answer = await client.post("/v1/chat/completions", json={"model": "m"})
        stats = await client.get("/__hashreplay/stats")
    await app.aclose()
    assert answer.status_code == 502
    shown = answer.text + stats.text + app.describe() + caplog.text + repr(app.settings)
    assert "hunter2-upstream" not in shown and "admin" not in shown
    assert f"[secret removed]@127.0.0.1:{port}" in answer.json()["error"]["message"]
    assert stats.json()["upstreams"]["default"] == f"http://[secret removed]@127.0.0.1:{port}"


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_module.os, "fsync", no_space)  # the atomic write's fsync


async def call_asgi(app: ProxyApp, body: dict[str, Any]) -> list[dict[str, Any]]:
    """One request through the ASGI app; every message the app sent."""
    content = json.dumps(body).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"proxy")],
    }
    incoming = [{"type": "http.request", "body": content, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)  # the client stays connected
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(dict(message))

    await app(scope, receive, send)
    return sent


async def test_a_failed_write_is_a_5xx_naming_it_never_a_200(
    root: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording that cannot be written is a JSON 5xx naming the problem, never a 200."""
    config = load_config(root, env={}, mode="record")
    settings = ServeSettings(upstreams=(parse_upstream(upstream.url),), root=str(root))
    app = ProxyApp(settings, session=Session(config))
    full_disk(monkeypatch)
    body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "hi"}]}
    whole = await call_asgi(app, body)
    streamed = await call_asgi(app, {**body, "stream": True})
    await app.aclose()
    # the whole answer: a JSON 500 naming the problem, never the upstream's 200
    assert whole[0]["status"] == 500
    error = json.loads(whole[1]["body"])["error"]
    assert error["code"] == "recording_not_written"
    assert "No space left on device" in error["message"]
    assert "the upstream answered 200" in error["message"]
    # the stream: relayed as it came, but never ended cleanly (the client sees an error)
    assert streamed[0]["status"] == 200
    assert b"".join(m.get("body", b"") for m in streamed[1:])
    assert all(m.get("more_body") for m in streamed[1:])
    assert app.stats()["errors"] == {"recording_not_written": 2}
    assert list(root.rglob("*.json")) == []


async def test_per_test_state_is_bounded_least_recently_used_first(
    root: Path, upstream: FakeUpstream
) -> None:
    """A long-lived proxy forgets the state of idle test ids."""
    config = load_config(root, env={}, mode="record")
    settings = ServeSettings(
        upstreams=(parse_upstream(upstream.url),), root=str(root), max_tests=10
    )
    session = Session(config)
    app = ProxyApp(settings, session=session)
    transport = httpx2.ASGITransport(app=app)
    keep = "tests/test_keep.py::test_busy"
    async with httpx2.AsyncClient(transport=transport, base_url="http://proxy") as client:
        for n in range(40):
            for test_id in (f"tests/test_many.py::test_{n}", keep):
                body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": f"{n}"}]}
                headers = {"x-hashreplay-test-id": test_id}
                answer = await client.post("/v1/chat/completions", json=body, headers=headers)
                assert answer.status_code == 200
    await app.aclose()
    tests = session.owners  # what the bound is about
    assert len(tests) == 10
    assert keep in tests  # the busy test was used last: never evicted
    assert "tests/test_many.py::test_0" not in tests
    assert len(session.usage) <= 10
    assert len(list(root.rglob("*.json"))) == 80  # every recording was written
