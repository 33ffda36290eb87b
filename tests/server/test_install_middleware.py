"""`hashreplay.install()` and the ASGI/WSGI `TestIdMiddleware`, in-process."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import hashreplay
from hashreplay import Mode, current_test_id
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.asgi import TestIdMiddleware as AsgiMiddleware
from hashreplay.core.config import load_config
from hashreplay.engine.session import Session
from hashreplay.wsgi import TestIdMiddleware as WsgiMiddleware
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.server.conftest import chat, load, recordings

TEST_ID = "tests/service/test_gateway.py::test_answers[one]"
CHAT = "/v1/chat/completions"


@pytest.fixture
def installed(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A process environment as a server under test sees it, and uninstall at the end."""
    monkeypatch.setenv("HASHREPLAY_ROOT", str(root))
    monkeypatch.setenv("INFERENCE_MODE", "record")
    try:
        yield root
    finally:
        hashreplay.uninstall()


def asgi_app(upstream_url: str) -> Any:
    """A plain ASGI app: `/ask` calls the upstream once; `/stream` calls it while streaming."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await receive()
        async with httpx2.AsyncClient(base_url=upstream_url) as client:
            if scope["path"] == "/ask":
                answer = await client.post(CHAT, json=chat("hi"))
                body = json.dumps({"text": answer.json()["choices"][0]["message"]["content"]})
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": body.encode()})
                return
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for word in ("a", "b"):  # upstream calls made while the response streams
                answer = await client.post(CHAT, json=chat(word))
                text = answer.json()["choices"][0]["message"]["content"]
                await send(
                    {
                        "type": "http.response.body",
                        "body": f"{text}|{current_test_id()}\n".encode(),
                        "more_body": True,
                    }
                )
            await send({"type": "http.response.body", "body": b""})

    return app


def test_install_reads_the_environment_and_is_idempotent(installed: Path) -> None:
    original = httpx2.AsyncHTTPTransport.handle_async_request
    session = hashreplay.install()
    assert session.config.mode is Mode.RECORD
    assert session.config.root == installed.resolve()
    assert hashreplay.install() is session
    assert httpx_adapter.active_session() is session
    assert httpx2.AsyncHTTPTransport.handle_async_request is not original
    hashreplay.uninstall()
    assert httpx2.AsyncHTTPTransport.handle_async_request is original
    assert httpx_adapter.active_session() is None
    hashreplay.uninstall()  # idempotent too
    assert hashreplay.install() is not session  # a fresh session after uninstall


async def test_install_reuses_a_session_that_already_intercepts(
    root: Path, upstream: FakeUpstream
) -> None:
    """An app served in-process under the pytest plugin shares the plugin's session, and
    the plugin keeps the misses it fails the test with."""
    plugin_session = Session(load_config(root, env={}, mode="replay"))
    httpx_adapter.install(plugin_session)
    try:
        assert hashreplay.install() is plugin_session
        app = AsgiMiddleware(asgi_app(upstream.url))
        transport = httpx2.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
            response = await client.post("/ask", headers={"X-HashReplay-Test-Id": TEST_ID})
        assert response.status_code == 500  # the app's SDK got the miss answer
        [miss] = plugin_session.take_misses(TEST_ID)
        assert miss.test_id == TEST_ID
        hashreplay.uninstall()  # not ours: left alone
        assert httpx_adapter.active_session() is plugin_session
    finally:
        httpx_adapter.uninstall()


def test_install_reports_an_invalid_mode(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "sometimes")
    with pytest.raises(
        hashreplay.ConfigError, match="expected one of replay, record-if-missing, record, live"
    ):
        hashreplay.install()
    assert not httpx_adapter.is_installed()


def test_install_with_a_bad_callables_entry_patches_nothing(
    installed: Path,
) -> None:
    original = httpx2.HTTPTransport.handle_request
    (installed / "pyproject.toml").write_text(
        '[tool.hashreplay]\ncallables = ["no_such_module_xyz:call"]\n'
    )
    with pytest.raises(hashreplay.ConfigError, match="callables entry 'no_such_module_xyz:call'"):
        hashreplay.install()
    assert httpx2.HTTPTransport.handle_request is original
    assert httpx_adapter.active_session() is None


async def test_asgi_middleware_stores_calls_per_test_id(
    installed: Path, upstream: FakeUpstream
) -> None:
    hashreplay.install()
    app = AsgiMiddleware(asgi_app(upstream.url))
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
        tagged = await client.post("/ask", headers={"X-HashReplay-Test-Id": TEST_ID})
        untagged = await client.post("/ask")
        streamed = await client.post("/stream", headers={"X-HashReplay-Test-Id": TEST_ID})
    assert tagged.json() == untagged.json() == {"text": "echo: hi"}
    assert streamed.text == f"echo: a|{TEST_ID}\necho: b|{TEST_ID}\n"
    by_test: dict[Any, list[Path]] = {}
    for path in recordings(installed):
        by_test.setdefault(load(path)["test_id"], []).append(path)
    assert {p.parent for p in by_test[TEST_ID]} == {installed / "tests" / "service" / "recordings"}
    assert len(by_test[TEST_ID]) == 3  # /ask once, /stream twice
    assert [p.parent for p in by_test[None]] == [installed / "recordings"]


async def test_asgi_run_header_restarts_identical_requests(
    installed: Path,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hashreplay.install()
    app = AsgiMiddleware(asgi_app(upstream.url))
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://app"
    ) as client:
        await client.post(
            "/ask", headers={"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": "r1"}
        )
    hashreplay.uninstall()
    monkeypatch.setenv("INFERENCE_MODE", "replay")
    session = hashreplay.install()
    upstream.stop()

    async def ask(run: str) -> int:
        h = {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": run}
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://app",
        ) as client:
            return (await client.post("/ask", headers=h)).status_code

    assert await ask("r1") == 200
    with caplog.at_level(logging.WARNING, logger="hashreplay"):
        assert await ask("r1") == 500  # the same run asks again: no second recording (a miss)
    assert session.stats.missed == 1
    [report] = [r.getMessage() for r in caplog.records if "no recording for" in r.getMessage()]
    assert TEST_ID in report and "this request was recorded once in this test" in report
    assert session.take_misses(TEST_ID) == []  # logged, not kept
    assert await ask("r2") == 200  # a new run of the test replays from its first call


async def test_asgi_lifespan_passes_through_untouched() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    await AsgiMiddleware(app)({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan"]


async def test_without_install_the_middleware_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import hashreplay.server_mode as install_module

    install_module._warned[0] = False

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    client = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=AsgiMiddleware(app)), base_url="http://app"
    )
    with caplog.at_level(logging.WARNING, logger="hashreplay"):
        async with client:
            for _ in range(2):
                await client.get("/", headers={"X-HashReplay-Test-Id": TEST_ID})
    warnings = [r.getMessage() for r in caplog.records if "install()" in r.getMessage()]
    assert len(warnings) == 1
    assert TEST_ID in warnings[0] and "call hashreplay.install() at start-up" in warnings[0]


def test_wsgi_middleware_keeps_the_test_id_while_the_body_streams(
    installed: Path, upstream: FakeUpstream
) -> None:
    hashreplay.install()

    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("content-type", "text/plain")])
        with httpx2.Client(base_url=upstream.url) as client:
            for word in ("x", "y"):  # runs while the server iterates the body
                text = client.post(CHAT, json=chat(word)).json()["choices"][0]["message"]["content"]
                yield f"{text}|{current_test_id()}\n".encode()

    wrapped = WsgiMiddleware(app)
    with httpx2.Client(
        transport=httpx2.WSGITransport(app=wrapped), base_url="http://app"
    ) as client:
        tagged = client.get("/", headers={"X-HashReplay-Test-Id": TEST_ID})
        untagged = client.get("/")
    assert tagged.text == f"echo: x|{TEST_ID}\necho: y|{TEST_ID}\n"
    assert untagged.text == "echo: x|None\necho: y|None\n"
    tests = sorted(
        (load(p)["test_id"] or "", p.parent.name, p.parent.parent.name)
        for p in recordings(installed)
    )
    assert tests == [
        ("", "recordings", installed.name),
        ("", "recordings", installed.name),
        (TEST_ID, "recordings", "service"),
        (TEST_ID, "recordings", "service"),
    ]


async def test_middleware_header_values_are_decoded_as_utf8() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(current_test_id())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    session = Session(load_config(env={}, mode="replay"))
    wrapped = AsgiMiddleware(app, session=session)
    scope = {"type": "http", "headers": [(b"x-hashreplay-test-id", "t.py::test_é".encode())]}

    async def receive() -> Any:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        pass

    await wrapped(scope, receive, send)
    await wrapped({"type": "http", "headers": [(b"x-hashreplay-test-id", b"  ")]}, receive, send)
    assert seen == ["t.py::test_é", None]


def test_install_applies_the_projects_scrub_patterns_to_what_is_keyed_and_written(
    installed: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scrub` in every front end (docs/design.md §14): `install()` reads the same table as
    the plugin and the proxy."""
    (installed / "pyproject.toml").write_text(
        '[tool.hashreplay]\nscrub = [{pattern = "ticket-[0-9]+", replace = "ticket-N"}]\n'
    )
    upstream.script(
        "POST", CHAT, Scripted(json={"id": "c1", "choices": [], "note": "opened ticket-42"})
    )
    hashreplay.install()
    live = httpx2.post(upstream.url + CHAT, json=chat("about ticket-42"))
    assert live.json()["note"] == "opened ticket-42"  # the live answer is not changed
    hashreplay.uninstall()
    (path,) = recordings(installed)
    stored = load(path)
    assert stored["request"]["body"]["messages"][0]["content"] == "about ticket-N"
    assert stored["response"]["body"]["note"] == "opened ticket-N"
    assert b"ticket-42" not in path.read_bytes()

    monkeypatch.setenv("INFERENCE_MODE", "replay")
    upstream.stop()
    hashreplay.install()
    again = httpx2.post(upstream.url + CHAT, json=chat("about ticket-7"))
    assert again.status_code == 200, again.text
    assert again.json()["note"] == "opened ticket-N"


