"""Raw aiohttp recorded against the fake upstream and replayed offline: plain JSON, an SSE
stream read several ways, NDJSON line by line, and a binary stream byte for byte."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from hashreplay import Mode, test_context
from tests.aiohttp_harness import TEST_ID, AioRecorder, aio_recorder, three_phases
from tests.guards import ConnectGuard

__all__ = ["aio_recorder"]  # the fixture, used by name

CHAT = "/v1/chat/completions"


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}], **extra}


def test_plain_json_every_accessor(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            async with aiohttp.ClientSession() as s:
                async with s.post(f"{url}{CHAT}", json=chat("plain json")) as r:
                    assert isinstance(r, aiohttp.ClientResponse)
                    r.raise_for_status()
                    body = await r.json()
                    text = await r.text()
                    raw = await r.read()
                    out = {
                        "status": r.status,
                        "ok": r.ok,
                        "type": r.headers["Content-Type"],
                        "content": body["choices"][0]["message"]["content"],
                        "same": json.loads(text) == body == json.loads(raw),
                    }
                plain = await s.get(f"{url}/plain")
                out["plain"] = await plain.text()
                plain.release()
                return out

        return asyncio.run(go())

    phases = three_phases(aio_recorder, run)
    assert phases.live["content"] == "echo: plain json"
    assert phases.live["same"] is True
    assert phases.offline == phases.live
    assert phases.fresh == phases.live
    assert phases.live_calls == 2
    assert len(phases.files) == 2


def test_sse_stream_read_as_lines_chunks_and_any(aio_recorder: AioRecorder) -> None:
    """A stream recorded while read line by line replays the same bytes to a client that
    reads it any other way."""
    body = chat("stream a story of several words", stream=True)

    def reader(how: str) -> Any:
        def run(url: str) -> bytes:
            async def go() -> bytes:
                async with aiohttp.ClientSession() as s, s.post(f"{url}{CHAT}", json=body) as r:
                    assert r.headers["content-type"].startswith("text/event-stream")
                    if how == "lines":
                        return b"".join([line async for line in r.content])
                    if how == "any":
                        return b"".join([c async for c in r.content.iter_any()])
                    if how == "chunked":
                        return b"".join([c async for c in r.content.iter_chunked(7)])
                    if how == "chunks":
                        return b"".join([c async for c, _ in r.content.iter_chunks()])
                    if how == "read":
                        return await r.read()
                    parts = []
                    while line := await r.content.readline():
                        parts.append(line)
                    return b"".join(parts)

            return asyncio.run(go())

        return run

    phases = three_phases(aio_recorder, reader("lines"))
    assert b"data: [DONE]" in phases.live
    assert phases.offline == phases.fresh
    assert _deltas(phases.offline) == _deltas(phases.live)
    assert "".join(_deltas(phases.live)) == "echo: stream a story of several words"
    for how in ("any", "chunked", "chunks", "readline", "read"):
        aio_recorder.start(Mode.REPLAY)
        with ConnectGuard() as guard, test_context(TEST_ID):
            assert reader(how)("http://127.0.0.1:9") == phases.offline, how
        assert guard.attempts == []


def _deltas(stream: bytes) -> list[str]:
    out = []
    for line in stream.decode().splitlines():
        if line.startswith("data: {"):
            choice = json.loads(line.removeprefix("data: "))["choices"]
            if choice:
                out.append(choice[0]["delta"].get("content") or "")
    return out


def test_sse_iter_any_replays_one_chunk_per_event(aio_recorder: AioRecorder) -> None:
    body = chat("count my events please", stream=True)

    def run(url: str) -> list[bytes]:
        async def go() -> list[bytes]:
            async with aiohttp.ClientSession() as s, s.post(f"{url}{CHAT}", json=body) as r:
                return [c async for c in r.content.iter_any()]

        return asyncio.run(go())

    phases = three_phases(aio_recorder, run)
    events = [e for e in b"".join(phases.live).split(b"\n\n") if e]
    assert len(phases.offline) == len(events)
    assert all(chunk.endswith(b"\n\n") for chunk in phases.offline)


def test_ndjson_line_for_line(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> list[dict[str, Any]]:
        async def go() -> list[dict[str, Any]]:
            payload = {"model": "llama-fake:1b", "messages": [{"role": "user", "content": "x y z"}]}
            async with aiohttp.ClientSession() as s, s.post(f"{url}/api/chat", json=payload) as r:
                assert r.headers["content-type"].startswith("application/x-ndjson")
                return [json.loads(line) async for line in r.content if line.strip()]

        return asyncio.run(go())

    phases = three_phases(aio_recorder, run)
    live, offline = phases.live, phases.offline
    assert live[-1]["done"] is True and live[-1]["total_duration"] > 0
    assert [x["message"]["content"] for x in offline] == [x["message"]["content"] for x in live]
    assert offline[-1]["total_duration"] == 0  # normalised in the file
    assert offline == phases.fresh


def test_binary_body_and_stream_byte_exact(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> tuple[bytes, list[bytes], bytes]:
        async def go() -> tuple[bytes, list[bytes], bytes]:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"{url}/binary") as r:
                    whole = await r.read()
                async with s.get(f"{url}/stream/bytes") as r:
                    chunks = [c async for c in r.content.iter_any()]
                async with s.get(f"{url}/stream/bytes") as r:
                    exact = await r.content.readexactly(12)
                return whole, chunks, exact

        return asyncio.run(go())

    phases = three_phases(aio_recorder, run)
    whole, chunks, exact = phases.live
    assert whole == bytes(range(256))
    assert b"".join(chunks) == b"".join(f"chunk {i}\n".encode() for i in range(5))
    assert phases.offline == phases.fresh
    assert phases.offline[0] == whole
    assert b"".join(phases.offline[1]) == b"".join(chunks)
    assert phases.offline[2] == exact == b"chunk 0\nchun"


def _binary_stream_server(chunks: list[bytes]) -> tuple[str, Any]:
    """Serves one chunked `application/vnd.amazon.eventstream` response of `chunks`."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for chunk in chunks:
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.sendall(b"0\r\n\r\n")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", listener


def test_binary_event_stream_replays_byte_exact_chunk_for_chunk(
    aio_recorder: AioRecorder,
) -> None:
    """Bytes that are neither text nor lines (every byte value, NULs, lone CRs) come back
    exactly, in the chunks they were recorded in (the server's HTTP chunks, unless the
    network split one)."""
    chunks = [bytes(range(256)), b"\x00\x00\x00\x10\r\x00\xff", bytes(range(255, -1, -1))]
    url, listener = _binary_stream_server(chunks)

    async def go() -> list[bytes]:
        async with aiohttp.ClientSession() as s, s.post(f"{url}/model/m/converse-stream") as r:
            return [c async for c in r.content.iter_any()]

    aio_recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        live = asyncio.run(go())
    listener.close()
    assert b"".join(live) == b"".join(chunks)
    aio_recorder.start(Mode.REPLAY)
    with ConnectGuard() as guard, test_context(TEST_ID):
        replayed = asyncio.run(go())
    assert guard.attempts == []
    assert b"".join(replayed) == b"".join(chunks)
    stored = json.loads(aio_recorder.files()[0].read_text())["response"]
    assert stored["is_streaming"] is True
    assert len(replayed) == len(stored["body"])  # one replayed chunk per recorded chunk
