"""Raw httpx (0.28) and httpx2 clients through the three phases (tests/integration/phases.py):
sync and async, whole bodies and streams (SSE and NDJSON), read as bytes, lines and chunks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest

from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.integration.phases import three_phases

CHAT = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "raw hello"}]}
STREAM = {**CHAT, "messages": [{"role": "user", "content": "raw stream of words"}], "stream": True}
OLLAMA = {"model": "llama-fake:1b", "messages": [{"role": "user", "content": "ndjson words here"}]}


def sse_texts(lines: list[str]) -> list[str]:
    """The content deltas of an OpenAI chat stream's `data:` lines (ids differ after replay)."""
    out = []
    for line in lines:
        if line.startswith("data: {"):
            choices = json.loads(line[len("data: ") :])["choices"]
            out += [c["delta"].get("content") or "" for c in choices]
    return out


@pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_sync_whole_bodies_and_streams(
    module: Any, upstream: FakeUpstream, recorder: Recorder
) -> None:
    def run(url: str) -> dict[str, Any]:
        with module.Client() as client:
            plain = client.get(f"{url}/plain")
            chat = client.post(f"{url}/v1/chat/completions", json=CHAT)
            with client.stream("POST", f"{url}/v1/chat/completions", json=STREAM) as sse:
                lines = list(sse.iter_lines())
            with client.stream("GET", f"{url}/stream/bytes") as raw:
                raw_bytes = b"".join(raw.iter_bytes())
        return {
            "plain": (plain.status_code, plain.text),
            "chat": chat.json()["choices"][0]["message"]["content"],
            "sse": sse_texts(lines),
            "bytes": raw_bytes,
        }

    phases = three_phases(upstream, recorder, run)
    assert phases.live["plain"] == (200, "hello from fake upstream")
    assert phases.live["chat"] == "echo: raw hello"
    assert "".join(phases.live["sse"]) == "echo: raw stream of words"
    assert phases.live["bytes"] == b"".join(f"chunk {i}\n".encode() for i in range(5))


@pytest.mark.parametrize("module", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_async_whole_bodies_and_streams(
    module: Any, upstream: FakeUpstream, recorder: Recorder
) -> None:
    def run(url: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            async with module.AsyncClient() as client:
                binary = await client.get(f"{url}/binary")
                async with client.stream("POST", f"{url}/v1/chat/completions", json=STREAM) as r:
                    lines = [line async for line in r.aiter_lines()]
                async with client.stream("POST", f"{url}/api/chat", json=OLLAMA) as r:
                    ndjson = [json.loads(line) async for line in r.aiter_lines() if line]
                async with client.stream("GET", f"{url}/stream/bytes") as r:
                    chunks = b"".join([c async for c in r.aiter_bytes()])
            return {
                "binary": binary.content,
                "sse": sse_texts(lines),
                "ndjson": [(x["message"]["content"], x["done"]) for x in ndjson],
                "chunks": chunks,
            }

        return asyncio.run(go())

    phases = three_phases(upstream, recorder, run)
    assert phases.live["binary"] == bytes(range(256))
    assert "".join(phases.live["sse"]) == "echo: raw stream of words"
    assert "".join(t for t, _ in phases.live["ndjson"]) == "echo: ndjson words here"
    assert phases.live["ndjson"][-1][1] is True
    assert phases.live["chunks"] == b"".join(f"chunk {i}\n".encode() for i in range(5))