SERVER_STEP = (
    "  to record it: restart the server with INFERENCE_MODE=record-if-missing in its "
    "environment (the mode given to pytest does not reach it), then run the test again: "
    f"pytest {TEST_ID}"
)


async def test_an_asgi_miss_says_to_restart_the_server_and_marks_the_response(
    installed: Path,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "replay")
    hashreplay.install()
    upstream.stop()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        async with httpx2.AsyncClient(base_url=upstream.url) as client:
            answers = [await client.post(CHAT, json=chat(word)) for word in ("a", "b")]
        body = json.dumps([a.status_code for a in answers]).encode()
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": body})

    transport = httpx2.ASGITransport(app=AsgiMiddleware(app))
    with caplog.at_level(logging.WARNING, logger="hashreplay"):
        async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
            tagged = await client.post("/", headers={"X-HashReplay-Test-Id": TEST_ID})
            untagged = await client.post("/")
    assert tagged.json() == [404, 404]
    assert tagged.headers["x-hashreplay-server-misses"] == "2"
    assert "x-hashreplay-server-misses" not in untagged.headers  # no test: nobody counts it
    reports = [r.getMessage() for r in caplog.records if "no recording for" in r.getMessage()]
    tagged_reports = [report for report in reports if f"test:      {TEST_ID}" in report]
    assert len(reports) == 4 and len(tagged_reports) == 2
    assert all(report.splitlines()[-1] == SERVER_STEP for report in tagged_reports)


