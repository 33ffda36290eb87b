"""The httpx/httpx2 adapter: what it intercepts, what it leaves alone, and failure paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import httpx as adapter
from hashreplay.core.constants import TEST_ID_HEADER
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.guards import ConnectGuard

TEST_ID = "tests/test_adapter.py::test_it"
MODULES = pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])


def chat(url: str, text: str = "hi") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


@MODULES
def test_uninstall_restores_the_original_methods(module: Any, recorder: Recorder) -> None:
    sync_before = module.HTTPTransport.handle_request
    async_before = module.AsyncHTTPTransport.handle_async_request
    recorder.start(Mode.REPLAY)
    assert module.HTTPTransport.handle_request is not sync_before
    assert module.HTTPTransport.handle_request.__wrapped__ is sync_before
    recorder.start(Mode.RECORD)  # installing again only swaps the session
    assert module.HTTPTransport.handle_request.__wrapped__ is sync_before
    adapter.uninstall()
    assert module.HTTPTransport.handle_request is sync_before
    assert module.AsyncHTTPTransport.handle_async_request is async_before
    assert not adapter.is_installed()


def test_aliased_httpx_is_patched_once() -> None:
    """After `httpx2.alias_httpx()`, `httpx` *is* httpx2: one patch, one restore."""
    script = """
import httpx2
httpx2.alias_httpx()
import httpx
from hashreplay.engine.session import Session
from hashreplay.core.config import load_config
from hashreplay.adapters import httpx as adapter
original = httpx2.HTTPTransport.handle_request
adapter.install(Session(load_config(env={})))
assert httpx.HTTPTransport is httpx2.HTTPTransport
assert len(adapter._patches) == 2, adapter._patches
assert httpx2.HTTPTransport.handle_request.__wrapped__ is original
adapter.uninstall()
assert httpx2.HTTPTransport.handle_request is original
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "ok", out.stderr


@MODULES
def test_mock_asgi_and_wsgi_transports_are_untouched(module: Any, recorder: Recorder) -> None:
    session = recorder.start(Mode.REPLAY)

    def handler(request: Any) -> Any:
        return module.Response(200, json={"mocked": True})

    async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"asgi"})

    def wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("content-type", "text/plain")])
        return [b"wsgi"]

    with test_context(TEST_ID):
        with module.Client(transport=module.MockTransport(handler)) as c:
            assert c.get("http://example.test/x").json() == {"mocked": True}
        with module.Client(transport=module.WSGITransport(app=wsgi_app)) as c:
            assert c.get("http://example.test/").text == "wsgi"

        async def via_asgi() -> str:
            transport = module.ASGITransport(app=asgi_app)
            async with module.AsyncClient(transport=transport) as c:
                return str((await c.get("http://example.test/")).text)

        import asyncio

        assert asyncio.run(via_asgi()) == "asgi"
    assert session.stats.as_dict() == {
        "replayed": 0,
        "recorded": 0,
        "missed": 0,
        "passed_through": 0,
        "not_recorded": 0,
        "server_missed": 0,
    }
    assert recorder.files() == []


def test_passthrough_urls_go_live_with_the_test_id_header(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    session = recorder.start(Mode.REPLAY, passthrough=[upstream.url + "/echo"])
    with test_context(TEST_ID), httpx2.Client() as c:
        r = c.post(f"{upstream.url}/echo", json={"a": 1})
    assert r.status_code == 200
    assert r.json()["headers"][TEST_ID_HEADER.lower()] == TEST_ID
    assert r.json()["headers"]["x-hashreplay-run"] == session.run_id_for(TEST_ID)
    assert session.stats.passed_through == 1
    assert session.stats.missed == 0
    assert recorder.files() == []


def test_live_mode_intercepts_and_writes_nothing(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    session = recorder.start(Mode.LIVE)
    with test_context(TEST_ID), httpx2.Client() as c:
        assert c.post(f"{upstream.url}/v1/chat/completions", json=chat("")).status_code == 200
    assert recorder.files() == []
    assert session.stats.recorded == 0
    assert len(upstream.calls) == 1


def test_connect_error_is_recorded_and_raised_again(recorder: Recorder) -> None:
    """With record_failures = "all" (a call with no response is recorded only then)."""
    with FakeUpstream() as fake:
        dead = fake.url
    recorder.start(Mode.RECORD, record_failures="all")
    with test_context(TEST_ID), httpx2.Client() as c, pytest.raises(httpx2.ConnectError):
        c.get(f"{dead}/v1/models/x")
    stored = json.loads(recorder.files()[0].read_text())
    assert stored["response"]["is_exception"] is True
    assert stored["response"]["status"] is None
    assert stored["response"]["exception"]["type"] == "httpx2.ConnectError"

    recorder.start(Mode.REPLAY, record_failures="all")
    with (
        ConnectGuard() as guard,
        test_context(TEST_ID),
        httpx2.Client() as c,
        pytest.raises(httpx2.ConnectError),
    ):
        c.get(f"{dead}/v1/models/x")
    assert guard.attempts == []


def test_read_timeout_replays_as_read_timeout(upstream: FakeUpstream, recorder: Recorder) -> None:
    """With record_failures = "all": a timeout before the status line is no answer."""
    upstream.script("POST", "/v1/chat/completions", Scripted(delay=1.0))
    recorder.start(Mode.RECORD, record_failures="all")
    with test_context(TEST_ID), httpx.Client(timeout=0.2) as c, pytest.raises(httpx.ReadTimeout):
        c.post(f"{upstream.url}/v1/chat/completions", json=chat(""))
    recorder.start(Mode.REPLAY, record_failures="all")
    with test_context(TEST_ID), httpx.Client(timeout=0.2) as c, pytest.raises(httpx.ReadTimeout):
        c.post(f"{upstream.url}/v1/chat/completions", json=chat(""))


def test_mid_stream_disconnect_replays_same_chunks_then_the_error(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    upstream.script("POST", "/v1/chat/completions", Scripted(disconnect_after_chunks=2))
    body = {**chat("", "a long story of many words"), "stream": True}

    def run() -> tuple[list[str], type[BaseException] | None]:
        lines: list[str] = []
        with (
            test_context(TEST_ID),
            httpx2.Client() as c,
            c.stream("POST", f"{upstream.url}/v1/chat/completions", json=body) as r,
        ):
            try:
                for line in r.iter_lines():
                    if line:
                        lines.append(
                            json.loads(line.removeprefix("data: "))["choices"][0]["delta"].get(
                                "content", ""
                            )
                        )
            except httpx2.TransportError as exc:
                return lines, type(exc)
        return lines, None

    recorder.start(Mode.RECORD)
    live_lines, live_error = run()
    assert live_error is not None and len(live_lines) == 2
    recorder.start(Mode.REPLAY)
    with ConnectGuard():
        replayed_lines, replayed_error = run()
    assert replayed_lines == live_lines
    assert replayed_error is live_error


def test_openai_retry_sequence_replays_in_order(upstream: FakeUpstream, recorder: Recorder) -> None:
    upstream.script(
        "POST",
        "/v1/chat/completions",
        Scripted(status=429, headers={"retry-after-ms": "1"}),
    )

    def run(url: str) -> str | None:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-x", max_retries=2)
        with test_context(TEST_ID):
            r = c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "retry me"}]
            )
        return r.choices[0].message.content

    recorder.start(Mode.RECORD)
    assert run(upstream.url) == "echo: retry me"
    assert len(upstream.calls) == 2
    stored = json.loads(recorder.files()[0].read_text())
    assert [stored["response"]["status"], stored["later_responses"][0]["status"]] == [429, 200]
    assert stored["response"]["headers"]["retry-after-ms"] == "1"
    upstream.stop()
    session = recorder.start(Mode.REPLAY)
    with ConnectGuard() as guard:
        assert run(upstream.url) == "echo: retry me"
    assert guard.attempts == []
    assert session.stats.replayed == 2


