"""A client that half-closes its write side after its request (`shutdown(SHUT_WR)`) still
gets its answer from `hashreplay serve`, and what is recorded is the complete exchange, never
an abandoned one the client did not abandon."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import Servers, load, recordings

BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "half-closed"}]}
).encode()
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer sk-test-0123456789abcdefghij\r\n"
    b"X-HashReplay-Test-Id: tests/test_half.py::test_it\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)


def final_response(received: bytes) -> bytes:
    """The final response, past the interim 1xx ones (which HTTP/1.1 clients skip)."""
    while received.startswith(b"HTTP/1.1 1"):
        interim, _, received = received.partition(b"\r\n\r\n")
        assert interim == b"HTTP/1.1 100 Continue", interim
    return received


def half_closed_exchange(port: int, request: bytes = REQUEST) -> bytes:
    """Send `request`, shut the write side, read until the server closes (bounded); the
    final response."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            received += data
        return final_response(received)


def test_a_half_closed_client_gets_its_answer_and_a_complete_recording(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", upstream.url, root=root)
    answer = half_closed_exchange(proxy.port)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b'"choices"' in body
    (path,) = recordings(root)
    response = load(path)["response"]
    assert isinstance(response, dict)
    assert "ended" not in response  # complete: the client never left
    assert response["status"] == 200

    replay = servers.serve("--mode", "replay", root=root)
    replayed = half_closed_exchange(replay.port)
    assert replayed.startswith(b"HTTP/1.1 200"), replayed[:300]
    recorded = json.loads(replayed.partition(b"\r\n\r\n")[2])
    assert recorded["choices"] == json.loads(body)["choices"]
    assert recordings(root) == [path]


def test_a_request_cut_before_its_body_ends_is_not_answered_nor_recorded(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", upstream.url, root=root)
    cut = REQUEST[: len(REQUEST) - 10]  # its Content-Length promises 10 more bytes
    answer = half_closed_exchange(proxy.port, cut)
    assert not answer.startswith(b"HTTP/1.1 200")
    assert recordings(root) == []
    assert upstream.calls == []
