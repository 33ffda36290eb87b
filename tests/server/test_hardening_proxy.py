"""Issue 13, proxy side: an undecodable recording is answered with the miss error (item 7)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx2
import pytest

from hashreplay import IncomingRequest, Session, load_config
from hashreplay.engine.session import LiveExchange
from hashreplay.server.app import ProxyApp
from hashreplay.server.settings import ServeSettings, parse_upstream
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
    """Issue 13 item 12."""
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
    """Issue 13 item 5: not in stats, error bodies or logs."""
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
