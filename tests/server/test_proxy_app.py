"""The proxy's ASGI app in-process (httpx2.ASGITransport): decisions, headers, JSON errors."""

from __future__ import annotations

import ast
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx2
import pytest

import hashreplay
from hashreplay import Mode
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.core.config import load_config
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session
from hashreplay.server.app import ProxyApp
from hashreplay.server.cli import ServeSettings
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.server.conftest import chat, load, recordings

TEST_ID = "tests/api/test_chat.py::test_hello"
CHAT = "/v1/chat/completions"

AppFactory = Callable[..., ProxyApp]


def client(app: ProxyApp) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://proxy")


def headers(test_id: str | None = TEST_ID, **extra: str) -> dict[str, str]:
    out = {"authorization": "Bearer sk-proj-abcdefghijklmnopqrstuvwxyz0123"}
    if test_id is not None:
        out["x-hashreplay-test-id"] = test_id
    out.update(extra)
    return out


async def test_record_then_replay_offline_per_test(
    make_app: AppFactory, upstream: FakeUpstream, root: Path
) -> None:
    recorder = make_app("record", upstream.url)
    async with client(recorder) as c:
        live = await c.post(CHAT, json=chat("hello"), headers=headers())
    assert live.status_code == 200
    assert live.json()["choices"][0]["message"]["content"] == "echo: hello"
    [path] = recordings(root)
    assert path.parent == root / "tests" / "api" / "recordings"
    data = load(path)
    assert data["test_id"] == TEST_ID
    assert data["request"]["url"] == f"http://localhost{CHAT}"  # a loopback upstream: no port
    assert data["response"]["body"]["id"].startswith("rec-")
    assert "sk-proj" not in path.read_text()  # forwarded upstream, never written
    assert upstream.calls[-1].headers["authorization"].startswith("Bearer sk-proj")

    upstream.stop()
    replayer = make_app("replay")  # no upstream needed to replay
    async with client(replayer) as c:
        replayed = await c.post(CHAT, json=chat("hello"), headers=headers())
    assert replayed.status_code == 200
    assert replayed.json()["choices"][0]["message"]["content"] == "echo: hello"
    assert replayed.json()["id"] == data["response"]["body"]["id"]
    assert replayer.stats()["replayed"] == 1
    assert not httpx_adapter.is_installed()  # the proxy calls the engine, never patches


async def test_a_request_without_test_id_goes_to_the_common_directory(
    make_app: AppFactory, upstream: FakeUpstream, root: Path
) -> None:
    async with client(make_app("record", upstream.url)) as c:
        assert (await c.post(CHAT, json=chat("x"), headers=headers(None))).status_code == 200
    [path] = recordings(root)
    assert path.parent == root / "recordings"
    assert load(path)["test_id"] is None


