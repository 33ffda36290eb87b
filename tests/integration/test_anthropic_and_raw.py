"""The anthropic SDK and raw httpx (0.28) / httpx2 clients: streams replay chunk for chunk."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import httpx2
import pytest

from hashreplay import Mode, test_context
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

TEST_ID = "tests/test_clients.py::test_clients"
ANTHROPIC_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"


def record_then_replay(
    upstream: FakeUpstream, recorder: Recorder, run: Any
) -> tuple[Any, Any, ConnectGuard]:
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        live = run(upstream.url)
    url = upstream.url
    upstream.stop()
    recorder.start(Mode.REPLAY)
    with ConnectGuard() as guard, test_context(TEST_ID):
        replayed = run(url)
    return live, replayed, guard


def test_anthropic_messages_create_and_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    def run(url: str) -> dict[str, Any]:
        c = anthropic.Anthropic(base_url=url, api_key=ANTHROPIC_KEY, max_retries=0)
        msg = c.messages.create(
            model="claude-fake",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi claude"}],
        )
        with c.messages.stream(
            model="claude-fake",
            max_tokens=64,
            messages=[{"role": "user", "content": "stream to me please"}],
        ) as stream:
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
        return {
            "text": msg.content[0].text,  # type: ignore[union-attr]
            "pieces": pieces,
            "final_stop": final.stop_reason,
            "final_usage": final.usage.output_tokens,
        }

    live, replayed, guard = record_then_replay(upstream, recorder, run)
    assert live["text"] == "echo: hi claude"
    assert len(live["pieces"]) > 1
    assert replayed == live
    assert guard.attempts == []
    stream_file = next(
        p for p in recorder.files() if json.loads(p.read_text())["response"]["is_streaming"]
    )
    events = json.loads(stream_file.read_text())["response"]["body"]
    names = [e.get("event") for e in events]
    assert names[0] == "message_start"
    assert "ping" in names and names[-1] == "message_stop"
    assert any("comments" in e for e in events)  # the `: keepalive` line is kept
    assert ANTHROPIC_KEY not in stream_file.read_text()


def test_anthropic_async_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    def run(url: str) -> list[str]:
        async def go() -> list[str]:
            c = anthropic.AsyncAnthropic(base_url=url, api_key=ANTHROPIC_KEY, max_retries=0)
            async with c.messages.stream(
                model="claude-fake", max_tokens=64, messages=[{"role": "user", "content": "a b c"}]
            ) as stream:
                return [t async for t in stream.text_stream]

        return asyncio.run(go())

    live, replayed, guard = record_then_replay(upstream, recorder, run)
    assert "".join(live) == "echo: a b c"
    assert replayed == live
    assert guard.attempts == []


@pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_raw_ndjson_stream_line_for_line(
    module: Any, upstream: FakeUpstream, recorder: Recorder
) -> None:
    def run(url: str) -> list[dict[str, Any]]:
        with (
            module.Client() as c,
            c.stream(
                "POST",
                f"{url}/api/chat",
                json={"model": "llama-fake:1b", "messages": [{"role": "user", "content": "x y z"}]},
            ) as r,
        ):
            assert r.headers["content-type"].startswith("application/x-ndjson")
            return [json.loads(line) for line in r.iter_lines() if line]

    live, replayed, guard = record_then_replay(upstream, recorder, run)
    assert live[-1]["done"] is True and live[-1]["total_duration"] > 0
    assert [line["message"]["content"] for line in replayed] == [
        line["message"]["content"] for line in live
    ]
    assert replayed[-1]["total_duration"] == 0  # durations are normalised in the file
    assert replayed[0]["created_at"] == "1970-01-01T00:00:00.000000Z"
    assert guard.attempts == []


@pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_raw_async_clients(module: Any, upstream: FakeUpstream, recorder: Recorder) -> None:
    def run(url: str) -> tuple[int, bytes, str]:
        async def go() -> tuple[int, bytes, str]:
            async with module.AsyncClient() as c:
                binary = await c.get(f"{url}/binary")
                text = await c.get(f"{url}/plain")
                return binary.status_code, binary.content, text.text

        return asyncio.run(go())

    live, replayed, guard = record_then_replay(upstream, recorder, run)
    assert live == (200, bytes(range(256)), "hello from fake upstream")
    assert replayed == live
    assert guard.attempts == []


def test_gzip_is_stored_decoded_and_replayed_without_stale_headers(
    recorder: Recorder,
) -> None:
    with FakeUpstream(compress=True) as fake:
        recorder.start(Mode.RECORD)
        with test_context(TEST_ID), httpx2.Client() as c:
            live = c.post(
                f"{fake.url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "zip it"}]},
            )
        assert live.headers["content-encoding"] == "gzip"
    stored = json.loads(recorder.files()[0].read_text())
    assert stored["response"]["body"]["choices"][0]["message"]["content"] == "echo: zip it"
    assert "content-encoding" not in stored["response"]["headers"]

    recorder.start(Mode.REPLAY)
    with ConnectGuard(), test_context(TEST_ID), httpx2.Client() as c:
        replayed = c.post(
            f"{fake.url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "zip it"}]},
        )
    assert "content-encoding" not in replayed.headers
    assert int(replayed.headers["content-length"]) == len(replayed.content)
    assert replayed.json()["choices"][0]["message"]["content"] == "echo: zip it"


def test_gzip_sse_stream(recorder: Recorder) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "zip a stream"}], "stream": True}
    with FakeUpstream(compress=True) as fake:
        recorder.start(Mode.RECORD)
        with (
            test_context(TEST_ID),
            httpx2.Client() as c,
            c.stream("POST", f"{fake.url}/v1/chat/completions", json=body) as r,
        ):
            live = list(r.iter_lines())
    recorder.start(Mode.REPLAY)
    with (
        ConnectGuard(),
        test_context(TEST_ID),
        httpx2.Client() as c,
        c.stream("POST", f"{fake.url}/v1/chat/completions", json=body) as r,
    ):
        replayed = list(r.iter_lines())
    assert [line for line in replayed if line] == [line for line in _stable(live, recorder) if line]


def _stable(lines: list[str], recorder: Recorder) -> list[str]:
    """The live SSE lines with per-call values replaced as the normaliser does."""
    from hashreplay.core.streams import parse_sse, render_sse_event

    stored = json.loads(recorder.files()[0].read_text())["response"]["body"]
    expected = b"".join(render_sse_event(e) for e in stored).decode().splitlines()
    assert len([x for x in expected if x]) == len([x for x in lines if x])
    assert len(parse_sse("\n".join(lines).encode() + b"\n\n")) == len(stored)
    return expected
