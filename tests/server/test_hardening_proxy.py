"""Issue 13, proxy side: an undecodable recording is answered with the miss error (item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2

from hashreplay import IncomingRequest, Session, load_config
from hashreplay.engine.session import LiveExchange
from hashreplay.server.app import ProxyApp
from hashreplay.server.settings import ServeSettings

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
