"""`urllib.request.urlopen` and `http.client.HTTPConnection`, recorded against the fake
upstream and replayed offline."""

from __future__ import annotations

import gc
import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from hashreplay import Mode, test_context
from tests.fakes.upstream import FakeUpstream
from tests.integration.three_phases import TEST_ID, AllAdapters, adapters, three_phases

__all__ = ["adapters"]

CHAT = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "hello stdlib"}]}


def _post(url: str, payload: Any) -> urllib.request.Request:
    return urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )


def test_urllib_request_urlopen(upstream: FakeUpstream, adapters: AllAdapters) -> None:
    def run(url: str) -> dict[str, Any]:
        with urllib.request.urlopen(_post(f"{url}/v1/chat/completions", CHAT)) as r:
            chat = json.loads(r.read())
            status = r.status
        stream_body = {**CHAT, "stream": True}
        with urllib.request.urlopen(_post(f"{url}/v1/chat/completions", stream_body)) as r:
            lines = [
                line.decode().strip() for line in r if line.strip()
            ]  # line by line, as it arrives
        with urllib.request.urlopen(f"{url}/binary") as r:
            binary = r.read()
        try:
            urllib.request.urlopen(_post(f"{url}/v1/nowhere", {}))
        except urllib.error.HTTPError as e:
            error = (e.code, json.loads(e.read())["error"]["message"])
        return {"chat": chat, "status": status, "lines": lines, "binary": binary, "error": error}

    phases = three_phases(upstream, adapters, run)
    live = phases.live
    assert live["chat"]["choices"][0]["message"]["content"] == "echo: hello stdlib"
    assert live["status"] == 200
    assert live["lines"][-1] == "data: [DONE]"
    assert len(live["lines"]) > 3
    assert live["binary"] == bytes(range(256))
    assert live["error"][0] == 404
    replayed = phases.offline
    # ids are normalised in the file: compare what an application reads
    assert replayed["chat"]["choices"] == live["chat"]["choices"]
    assert [x for x in replayed["lines"] if "content" in x] != []
    assert _contents(replayed["lines"]) == _contents(live["lines"])
    assert {k: replayed[k] for k in ("status", "binary", "error")} == {
        k: live[k] for k in ("status", "binary", "error")
    }
    assert phases.fresh == replayed
    assert phases.recorded_files == phases.live_calls == 4


def _contents(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if line.startswith("data: {"):
            out.extend(c["delta"].get("content") or "" for c in json.loads(line[6:])["choices"])
    return out


def test_http_client_request_and_low_level_calls(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    def run(url: str) -> dict[str, Any]:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port)
        conn.request("GET", "/plain")
        first = conn.getresponse()
        plain = (first.status, first.getheader("content-type"), first.read())
        # the low-level way, body sent after the headers, on the same kept-alive connection
        body = json.dumps(CHAT).encode()
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        conn.send(body)
        second = conn.getresponse()
        chat = json.loads(second.read())["choices"][0]["message"]["content"]
        # a stream read in small pieces
        conn.request("POST", "/api/chat", json.dumps({**CHAT, "model": "llama-fake:1b"}))
        third = conn.getresponse()
        pieces = []
        while piece := third.read(7):
            pieces.append(piece)
        conn.close()
        lines = [json.loads(x)["message"]["content"] for x in b"".join(pieces).splitlines()]
        return {"plain": plain, "chat": chat, "ndjson": lines}

    phases = three_phases(upstream, adapters, run)
    live = phases.live
    assert live["plain"] == (200, "text/plain; charset=utf-8", b"hello from fake upstream")
    assert live["chat"] == "echo: hello stdlib"
    assert "".join(live["ndjson"]) == "echo: hello stdlib"
    assert phases.offline == live
    assert phases.fresh == live
    assert phases.recorded_files == phases.live_calls == 3


def test_a_response_dropped_unread_is_recorded_without_waiting_for_the_gc(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    # the methods put on a live response make no reference cycle with it: it is closed, and
    # recorded (as abandoned), as soon as its caller lets go of it, before the session flushes
    body = json.dumps({"model": "gpt-fake-1", "messages": []}).encode()
    request = urllib.request.Request(
        f"{upstream.url}/v1/chat/completions", data=body, headers={"content-type": "x"}
    )
    adapters.start(Mode.RECORD)
    gc.collect()
    gc.disable()
    try:
        with test_context(TEST_ID):
            urllib.request.urlopen(request)  # never read, never closed
        assert adapters.session is not None
        adapters.session.flush()
        (file,) = adapters.files()
    finally:
        gc.enable()
    assert json.loads(file.read_text())["response"]["ended"]["state"] == "abandoned"
