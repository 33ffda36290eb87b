"""How the proxy speaks HTTP: uvicorn's protocol with JSON errors for malformed requests, its
answers, relaying a live response, and logs without credentials.

uvicorn's HTTP/1.1 protocol, answering malformed requests with a JSON error.

uvicorn answers a request it cannot parse with a plain-text 400; clients of the proxy (SDKs
in any language) read JSON errors, so this one says the same in JSON and names the problem.
It also bounds how long a client may take to send a request's head (`--header-timeout`):
uvicorn has no such limit, so a client sending a byte every few seconds
held its connection forever. The body has its own limit in the app (`--body-timeout`).

The proxy's logs never carry a credential (docs/design.md §7).

A filter on the proxy's own logger and on uvicorn's access and error loggers rewrites each
record's message and arguments: secret shapes and credential query parameters (`?key=…`)
by the session's redactor, and the exact credential values the proxy has seen in requests.

How the proxy answers: an ASGI `send` that knows how far the response got, JSON errors,
and the header rules of a proxy (hop-by-hop headers, RFC 9110 §7.6.1).

Relaying a live response to the client while it is recorded.

A response framed by `content-length` is held back whole while recording, so a recording
that cannot be written (disk full, permission, a path too long) becomes a 5xx JSON error
naming the problem instead of a 200 whose file is missing. A stream is relayed as it comes;
when its recording fails, its connection is closed without the end of the stream, so the
client sees an incomplete response (an error), never a clean end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from hashreplay.core.errors import BodyTooLarge, ProxyError, RecordingError, error_body
from hashreplay.engine.http import LiveExchange
from hashreplay.engine.keys import Prepared
from hashreplay.engine.session import Session
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


__all__ = ["LOGGERS", "SecretLogFilter", "install_log_filter"]


#: Loggers whose records a `hashreplay serve` process scrubs.
LOGGERS = ("hashreplay.serve", "hashreplay", "uvicorn.access", "uvicorn.error")


class SecretLogFilter(logging.Filter):
    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    def scrub(self, text: str) -> str:
        return self.session.seen_secrets.text(self.session.redactor.text(text))

    def _arg(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, (int, float, type(None))):
            return value
        return self.scrub(str(value))

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.scrub(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self._arg(v) for k, v in record.args.items()}
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = self.scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def install_log_filter(session: Session) -> SecretLogFilter:
    """Put one filter for `session` on each of `LOGGERS` (replacing an earlier one)."""
    new = SecretLogFilter(session)
    for name in LOGGERS:
        log = logging.getLogger(name)
        for old in [f for f in log.filters if isinstance(f, SecretLogFilter)]:
            log.removeFilter(old)
        log.addFilter(new)
    return new


Scope = MutableMapping[str, Any]


Message = MutableMapping[str, Any]


Receive = Callable[[], Awaitable[Message]]


Send = Callable[[Message], Awaitable[None]]


#: Headers that describe one connection, never forwarded by a proxy in either direction.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def end_to_end(
    headers: Iterable[tuple[str, str]], drop: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """`headers` without hop-by-hop ones, those the `Connection` header names, and `drop`."""
    pairs = list(headers)
    dropped = set(HOP_BY_HOP) | {d.lower() for d in drop}
    for name, value in pairs:
        if name.lower() == "connection":
            dropped.update(t.strip().lower() for t in value.split(",") if t.strip())
    return [(k, v) for k, v in pairs if k.lower() not in dropped]


def encode_header(value: str) -> bytes:
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


class Responder:
    """Wraps ASGI `send`: remembers whether the response started and completed."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.completed = False
        self.status: int | None = None

    async def start(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        self.started = True
        self.status = status
        raw = [(k.lower().encode("latin-1"), encode_header(v)) for k, v in headers]
        await self._send({"type": "http.response.start", "status": status, "headers": raw})

    async def body(self, data: bytes, *, more: bool) -> None:
        if not more:
            self.completed = True
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def whole(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        await self.start(status, [*headers, ("content-length", str(len(body)))])
        await self.body(body, more=False)

    async def json(
        self, status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        body = json.dumps(payload).encode()
        await self.whole(status, [("content-type", "application/json"), *headers], body)

    async def error(self, problem: ProxyError) -> None:
        headers = [("content-type", "application/json")]
        if not problem.retry:
            headers.append(("x-should-retry", "false"))
        if problem.close:
            headers.append(("connection", "close"))  # the unread rest of the body is dropped
        await self.whole(problem.status, headers, problem.body())


__all__ = ["RecordingNotWritten", "Relay", "record_exchange"]


class RecordingNotWritten(ProxyError):
    """The upstream answered, but its recording could not be written."""

    def __init__(self, what: str, status: int | None, problem: BaseException) -> None:
        detail = problem.problem if isinstance(problem, RecordingError) else str(problem)
        where = getattr(problem, "path", None) or getattr(problem, "filename", None)
        message = (
            f"{what}: the upstream answered {status}, but its recording could not be written "
            f"({type(problem).__name__}: {detail}{f'; file {where}' if where else ''}); "
            "nothing was stored. Free disk space or fix the permissions of the recordings "
            "directory, then retry"
        )
        super().__init__(500, "recording_not_written", message)


async def record_exchange(
    session: Session, prep: Prepared, exchange: LiveExchange, what: str
) -> None:
    """Record one exchange; a failed write is a `RecordingNotWritten` naming it, a body over
    max_body_bytes a `response_too_large` error."""
    try:
        await session.arecord(prep, exchange)
    except BodyTooLarge as exc:  # a body the store refuses: the user raises the limit
        raise ProxyError(502, "response_too_large", f"{what}: {exc}") from None
    except (OSError, RecordingError) as exc:
        raise RecordingNotWritten(what, exchange.status, exc) from None


class Relay:
    """Sends a live body to the client as it arrives, or, with `hold` (a `content-length`
    response being recorded), all of it at `end()`, once it is recorded."""

    def __init__(
        self, reply: Responder, hold: bool, status: int, headers: list[tuple[str, str]]
    ) -> None:
        self.reply = reply
        self.hold = hold
        self.status = status
        self.headers = headers
        self.held = bytearray()
        self.sent = 0

    async def begin(self) -> None:
        if not self.hold:
            await self.reply.start(self.status, self.headers)

    async def send(self, data: bytes) -> None:
        self.sent += len(data)
        if self.hold:
            self.held += data
        elif data:
            await self.reply.body(data, more=True)

    async def end(self) -> None:
        if self.hold:
            await self.reply.start(self.status, self.headers)
        await self.reply.body(bytes(self.held), more=False)
        self.held.clear()

    async def abort(self) -> None:
        """The upstream broke off: the client gets what came, then the connection closes
        (a held `content-length` body arrives short, which every client reports)."""
        if self.hold and not self.reply.started:
            await self.reply.start(self.status, self.headers)
            if self.held:
                await self.reply.body(bytes(self.held), more=True)
            self.held.clear()
