"""The aiohttp adapter: every mode, recorded failures, restore and seam checks."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import pytest

from hashreplay import HashReplayWarning, Mode, test_context
from hashreplay.adapters import aiohttp as adapter
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.engine.http import ReplayPlan
from tests.aiohttp_harness import TEST_ID, AioRecorder, aio_recorder
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.guards import ConnectGuard

__all__ = ["aio_recorder"]  # the fixture, used by name

T = TypeVar("T")
CHAT = "/v1/chat/completions"


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


def run(make: Callable[[aiohttp.ClientSession], Awaitable[T]], **session_args: Any) -> T:
    """`make(session)` in a fresh loop and ClientSession, as test TEST_ID."""

    async def go() -> T:
        async with aiohttp.ClientSession(**session_args) as s:
            return await make(s)

    with test_context(TEST_ID):
        return asyncio.run(go())


async def post_json(s: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


# --- install / uninstall -----------------------------------------------------------------


def test_uninstall_restores_the_original_request(aio_recorder: AioRecorder) -> None:
    before = aiohttp.ClientSession._request
    aio_recorder.start(Mode.REPLAY)
    assert aiohttp.ClientSession._request is not before
    assert aiohttp.ClientSession._request.__wrapped__ is before  # type: ignore[attr-defined]
    aio_recorder.start(Mode.RECORD)  # installing again only swaps the session
    assert aiohttp.ClientSession._request.__wrapped__ is before  # type: ignore[attr-defined]
    adapter.uninstall()
    assert aiohttp.ClientSession._request is before
    assert not adapter.is_installed()


def test_activate_and_deactivate_cover_aiohttp(tmp_path: Any) -> None:
    from hashreplay.adapters import activate, deactivate
    from hashreplay.core.config import load_config
    from hashreplay.engine.session import Session

    before = aiohttp.ClientSession._request
    session = Session(load_config(tmp_path, env={}, mode="replay"))
    activate(session)
    try:
        assert adapter.is_installed()
    finally:
        deactivate()
        session.close()
    assert aiohttp.ClientSession._request is before


def test_an_aiohttp_without_middlewares_is_warned_about_not_patched(
    aio_recorder: AioRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def old_request(self: Any, method: str, url: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")

    monkeypatch.setattr(aiohttp.ClientSession, "_request", old_request)
    monkeypatch.setattr(adapter, "_warned", [])
    with pytest.warns(HashReplayWarning) as caught:
        aio_recorder.start(Mode.REPLAY)
        aio_recorder.start(Mode.RECORD)  # warned once, not at every install
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"aiohttp {aiohttp.__version__}" in message
    assert "not recorded" in message
    assert "3.12.2 or later" in message
    assert aiohttp.ClientSession._request is old_request
    assert not adapter.is_installed()


def test_nothing_is_intercepted_without_a_session(upstream: FakeUpstream) -> None:
    assert not adapter.is_installed()
    status, body = run(lambda s: post_json(s, f"{upstream.url}{CHAT}", chat("alone")))
    assert status == 200 and body["choices"][0]["message"]["content"] == "echo: alone"


# --- the modes -----------------------------------------------------------------------------


def test_sessions_made_before_install_are_intercepted(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    async def go() -> int:
        s = aiohttp.ClientSession()
        aio_recorder.start(Mode.RECORD)
        with test_context(TEST_ID):
            async with s.get(f"{upstream.url}/plain") as r:
                await r.read()
        await s.close()
        return r.status

    assert asyncio.run(go()) == 200
    assert len(aio_recorder.files()) == 1


def test_live_mode_sends_and_writes_nothing(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    session = aio_recorder.start(Mode.LIVE)
    status, _ = run(lambda s: post_json(s, f"{upstream.url}{CHAT}", chat("live")))
    assert status == 200
    assert aio_recorder.files() == []
    assert session.stats.recorded == 0
    assert len(upstream.calls) == 1


def test_passthrough_goes_live_with_the_test_id_header(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    session = aio_recorder.start(Mode.REPLAY, passthrough=[upstream.url + "/echo"])
    status, body = run(lambda s: post_json(s, f"{upstream.url}/echo", {"a": 1}))
    assert status == 200
    assert body["headers"][TEST_ID_HEADER.lower()] == TEST_ID
    assert body["headers"]["x-hashreplay-run"] == session.run_id_for(TEST_ID)
    assert session.stats.passed_through == 1
    assert aio_recorder.files() == []


def test_record_if_missing_records_once_then_replays(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    aio_recorder.start(Mode.RECORD_IF_MISSING)
    first = run(lambda s: post_json(s, f"{upstream.url}{CHAT}", chat("once")))
    session = aio_recorder.start(Mode.RECORD_IF_MISSING)
    second = run(lambda s: post_json(s, f"{upstream.url}{CHAT}", chat("once")))
    assert len(upstream.calls) == 1
    assert session.stats.replayed == 1
    assert second[1]["choices"] == first[1]["choices"]


def test_a_miss_answers_404_and_fails_the_test(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    session = aio_recorder.start(Mode.REPLAY)

    async def go(s: aiohttp.ClientSession) -> tuple[int, str, str]:
        async with s.post(f"{upstream.url}{CHAT}", json=chat("never recorded")) as r:
            with pytest.raises(aiohttp.ClientResponseError) as raised:
                r.raise_for_status()
            return raised.value.status, r.headers["x-should-retry"], await r.text()

    with ConnectGuard() as guard:
        status, retry, text = run(go)
    assert (status, retry) == (404, "false")
    assert "hashreplay" in text.lower()
    assert len(session.take_misses(TEST_ID)) == 1
    assert guard.attempts == []
    assert upstream.calls == []


def test_redirects_and_head_requests(upstream: FakeUpstream, aio_recorder: AioRecorder) -> None:
    """Each hop of a redirect is its own request, followed by aiohttp as live; a HEAD
    answer has no body. (`location` is not a header files keep by default.)"""
    upstream.script("GET", "/moved", Scripted(status=302, headers={"location": "/plain"}))

    async def go(s: aiohttp.ClientSession) -> tuple[str, int, list[int], int, bytes]:
        async with s.get(f"{upstream.url}/moved") as r:
            text = await r.text()
            hops = [h.status for h in r.history]
        async with s.head(f"{upstream.url}/plain") as h:
            return text, r.status, hops, h.status, await h.read()

    aio_recorder.start(Mode.RECORD, keep_response_headers=["location"])
    live = run(go)
    assert live == ("hello from fake upstream", 200, [302], 501, b"")  # the fake has no HEAD
    assert len(aio_recorder.files()) == 3
    upstream.stop()
    aio_recorder.start(Mode.REPLAY, keep_response_headers=["location"])
    with ConnectGuard() as guard:
        assert run(go) == live
    assert guard.attempts == []


def test_gzip_is_stored_decoded_and_replayed(aio_recorder: AioRecorder) -> None:
    body = chat("zip a stream", stream=True)

    async def go(s: aiohttp.ClientSession) -> tuple[str | None, bytes]:
        async with s.post(f"{url}{CHAT}", json=body) as r:
            return r.headers.get("content-encoding"), await r.read()

    with FakeUpstream(compress=True) as fake:
        url = fake.url
        aio_recorder.start(Mode.RECORD)
        coding, live = run(go)
    assert coding == "gzip"
    stored = json.loads(aio_recorder.files()[0].read_text())["response"]
    assert "content-encoding" not in stored["headers"]
    assert stored["body"][-1] == {"data": "[DONE]"}
    aio_recorder.start(Mode.REPLAY)
    with ConnectGuard():
        coding, replayed = run(go)
    assert coding is None
    assert replayed.count(b"data: ") == live.count(b"data: ")


# --- failures ------------------------------------------------------------------------------


def test_connect_error_is_recorded_and_replayed_as_aiohttps_own(aio_recorder: AioRecorder) -> None:
    """With record_failures = "all" (a call with no response is recorded only then)."""
    with FakeUpstream() as fake:
        dead = fake.url

    async def go(s: aiohttp.ClientSession) -> None:
        await s.get(f"{dead}/v1/models/x")

    aio_recorder.start(Mode.RECORD, record_failures="all")
    with pytest.raises(aiohttp.ClientConnectorError):
        run(go)
    stored = json.loads(aio_recorder.files()[0].read_text())["response"]
    assert stored["status"] is None
    assert stored["exception"]["type"].endswith("ClientConnectorError")

    aio_recorder.start(Mode.REPLAY, record_failures="all")
    with ConnectGuard() as guard, pytest.raises(aiohttp.ClientConnectorError) as raised:
        run(go)
    assert guard.attempts == []
    assert str(raised.value).startswith(f"Cannot connect to host 127.0.0.1:{dead.rsplit(':')[-1]}")


def test_read_timeout_replays_as_server_timeout(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    """With record_failures = "all": a timeout before the status line is no answer."""
    upstream.script("POST", CHAT, Scripted(delay=1.0))
    timeout = aiohttp.ClientTimeout(sock_read=0.2)

    async def go(s: aiohttp.ClientSession) -> None:
        await s.post(f"{upstream.url}{CHAT}", json=chat("slow"))

    aio_recorder.start(Mode.RECORD, record_failures="all")
    with pytest.raises(aiohttp.ServerTimeoutError):
        run(go, timeout=timeout)
    aio_recorder.start(Mode.REPLAY, record_failures="all")
    with ConnectGuard(), pytest.raises(aiohttp.ServerTimeoutError):
        run(go, timeout=timeout)


def test_mid_stream_disconnect_replays_the_same_lines_then_the_error(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    upstream.script("POST", CHAT, Scripted(disconnect_after_chunks=2))
    body = chat("a long story of many words indeed", stream=True)

    async def go(s: aiohttp.ClientSession) -> tuple[list[bytes], type[BaseException] | None]:
        lines: list[bytes] = []
        async with s.post(f"{upstream.url}{CHAT}", json=body) as r:
            try:
                async for line in r.content:
                    if line.strip():
                        lines.append(line)
            except aiohttp.ClientError as exc:
                return lines, type(exc)
        return lines, None

    aio_recorder.start(Mode.RECORD)
    live_lines, live_error = run(go)
    assert live_error is aiohttp.ClientPayloadError
    assert len(live_lines) == 2
    aio_recorder.start(Mode.REPLAY)
    with ConnectGuard():
        replayed_lines, replayed_error = run(go)
    assert len(replayed_lines) == 2
    assert replayed_error is live_error


@pytest.mark.parametrize(
    ("recorded", "in_body", "expected"),
    [
        ("aiohttp.client_exceptions.ServerDisconnectedError", False, "ServerDisconnectedError"),
        ("aiohttp.client_exceptions.ClientPayloadError", True, "ClientPayloadError"),
        ("httpx2.ReadTimeout", True, "ServerTimeoutError"),
        ("builtins.TimeoutError", False, "ServerTimeoutError"),
        ("httpx2.ConnectError", False, "ClientConnectionError"),
        ("httpx2.RemoteProtocolError", True, "ClientPayloadError"),
    ],
)
def test_recorded_failures_map_to_aiohttp_classes(
    recorded: str, in_body: bool, expected: str
) -> None:
    plan = ReplayPlan(None, [], [], False, recorded, "went wrong")
    exc = adapter.exception_for(plan, None, in_body=in_body)  # type: ignore[arg-type]
    assert type(exc).__name__ == expected
    assert isinstance(exc, aiohttp.ClientError)
    assert "went wrong" in str(exc)


# --- streaming while recording --------------------------------------------------------------


def _one_event_at_a_time_server() -> tuple[socket.socket, threading.Event]:
    """Sends its second event only after the client has seen the first one."""
    seen_first = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

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

    threading.Thread(target=serve, daemon=True).start()
    return listener, seen_first


def test_record_passes_live_bytes_through_without_buffering(aio_recorder: AioRecorder) -> None:
    """A recorder that buffered the stream before the caller saw it would deadlock here."""
    listener, seen_first = _one_event_at_a_time_server()
    port = listener.getsockname()[1]

    async def go(s: aiohttp.ClientSession) -> list[bytes]:
        lines = []
        async with s.get(f"http://127.0.0.1:{port}/events") as r:
            async for line in r.content:
                if line.strip():
                    lines.append(line.strip())
                    seen_first.set()
        return lines

    aio_recorder.start(Mode.RECORD)
    lines = run(go, timeout=aiohttp.ClientTimeout(total=5))
    listener.close()
    assert lines == [b'data: {"n": 1}', b"data: [DONE]"]
    stored = json.loads(aio_recorder.files()[0].read_text())["response"]
    assert stored["body"] == [{"data": {"n": 1}}, {"data": "[DONE]"}]


@pytest.mark.parametrize("mode", [Mode.RECORD, Mode.REPLAY])
def test_releasing_a_stream_early_keeps_the_session_usable(
    mode: Mode, upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    body = chat("one two three four five six seven", stream=True)
    other = chat("after the early release")
    aio_recorder.start(Mode.RECORD)
    run(lambda s: post_json(s, f"{upstream.url}{CHAT}", other))

    async def full(s: aiohttp.ClientSession) -> bytes:
        async with s.post(f"{upstream.url}{CHAT}", json=body) as r:
            return await r.read()

    run(full)
    session = aio_recorder.start(mode)

    async def go(s: aiohttp.ClientSession) -> tuple[bytes, int]:
        async with s.post(f"{upstream.url}{CHAT}", json=body) as r:
            first = await r.content.readline()
        with pytest.raises(aiohttp.ClientConnectionError):
            await r.content.read()
        status, _ = await post_json(s, f"{upstream.url}{CHAT}", other)
        return first, status

    first, status = run(go)
    assert first.startswith(b"data: {")
    assert status == 200
    assert session.stats.missed == 0


def test_a_response_released_unread_is_recorded_whole(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    """Only `status` read, then released: the body that had arrived is in the file."""

    async def go(s: aiohttp.ClientSession) -> int:
        r = await s.get(f"{upstream.url}/binary")
        live_reader = r.content._inner  # type: ignore[attr-defined]
        for _ in range(500):  # let the whole body arrive (the fake sends it at once)
            if live_reader.is_eof():
                break
            await asyncio.sleep(0.01)
        r.release()
        return r.status

    aio_recorder.start(Mode.RECORD)
    assert run(go) == 200
    aio_recorder.start(Mode.REPLAY)

    async def read(s: aiohttp.ClientSession) -> bytes:
        async with s.get(f"{upstream.url}/binary") as r:
            return await r.read()

    with ConnectGuard():
        assert run(read) == bytes(range(256))


def test_concurrent_tasks_keep_their_test_ids(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    async def one(s: aiohttp.ClientSession, test_id: str) -> Any:
        with test_context(test_id):
            return await post_json(s, f"{upstream.url}{CHAT}", chat("same"))

    async def both() -> None:
        async with aiohttp.ClientSession() as s:
            await asyncio.gather(one(s, "tests/a/test_x.py::t1"), one(s, "tests/b/test_y.py::t2"))

    aio_recorder.start(Mode.RECORD)
    asyncio.run(both())
    ids = sorted(json.loads(p.read_text())["test_id"] for p in aio_recorder.files())
    assert ids == ["tests/a/test_x.py::t1", "tests/b/test_y.py::t2"]


def test_no_warning_when_the_seam_is_there(aio_recorder: AioRecorder) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aio_recorder.start(Mode.REPLAY)
    assert adapter.seam_problem() is None


def test_a_streamed_request_body_is_hashed_and_still_sent_whole(
    upstream: FakeUpstream, aio_recorder: AioRecorder
) -> None:
    async def parts() -> Any:
        for piece in (b'{"a": ', b"1, ", b'"b": 2}'):
            yield piece

    async def go(s: aiohttp.ClientSession) -> Any:
        async with s.post(f"{upstream.url}/echo", data=parts()) as r:
            return (await r.json())["received"]

    aio_recorder.start(Mode.RECORD)
    assert run(go) == {"a": 1, "b": 2}
    upstream.stop()
    session = aio_recorder.start(Mode.REPLAY)
    with ConnectGuard():
        assert run(go) == {"a": 1, "b": 2}
    assert session.stats.replayed == 1
