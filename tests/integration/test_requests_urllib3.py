"""requests and plain urllib3, recorded against the fake upstream and replayed offline."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.upstream import FakeUpstream
from tests.integration.three_phases import AllAdapters, adapters, three_phases
from tests.sdks import sdk

requests = sdk("requests")
urllib3 = sdk("urllib3")

__all__ = ["adapters"]

CHAT = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "hello urllib3"}]}
STREAM = {**CHAT, "messages": [{"role": "user", "content": "stream a few words now"}]}


def as_json(payload: Any) -> dict[str, Any]:
    """`body` and `headers` of a JSON request (urllib3 1.26 has no `json=`)."""
    return {"body": json.dumps(payload), "headers": {"content-type": "application/json"}}


def _sse_texts(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("content"):
                out.append(delta["content"])
    return out


def test_requests_plain_and_streamed(upstream: FakeUpstream, adapters: AllAdapters) -> None:
    def run(url: str) -> dict[str, Any]:
        with requests.Session() as s:
            chat = s.post(f"{url}/v1/chat/completions", json=CHAT, timeout=5)
            binary = s.get(f"{url}/binary", timeout=5)
            with s.post(
                f"{url}/v1/chat/completions", json={**STREAM, "stream": True}, stream=True
            ) as r:
                lines = [line.decode() for line in r.iter_lines() if line]
                content_type = r.headers["content-type"]
            missing = s.post(f"{url}/v1/nowhere", json={}, timeout=5)
        return {
            "chat": chat.json()["choices"][0]["message"]["content"],
            "binary": binary.content,
            "pieces": _sse_texts(lines),
            "content_type": content_type,
            "missing": (missing.status_code, missing.json()["error"]["message"]),
        }

    phases = three_phases(upstream, adapters, run)
    live = phases.live
    assert live["chat"] == "echo: hello urllib3"
    assert live["binary"] == bytes(range(256))
    assert "".join(live["pieces"]) == "echo: stream a few words now"
    assert len(live["pieces"]) > 1
    assert live["content_type"].startswith("text/event-stream")
    assert live["missing"][0] == 404
    assert phases.offline == live
    assert phases.fresh == live
    assert phases.recorded_files == phases.live_calls == 4  # each request handled once


def test_requests_iter_content_chunks(upstream: FakeUpstream, adapters: AllAdapters) -> None:
    def run(url: str) -> list[bytes]:
        r = requests.post(f"{url}/api/chat", json={**CHAT, "model": "llama-fake:1b"}, stream=True)
        return list(r.iter_content(chunk_size=None))

    phases = three_phases(upstream, adapters, run)
    live_lines = [json.loads(x) for x in b"".join(phases.live).splitlines()]
    replayed = [json.loads(x) for x in b"".join(phases.offline).splitlines()]
    assert [line["message"]["content"] for line in replayed] == [
        line["message"]["content"] for line in live_lines
    ]
    assert len(phases.offline) == len(live_lines)  # one chunk per recorded line
    assert phases.fresh == phases.offline


def test_urllib3_pool_manager_buffered_and_streamed(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    def run(url: str) -> dict[str, Any]:
        http = urllib3.PoolManager()
        buffered = http.request("POST", f"{url}/v1/chat/completions", **as_json(CHAT))
        plain = http.request("GET", f"{url}/plain")
        streamed = http.request(
            "POST",
            f"{url}/v1/chat/completions",
            **as_json({**STREAM, "stream": True}),
            preload_content=False,
        )
        pieces = list(streamed.stream(64))
        streamed.release_conn()
        by_amt = http.request("GET", f"{url}/binary", preload_content=False)
        parts = []
        while chunk := by_amt.read(100):
            parts.append(chunk)
        by_amt.release_conn()
        return {
            "buffered": json.loads(buffered.data)["choices"][0]["message"]["content"],
            "status": buffered.status,
            "plain": plain.data.decode(),
            "sse": _sse_texts(b"".join(pieces).decode().splitlines()),
            "by_amt": [len(p) for p in parts],
            "binary": b"".join(parts),
            "is_urllib3": isinstance(streamed, urllib3.HTTPResponse),
        }

    phases = three_phases(upstream, adapters, run)
    live = phases.live
    assert live["buffered"] == "echo: hello urllib3"
    assert live["plain"] == "hello from fake upstream"
    assert "".join(live["sse"]) == "echo: stream a few words now"
    assert live["by_amt"] == [100, 100, 56]
    assert live["binary"] == bytes(range(256))
    assert live["is_urllib3"] is True
    assert phases.offline == live
    assert phases.fresh == live
    assert phases.recorded_files == phases.live_calls == 4
