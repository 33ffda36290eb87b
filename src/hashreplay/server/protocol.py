"""uvicorn's HTTP/1.1 protocol, answering malformed requests with a JSON error.

uvicorn answers a request it cannot parse with a plain-text 400; clients of the proxy (SDKs
in any language) read JSON errors, so this one says the same in JSON and names the problem.
It also bounds how long a client may take to send a request's head (`--header-timeout`,
issue 13 item 11): uvicorn has no such limit, so a client sending a byte every few seconds
held its connection forever. The body has its own limit in the app (`--body-timeout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from hashreplay.core.errors import error_body
from hashreplay.server.settings import DEFAULT_HEADER_TIMEOUT, SETTINGS_ENV, ServeSettings

BAD_REQUEST_MESSAGE = (
    "malformed HTTP request: hashreplay serve could not parse it as HTTP/1.1 ({detail}); "
    "check the client's request line, headers and body framing"
)


HEADER_TIMEOUT_MESSAGE = (
    "request head not received within {seconds:g} s: hashreplay serve closes connections "
    "whose request line and headers arrive this slowly; raise it with --header-timeout"
)


def header_timeout() -> float:
    """`--header-timeout` of this server (its settings travel in the environment)."""
    text = os.environ.get(SETTINGS_ENV)
    return ServeSettings.from_json(text).header_timeout if text else DEFAULT_HEADER_TIMEOUT


def bad_request_body(detail: str) -> bytes:
    message = BAD_REQUEST_MESSAGE.format(detail=detail.rstrip("."))
    return error_body(message, "hashreplay_bad_request", "bad_request")


class JsonErrorH11Protocol(H11Protocol):
    """H11Protocol whose 400 for an unparsable request has a JSON body, whose connections
    always have TCP_NODELAY, and which answers 408 to a request head that takes longer than
    `--header-timeout` to arrive."""

    _header_seconds: float | None = None
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._arm_header_timer()
        # asyncio sets TCP_NODELAY only on sockets whose `proto` is IPPROTO_TCP; the listening
        # socket uvicorn hands to --workers processes comes back with proto 0, and without
        # NODELAY each response (head and body are two writes) waits for a delayed ACK:
        # about 40 ms per request on Linux loopback.
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)

    # --- the head of each request must arrive within --header-timeout ----------------------

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            cls = type(self)
            if cls._header_seconds is None:
                cls._header_seconds = header_timeout()
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(cls._header_seconds, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            self._arm_header_timer()  # (part of) a next request's head: its clock runs
        else:
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        self._disarm_header_timer()  # idle until the next request: the keep-alive timeout
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        seconds = type(self)._header_seconds or DEFAULT_HEADER_TIMEOUT
        self.logger.info("closing a connection whose request head took over %g s", seconds)
        self._send_error(
            408,
            b"Request Timeout",
            error_body(
                HEADER_TIMEOUT_MESSAGE.format(seconds=seconds),
                "hashreplay_header_timeout",
                "header_timeout",
            ),
        )

    def send_400_response(self, msg: str) -> None:
        self._send_error(400, b"Bad Request", bad_request_body(msg))

    def _send_error(self, status: int, reason: bytes, body: bytes) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-should-retry", b"false"),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=status, headers=headers, reason=reason),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()
