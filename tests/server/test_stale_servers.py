"""`max_age` and `stale` where no test ends (docs/server.md, "Stale recordings"): the proxy
(`hashreplay serve`, its ASGI app in-process) answers a stale recording with a warning
(a log line and `x-hashreplay-stale: <days>d`) or, under `stale = "fail"`, with the miss
error's shape naming the file and its age; `install()` in a server logs a warning or gives
its client the miss answer and logs the report; `refresh` in record-if-missing records the
request again and renews its day in both. `HASHREPLAY_TODAY` stands in for the clock."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import hashreplay
from hashreplay.asgi import TestIdMiddleware
from hashreplay.core.config import load_config
from hashreplay.core.errors import ConfigError
from hashreplay.engine.session import Session
from hashreplay.server.app import ProxyApp
from hashreplay.server.cli import ServeSettings
from hashreplay.server.forward import STALE_HINT
from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import chat, load, recordings

TEST_ID = "tests/api/test_chat.py::test_hello"
CHAT = "/v1/chat/completions"
DAY1 = "2025-01-10"
LATER = "2025-05-01"  # 111 days after DAY1

AppFactory = Callable[..., ProxyApp]


def configure(root: Path, table: str) -> None:
    (root / "pyproject.toml").write_text(f"[tool.hashreplay]\n{table}\n")


async def ask(app: ProxyApp) -> httpx2.Response:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://proxy") as c:
        return await c.post(
            CHAT,
            json=chat("hello"),
            headers={"x-hashreplay-test-id": TEST_ID, "x-hashreplay-run": "1"},
        )


async def recorded_through_proxy(
    make_app: AppFactory, upstream: FakeUpstream, root: Path, mp: pytest.MonkeyPatch
) -> Path:
    mp.setenv("HASHREPLAY_TODAY", DAY1)
    assert (await ask(make_app("record", upstream.url))).status_code == 200
    [path] = recordings(root)
    assert load(path)["response"]["recorded_on"] == DAY1
    mp.setenv("HASHREPLAY_TODAY", LATER)
    return path


async def test_proxy_warns_with_a_log_line_and_a_header(
    make_app: AppFactory,
    upstream: FakeUpstream,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = await recorded_through_proxy(make_app, upstream, root, monkeypatch)
    before = path.read_bytes()
    configure(root, 'max_age = "90d"')  # stale = "warn" by default
    with caplog.at_level(logging.WARNING, logger="hashreplay"):
        response = await ask(make_app("replay"))
    assert response.status_code == 200
    assert response.headers["x-hashreplay-stale"] == "111d"
    assert response.json()["choices"][0]["message"]["content"] == "echo: hello"
    [line] = [r.getMessage() for r in caplog.records if "older than max_age" in r.getMessage()]
    shown = path.relative_to(root)
    assert line == (
        f"hashreplay: {TEST_ID}: replayed a recording older than max_age: {shown}: recorded on "
        f"{DAY1}, 111 days ago (max_age 90d)"
    )
    assert path.read_bytes() == before

    configure(root, 'max_age = "112d"\nstale = "fail"')  # within the limit: no header
    response = await ask(make_app("replay"))
    assert response.status_code == 200
    assert "x-hashreplay-stale" not in response.headers


async def test_proxy_fail_answers_like_a_miss_naming_the_file_and_its_age(
    make_app: AppFactory,
    upstream: FakeUpstream,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = await recorded_through_proxy(make_app, upstream, root, monkeypatch)
    configure(root, 'max_age = "90d"\nstale = "fail"')
    app = make_app("replay")
    with caplog.at_level(logging.WARNING, logger="hashreplay"):
        response = await ask(app)
    assert response.status_code == 404  # the miss answer's status and shape
    assert response.headers["x-hashreplay-miss"] == "1"
    assert response.headers["x-should-retry"] == "false"
    assert response.headers["x-hashreplay-stale"] == "111d"
    error = response.json()["error"]
    assert (error["type"], error["code"], error["test_id"]) == (
        "hashreplay_stale",
        "hashreplay_stale",
        TEST_ID,
    )
    shown = path.relative_to(root)
    assert error["message"] == (
        f"hashreplay: {TEST_ID}: its recording is older than max_age: {shown}: recorded on "
        f'{DAY1}, 111 days ago (max_age 90d), and stale = "fail" refuses it; to renew it, '
        'make this request in record-if-missing mode with stale = "refresh" (or record it '
        "again in record mode)"
    )
    assert error["hint"] == STALE_HINT
    assert [r.getMessage() for r in caplog.records if "older than" in r.getMessage()] == [
        error["message"]
    ]
    assert app.stats()["errors"] == {"stale": 1}


async def test_proxy_refresh_records_again_in_record_if_missing_and_warns_in_replay(
    make_app: AppFactory, upstream: FakeUpstream, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await recorded_through_proxy(make_app, upstream, root, monkeypatch)
    before = load(path)
    configure(root, 'max_age = "90d"\nstale = "refresh"')
    response = await ask(make_app("replay"))  # replay cannot record: a warning
    assert (response.status_code, response.headers["x-hashreplay-stale"]) == (200, "111d")

    calls = len(upstream.calls)
    response = await ask(make_app("record-if-missing", upstream.url))
    assert response.status_code == 200
    assert "x-hashreplay-stale" not in response.headers
    assert len(upstream.calls) == calls + 1
    after = load(path)
    assert after["response"]["recorded_on"] == LATER  # the one intended change
    after["response"]["recorded_on"] = DAY1
    assert after == before
    response = await ask(make_app("record-if-missing", upstream.url))  # fresh: replayed
    assert "x-hashreplay-stale" not in response.headers
    assert len(upstream.calls) == calls + 1


# --- install() in a server under test -------------------------------------------------------


@pytest.fixture
def server_env(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("HASHREPLAY_ROOT", str(root))
    try:
        yield root
    finally:
        hashreplay.uninstall()


def gateway(upstream_url: str) -> Any:
    """A server under test: `/ask` calls the upstream and answers with what it got."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        async with httpx2.AsyncClient(base_url=upstream_url) as client:
            answer = await client.post(CHAT, json=chat("hi"))
        body = json.dumps({"status": answer.status_code, "body": answer.json()}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return TestIdMiddleware(app)


async def call_gateway(upstream_url: str, run: str) -> dict[str, Any]:
    transport = httpx2.ASGITransport(app=gateway(upstream_url))
    async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
        headers = {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": run}
        data: dict[str, Any] = (await client.post("/ask", headers=headers)).json()
        return data


def reinstall(mp: pytest.MonkeyPatch, mode: str, today: str) -> Session:
    hashreplay.uninstall()
    mp.setenv("INFERENCE_MODE", mode)
    mp.setenv("HASHREPLAY_TODAY", today)
    return hashreplay.install()


async def test_install_warns_in_the_log_fails_like_a_miss_and_refreshes(
    server_env: Path,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = server_env
    reinstall(monkeypatch, "record", DAY1)
    assert (await call_gateway(upstream.url, "r1"))["status"] == 200
    [path] = recordings(root)
    shown = path.relative_to(root)
    before = load(path)

    configure(root, 'max_age = "90d"')
    session = reinstall(monkeypatch, "replay", LATER)
    with caplog.at_level(logging.WARNING, logger="hashreplay"):
        assert (await call_gateway(upstream.url, "r2"))["status"] == 200
        assert (await call_gateway(upstream.url, "r3"))["status"] == 200
    warned = [r.getMessage() for r in caplog.records if "older than max_age" in r.getMessage()]
    line = (
        f"hashreplay: {TEST_ID}: replayed a recording older than max_age: {shown}: recorded on "
        f"{DAY1}, 111 days ago (max_age 90d)"
    )
    assert warned == [line, line]  # once per request that used it
    assert session.take_stale(TEST_ID) == []  # logged, not kept
    caplog.clear()

    configure(root, 'max_age = "90d"\nstale = "fail"')
    session = reinstall(monkeypatch, "replay", LATER)
    with caplog.at_level(logging.WARNING, logger="hashreplay"):
        answer = await call_gateway(upstream.url, "r4")
    assert answer["status"] == 404  # the app's client got the miss answer
    assert answer["body"]["error"]["code"] == "hashreplay_stale"
    assert (
        f"{shown}: recorded on {DAY1}, 111 days ago (max_age 90d)"
        in (answer["body"]["error"]["message"])
    )
    [report] = [r.getMessage() for r in caplog.records if "older than max_age" in r.getMessage()]
    assert report == answer["body"]["error"]["message"]  # logged once, as a miss is
    assert session.stats.missed == 1
    assert session.take_misses(TEST_ID) == []

    configure(root, 'max_age = "90d"\nstale = "refresh"')
    calls = len(upstream.calls)
    reinstall(monkeypatch, "record-if-missing", LATER)
    assert (await call_gateway(upstream.url, "r5"))["status"] == 200
    assert len(upstream.calls) == calls + 1
    after = load(path)
    assert after["response"]["recorded_on"] == LATER
    after["response"]["recorded_on"] = DAY1
    assert after == before


def test_install_refuses_a_bad_max_age_naming_the_setting(
    server_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(server_env, 'max_age = "3 months"')
    with pytest.raises(ConfigError, match=r"`max_age`: '3 months' is not an age"):
        reinstall(monkeypatch, "replay", LATER)


def test_a_bad_today_stops_the_proxy_before_it_serves(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HASHREPLAY_TODAY", "yesterday")
    settings = ServeSettings(upstreams=(), root=str(root))
    with pytest.raises(ConfigError, match="HASHREPLAY_TODAY: expected a day written YYYY-MM-DD"):
        ProxyApp(settings, session=Session(load_config(root, env={}, mode="replay")))
