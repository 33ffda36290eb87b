"""uvicorn's HTTP/1.1 protocol, answering malformed requests with a JSON error.

uvicorn answers a request it cannot parse with a plain-text 400; clients of the proxy (SDKs
in any language) read JSON errors, so this one says the same in JSON and names the problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from hashreplay.core.errors import error_body

BAD_REQUEST_MESSAGE = (
    "malformed HTTP request: hashreplay serve could not parse it as HTTP/1.1 ({detail}); "
    "check the client's request line, headers and body framing"
)


def bad_request_body(detail: str) -> bytes:
    message = BAD_REQUEST_MESSAGE.format(detail=detail.rstrip("."))
    return error_body(message, "hashreplay_bad_request", "bad_request")


class JsonErrorH11Protocol(H11Protocol):
    """H11Protocol whose 400 for an unparsable request has a JSON body, and whose
    connections always have TCP_NODELAY."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # asyncio sets TCP_NODELAY only on sockets whose `proto` is IPPROTO_TCP; the listening
        # socket uvicorn hands to --workers processes comes back with proto 0, and without
        # NODELAY each response (head and body are two writes) waits for a delayed ACK:
        # about 40 ms per request on Linux loopback.
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)

    def send_400_response(self, msg: str) -> None:
        body = bad_request_body(msg)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-should-retry", b"false"),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()