def test_a_wsgi_miss_says_to_restart_the_server_and_marks_the_response(
    installed: Path,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "replay")
    hashreplay.install()
    upstream.stop()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with httpx2.Client(base_url=upstream.url) as client:
            status = client.post(CHAT, json=chat("w")).status_code
        start_response("502 Bad Gateway", [("content-type", "text/plain")])
        return [str(status).encode()]

    with (
        caplog.at_level(logging.WARNING, logger="hashreplay"),
        httpx2.Client(
            transport=httpx2.WSGITransport(app=WsgiMiddleware(app)), base_url="http://app"
        ) as client,
    ):
        response = client.get("/", headers={"X-HashReplay-Test-Id": TEST_ID})
    assert response.text == "404"
    assert response.headers["x-hashreplay-server-misses"] == "1"
    [report] = [r.getMessage() for r in caplog.records if "no recording for" in r.getMessage()]
    assert report.splitlines()[-1] == SERVER_STEP


def test_the_plugins_session_keeps_the_pytest_command(root: Path, upstream: FakeUpstream) -> None:
    """An app served in-process under the plugin's session: the pytest command does record
    it there, and the plugin fails the test with the miss (no header)."""
    plugin_session = Session(load_config(root, env={}, mode="replay"))
    httpx_adapter.install(plugin_session)
    upstream.stop()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with httpx2.Client(base_url=upstream.url) as client:
            client.post(CHAT, json=chat("w"))
        start_response("502 Bad Gateway", [])
        return [b""]

    try:
        with httpx2.Client(
            transport=httpx2.WSGITransport(app=WsgiMiddleware(app)), base_url="http://app"
        ) as client:
            response = client.get("/", headers={"X-HashReplay-Test-Id": TEST_ID})
    finally:
        httpx_adapter.uninstall()
    assert "x-hashreplay-server-misses" not in response.headers
    [miss] = plugin_session.take_misses(TEST_ID)
    assert miss.report.splitlines()[-1] == (
        f"  to record it: INFERENCE_MODE=record-if-missing pytest {TEST_ID}"
    )
