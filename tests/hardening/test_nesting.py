"""Nesting (docs/design.md §13): a request nested deeper than MAX_NESTING is a clear error, in-process
and through the proxy, in every mode but live."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import httpx2
import pytest

from hashreplay import Mode, test_context
from hashreplay.core.bodies import MAX_NESTING, RequestTooDeep, nesting_depth
from hashreplay.core.config import load_config
from hashreplay.engine.http import IncomingRequest
from hashreplay.engine.session import Session
from hashreplay.server.app import ProxyApp
from hashreplay.server.cli import ServeSettings
from tests.conftest import Recorder

URL = "http://127.0.0.1:9/v1/chat/completions"
TEST = "tests/test_deep.py::test_it"


def nested(depth: int) -> bytes:
    """`{"model": "m", "x": [[[…]]]}` with `depth` levels in all."""
    return b'{"model": "m", "x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_nesting_depth() -> None:
    assert nesting_depth(1) == 0
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
    assert nesting_depth(json.loads(nested(300)), stop_after=10) == 11


@pytest.mark.parametrize("mode", ["replay", "record", "record-if-missing"])
@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 300, 5000])
def test_in_process_every_intercepting_mode_refuses_it_clearly(
    recorder: Recorder, mode: str, depth: int
) -> None:
    recorder.start(Mode(mode))
    with test_context(TEST), pytest.raises(RequestTooDeep) as info:
        httpx.post(URL, content=nested(depth), headers={"content-type": "application/json"})
    assert f"POST /v1/chat/completions: the body is nested more than {MAX_NESTING}" in str(
        info.value
    )


def test_at_the_limit_it_is_an_ordinary_request(tmp_path: Path) -> None:
    session = Session(load_config(tmp_path, env={}, mode="replay"))
    headers = [("content-type", "application/json")]
    prep = session.prepare(IncomingRequest("POST", URL, headers, nested(MAX_NESTING)))
    assert len(prep.hash) == 32


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 260, 5000])
async def test_the_proxy_answers_a_json_400(tmp_path: Path, depth: int) -> None:
    config = load_config(tmp_path, env={}, mode="replay")
    app = ProxyApp(ServeSettings(root=str(tmp_path)), session=Session(config))
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://proxy") as client:
        answer = await client.post(
            "/v1/chat/completions",
            content=nested(depth),
            headers={"content-type": "application/json", "x-hashreplay-test-id": TEST},
        )
    await app.aclose()
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "request_too_deep"
    assert f"nested more than {MAX_NESTING} levels deep" in answer.json()["error"]["message"]