def _corrupt(recorder: Recorder, upstream: FakeUpstream) -> Path:
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID), httpx2.Client() as c:
        c.post(f"{upstream.url}/v1/chat/completions", json=chat(""))
    path = recorder.files()[0]
    path.write_bytes(path.read_bytes()[:50])
    return path


@pytest.mark.parametrize("mode", [Mode.REPLAY, Mode.RECORD_IF_MISSING])
def test_unreadable_recording_fails_closed_and_is_left_untouched(
    mode: Mode, upstream: FakeUpstream, recorder: Recorder
) -> None:
    path = _corrupt(recorder, upstream)
    before = path.read_bytes()
    calls = len(upstream.calls)
    session = recorder.start(mode)
    with ConnectGuard() as guard, test_context(TEST_ID), httpx2.Client() as c:
        r = c.post(f"{upstream.url}/v1/chat/completions", json=chat(""))
    assert r.status_code == 404
    assert r.headers["x-should-retry"] == "false"
    report = session.take_misses(TEST_ID)[0].report
    assert f"tests/recordings/{path.name}" in report  # named from the project root
    assert "truncated" in report
    assert path.read_bytes() == before
    assert guard.attempts == []
    assert len(upstream.calls) == calls


def test_clients_created_before_install_are_intercepted(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    early = httpx2.Client()
    session = recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        early.get(f"{upstream.url}/plain")
    early.close()
    assert session.stats.recorded == 1
    assert len(recorder.files()) == 1


def test_record_passes_live_chunks_through_without_buffering(recorder: Recorder) -> None:
    """The server sends its second event only after the client has seen the first one:
    a recorder that buffered the whole stream would deadlock here."""
    import socket
    import threading

    seen_first = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        first = b'data: {"n": 1}\n\n'
        conn.sendall(b"%x\r\n%s\r\n" % (len(first), first))
        seen_first.wait(timeout=5)
        second = b"data: [DONE]\n\n"
        conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(second), second))
        conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    recorder.start(Mode.RECORD)
    lines = []
    with (
        test_context(TEST_ID),
        httpx2.Client(timeout=3) as c,
        c.stream("GET", f"http://127.0.0.1:{port}/events") as r,
    ):
        for line in r.iter_lines():
            if line:
                lines.append(line)
                seen_first.set()
    listener.close()
    assert lines == ['data: {"n": 1}', "data: [DONE]"]
    stored = json.loads(recorder.files()[0].read_text())["response"]
    assert stored["body"] == [{"data": {"n": 1}}, {"data": "[DONE]"}]


@pytest.mark.parametrize("mode", [Mode.RECORD, Mode.REPLAY])
def test_closing_a_stream_early_works(
    mode: Mode, upstream: FakeUpstream, recorder: Recorder
) -> None:
    body = {**chat("", "one two three four five six seven"), "stream": True}
    other = chat("", "after the early close")
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID), httpx2.Client() as c:
        c.post(f"{upstream.url}/v1/chat/completions", json=body)  # full recordings first
        c.post(f"{upstream.url}/v1/chat/completions", json=other)
    session = recorder.start(mode)
    with test_context(TEST_ID), httpx2.Client() as c:
        with c.stream("POST", f"{upstream.url}/v1/chat/completions", json=body) as r:
            first = next(line for line in r.iter_lines() if line)
        assert first.startswith("data: {")
        again = c.post(f"{upstream.url}/v1/chat/completions", json=other)  # client still usable
        assert again.status_code == 200
    assert session.stats.missed == 0
