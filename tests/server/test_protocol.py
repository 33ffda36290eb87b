"""The proxy's HTTP/1.1 protocol class (uvicorn's, with two changes)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from hashreplay.server.wire import JsonErrorH11Protocol, bad_request_body


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def test_connections_get_tcp_nodelay_even_on_a_socket_created_without_proto() -> None:
    """`--workers` hands workers a listening socket with proto 0, on which asyncio does not
    set TCP_NODELAY; without it every response waits for a delayed ACK."""
    config = uvicorn.Config(app=_app, http=JsonErrorH11Protocol, lifespan="off", log_level="error")
    config.load()
    state = ServerState()
    seen: list[int] = []

    class Probe(JsonErrorH11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as uvicorn binds
    listener.bind(("127.0.0.1", 0))
    assert listener.proto == 0
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Probe(config=config, server_state=state, app_state={}), sock=listener
    )
    try:
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert head.startswith(b"HTTP/1.1 204")
    assert seen == [1]


def test_the_bad_request_body_names_the_problem() -> None:
    error = json.loads(bad_request_body("Invalid HTTP request received."))["error"]
    assert error == {
        "message": "malformed HTTP request: hashreplay serve could not parse it as HTTP/1.1 "
        "(Invalid HTTP request received); check the client's request line, headers and body "
        "framing",
        "type": "hashreplay_bad_request",
        "code": "bad_request",
    }