async def test_recordings_option_moves_the_common_directory(
    make_app: AppFactory, upstream: FakeUpstream, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-recordings"
    app = make_app("record", upstream.url, recordings=str(shared))
    async with client(app) as c:
        assert (await c.post(CHAT, json=chat("x"), headers=headers(None))).status_code == 200
    assert [p.parent for p in shared.glob("*.json")] == [shared]
    assert app.stats()["recordings"] == str(shared)


async def test_ndjson_streams_record_and_replay(
    make_app: AppFactory, upstream: FakeUpstream, root: Path
) -> None:
    body = {"model": "llama3", "messages": [{"role": "user", "content": "one two three"}]}
    async with client(make_app("record", upstream.url)) as c:
        live = await c.post("/api/chat", json=body, headers=headers())
    [path] = recordings(root)
    assert load(path)["response"]["stream_format"] == "ndjson"
    upstream.stop()
    async with client(make_app("replay")) as c:
        replayed = await c.post("/api/chat", json=body, headers=headers())
    assert replayed.headers["content-type"] == live.headers["content-type"]

    def text(response: httpx2.Response) -> str:
        lines = [json.loads(line) for line in response.text.splitlines() if line]
        return "".join(line["message"]["content"] for line in lines)

    assert text(replayed) == text(live) == "echo: one two three"


async def test_named_upstreams_strip_their_prefix_and_hash_like_direct_calls(
    make_app: AppFactory, upstream: FakeUpstream, root: Path
) -> None:
    app = make_app("record", f"openai={upstream.url}/v1", f"other={upstream.url}")
    async with client(app) as c:
        assert (
            await c.post("/openai/chat/completions", json=chat("a"), headers=headers())
        ).is_success
        assert (await c.get("/other/plain", headers=headers())).is_success
    assert [call.path for call in upstream.calls] == [CHAT, "/plain"]
    endpoints = sorted(load(p)["request"]["endpoint"] for p in recordings(root))
    assert endpoints == ["/plain", CHAT]
    # The same request made in-process by the SDK would have the same file name.
    prep = Session(load_config(root, env={}, mode="record")).prepare(
        IncomingRequest(
            "POST",
            f"{upstream.url}{CHAT}",
            [("content-type", "application/json")],
            json.dumps(chat("a")).encode(),
        ),
        test_id=TEST_ID,
    )
    assert (root / "tests" / "api" / "recordings" / f"{prep.hash}.json").is_file()


async def test_unknown_prefix_is_a_json_404_that_lists_the_prefixes(
    make_app: AppFactory, upstream: FakeUpstream
) -> None:
    async with client(make_app("record", f"openai={upstream.url}")) as c:
        response = await c.post("/nope/v1/chat", json={})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "unknown_upstream"
    assert "/nope/v1/chat" in error["message"] and "/openai/" in error["message"]
    assert response.headers["x-should-retry"] == "false"
    assert upstream.calls == []


async def test_replay_miss_is_a_non_retryable_report_with_a_hint(
    make_app: AppFactory, root: Path
) -> None:
    app = make_app("replay")
    async with client(app) as c:
        response = await c.post(CHAT, json=chat("never recorded"), headers=headers())
    assert response.status_code == 404
    assert response.headers["x-should-retry"] == "false"
    assert response.headers["x-hashreplay-miss"] == "1"
    error = response.json()["error"]
    assert error["code"] == "hashreplay_miss"
    assert f"no recording for POST http://proxy{CHAT}" in error["message"]
    assert TEST_ID in error["message"]
    assert "--mode record-if-missing" in error["hint"]
    # the next step fits a proxy client: the proxy's command, not pytest's
    assert "INFERENCE_MODE=record-if-missing pytest" not in error["message"]
    last = error["message"].splitlines()[-1]
    assert last.startswith("  to record it: hashreplay serve --mode record-if-missing ")
    assert last.endswith(
        " --upstream URL-OF-THE-API, then run the client again (it sends "
        "'X-HashReplay-Test-Id: tests/api/test_chat.py::test_hello', as now)"
    )
    stats = app.stats()
    assert stats["missed"] == 1 and stats["replayed"] == 0
    assert recordings(root) == []


async def test_a_recorded_transport_failure_replays_as_a_gateway_error(
    make_app: AppFactory, root: Path
) -> None:
    """E.g. an in-process test recorded a refused connection (`record_failures = "all"`):
    replay repeats it as a 502."""
    session = Session(load_config(root, env={}, mode="record", record_failures="all"))
    incoming = IncomingRequest(
        "POST",
        f"http://up{CHAT}",
        [("content-type", "application/json")],
        json.dumps(chat("f")).encode(),
    )
    prep = session.prepare(incoming, test_id=TEST_ID)
    path = session.record(
        prep, LiveExchange(None, [], [], exception=httpx2.ConnectError("refused"))
    )
    async with client(make_app("replay")) as c:
        response = await c.post(CHAT, json=chat("f"), headers=headers())
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "recorded_failure"
    assert "httpx2.ConnectError: refused" in error["message"]
    assert str(path) in error["message"]


async def test_identical_requests_replay_in_order_and_a_new_run_starts_over(
    make_app: AppFactory, upstream: FakeUpstream, root: Path
) -> None:
    upstream.script("POST", CHAT, Scripted(status=429, json={"error": {"message": "slow"}}))
    async with client(make_app("record", upstream.url)) as c:
        first = await c.post(CHAT, json=chat("twice"), headers=headers())
        second = await c.post(CHAT, json=chat("twice"), headers=headers())
    assert (first.status_code, second.status_code) == (429, 200)
    assert len(recordings(root)) == 1  # one file, two ordered responses

    async with client(make_app("replay")) as c:
        run_a = headers(**{"x-hashreplay-run": "run-a"})
        statuses = [
            (await c.post(CHAT, json=chat("twice"), headers=run_a)).status_code for _ in range(3)
        ]
        assert statuses == [429, 200, 404]  # a third identical call was never recorded
        run_b = headers(**{"x-hashreplay-run": "run-b"})
        again = [
            (await c.post(CHAT, json=chat("twice"), headers=run_b)).status_code for _ in range(2)
        ]
        assert again == [429, 200]


async def test_body_over_the_limit_is_413_and_never_forwarded(
    make_app: AppFactory, upstream: FakeUpstream
) -> None:
    app = make_app("record", upstream.url, max_body_bytes=1000)

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: counted as it arrives
        for _ in range(5):
            yield b"x" * 300

    async with client(app) as c:
        declared = await c.post(CHAT, content=b"x" * 1001, headers=headers())
        streamed = await c.post(CHAT, content=chunks(), headers=headers())
        fits = await c.post(CHAT, json=chat("small"), headers=headers())
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "body_too_large"
        assert "1000 bytes" in response.json()["error"]["message"]
        assert "--max-body-bytes" in response.json()["error"]["message"]
    assert fits.status_code == 200
    assert len(upstream.calls) == 1
    assert app.stats()["errors"] == {"body_too_large": 2}


async def test_upstream_down_is_502_naming_it_and_nothing_is_recorded(
    make_app: AppFactory, upstream: FakeUpstream, root: Path
) -> None:
    url = upstream.url
    upstream.stop()
    async with client(make_app("record", f"openai={url}")) as c:
        response = await c.post("/openai/v1/chat/completions", json=chat("x"), headers=headers())
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert f"upstream 'openai' ({url})" in error["message"]
    assert "nothing was recorded" in error["message"]
    assert "x-should-retry" not in response.headers  # the outage may pass: clients may retry
    assert recordings(root) == []


async def test_upstream_timeout_is_504(
    make_app: AppFactory, upstream: FakeUpstream, root: Path
) -> None:
    upstream.script("POST", CHAT, Scripted(delay=3.0))
    async with client(make_app("record", upstream.url, upstream_timeout=0.3)) as c:
        response = await c.post(CHAT, json=chat("slow"), headers=headers())
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert "within 0.3 s" in error["message"] and "--upstream-timeout" in error["message"]
    assert recordings(root) == []


async def test_hop_by_hop_headers_are_not_forwarded_either_way(
    make_app: AppFactory, upstream: FakeUpstream
) -> None:
    upstream.script(
        "GET",
        "/plain",
        Scripted(
            headers={
                "connection": "x-upstream-hop",
                "x-upstream-hop": "1",
                "keep-alive": "timeout=5",
                "x-end": "2",
            }
        ),
    )
    sent = headers(
        connection="x-client-hop",
        **{
            "x-client-hop": "1",
            "keep-alive": "timeout=5",
            "te": "trailers",
            "proxy-authorization": "Basic cHJveHk6cHc=",
            "x-kept": "yes",
            "x-hashreplay-run": "r1",
        },
    )
    async with client(make_app("live", upstream.url)) as c:
        response = await c.get("/plain", headers=sent)
    assert response.status_code == 200
    received = upstream.calls[-1].headers
    for name in (
        "x-client-hop",
        "keep-alive",
        "te",
        "proxy-authorization",
        "x-hashreplay-test-id",
        "x-hashreplay-run",
    ):
        assert name not in received, name
    assert received["x-kept"] == "yes"
    assert received["authorization"].startswith("Bearer ")
    assert received["host"] == upstream.url.removeprefix("http://")
    assert "x-upstream-hop" not in response.headers
    assert "keep-alive" not in response.headers
    assert response.headers["x-end"] == "2"


async def test_compressed_answers_reach_the_client_decoded_in_every_mode(
    make_app: AppFactory, root: Path
) -> None:
    with FakeUpstream(compress=True) as upstream:
        async with client(make_app("record", upstream.url)) as c:
            live = await c.post(
                CHAT, json=chat("zip"), headers=headers(**{"accept-encoding": "gzip"})
            )
    assert upstream.calls[-1].headers["accept-encoding"] == "gzip"
    assert "content-encoding" not in live.headers
    assert live.json()["choices"][0]["message"]["content"] == "echo: zip"
    [path] = recordings(root)
    assert "content-encoding" not in load(path)["response"]["headers"]
    async with client(make_app("replay")) as c:
        replayed = await c.post(
            CHAT, json=chat("zip"), headers=headers(**{"accept-encoding": "gzip"})
        )
    assert "content-encoding" not in replayed.headers
    assert replayed.json()["choices"][0]["message"]["content"] == "echo: zip"


async def test_health_stats_and_unknown_endpoints(
    make_app: AppFactory, upstream: FakeUpstream
) -> None:
    app = make_app("record-if-missing", upstream.url, f"a={upstream.url}")
    async with client(app) as c:
        health = await c.get("/__hashreplay/health")
        await c.post(CHAT, json=chat("s"), headers=headers())
        await c.post(CHAT, json=chat("s"), headers=headers(**{"x-hashreplay-run": "2"}))
        stats = (await c.get("/__hashreplay/stats")).json()
        unknown = await c.get("/__hashreplay/nope")
        wrong_method = await c.post("/__hashreplay/stats")
    assert health.json() == {"status": "ok", "mode": "record-if-missing"}
    assert stats["mode"] == "record-if-missing"
    assert (stats["recorded"], stats["replayed"], stats["requests"], stats["in_flight"]) == (
        1,
        1,
        2,
        0,
    )
    assert stats["upstreams"] == {"default": upstream.url, "a": upstream.url}
    assert (
        unknown.status_code == 404 and "/__hashreplay/health" in unknown.json()["error"]["message"]
    )
    assert wrong_method.status_code == 405
    assert len(upstream.calls) == 1


async def test_recording_without_an_upstream_is_a_clear_502(
    make_app: AppFactory, root: Path
) -> None:
    async with client(make_app("record")) as c:
        response = await c.post(CHAT, json=chat("x"), headers=headers())
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "no_upstream"
    assert "--upstream" in response.json()["error"]["message"]


def test_the_proxy_never_imports_the_interception_adapters() -> None:
    package = Path(hashreplay.__file__).parent / "server"
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert "adapters" not in (node.module or ""), path
            elif isinstance(node, ast.Import):
                assert not any("adapters" in a.name for a in node.names), path


def test_mode_comes_from_the_option_then_the_environment(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "record")
    assert ProxyApp(ServeSettings(root=str(root))).session.config.mode is Mode.RECORD
    assert ProxyApp(ServeSettings(root=str(root), mode="live")).session.config.mode is Mode.LIVE
