"""How the proxy speaks HTTP: uvicorn's protocol with JSON errors for malformed requests, the
proxy's answers (an ASGI `send` that knows how far the response got, JSON errors, the header
rules of a proxy) and relaying a live response to the client while it is recorded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from hashreplay.core.errors import BodyTooLarge, ProxyError, RecordingError, error_body
from hashreplay.engine.http import LiveExchange
from hashreplay.engine.keys import Prepared
from hashreplay.engine.session import Session

BAD_REQUEST_MESSAGE = (
    "malformed HTTP request: hashreplay serve could not parse it as HTTP/1.1 ({detail}); "
    "check the client's request line, headers and body framing"
)
HEADER_TIMEOUT_MESSAGE = (
    "request head not received within {seconds:g} s: hashreplay serve closes connections "
    "whose request line and headers arrive this slowly; raise it with --header-timeout"
)


#: How often a half-closed connection waiting for its answer is checked for the peer's reset.
RESET_POLL_SECONDS = 0.05


def bad_request_body(detail: str) -> bytes:
    message = BAD_REQUEST_MESSAGE.format(detail=detail.rstrip("."))
    return error_body(message, "hashreplay_bad_request", "bad_request")


class JsonErrorH11Protocol(H11Protocol):
    """H11Protocol whose 400 for an unparsable request has a JSON body, whose connections
    always have TCP_NODELAY, and which answers 408 to a request head that takes longer than
    `--header-timeout` to arrive.

    uvicorn answers a request it cannot parse with a plain-text 400; clients of the proxy (SDKs
    in any language) read JSON errors, so this one says the same in JSON and names the problem.
    uvicorn has no limit on the head, so a client sending a byte every few seconds held its
    connection forever. The body has its own limit in the app (`--body-timeout`)."""

    #: `--header-timeout`, set in each worker by the app factory (`app_from_environment`);
    #: None (the protocol under another app): no limit
    header_seconds: float | None = None
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
        seconds = self.header_seconds
        if self._header_timer is None and seconds is not None:
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(seconds, self._header_timed_out)

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

    # --- a client that half-closes after its request still gets the answer -----------------

    #: the client shut its write side (`shutdown(SHUT_WR)`, `curl` reading a request from a
    #: file, `nc -N`): it sends nothing more, but may still read the answer
    _client_eof = False
    _reset_timer: asyncio.TimerHandle | None = None

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio allows True
        """True keeps the transport open for the answer to a request received whole whose
        answer has not begun. A FIN alone does not tell a half-close from a client that
        closed for good (one that timed out), so the connection is probed: an interim
        `100 Continue` (which every HTTP/1.1 client skips) makes a closed peer answer with a
        reset, which `_watch_reset` sees and turns into the client's disconnect, as before.
        A connection idle, cut mid-request (that request can never complete) or ended while
        its answer was arriving closes as before, and the app sees the client gone."""
        self._client_eof = True
        cycle = self.cycle
        if (
            cycle is None
            or cycle.response_started
            or cycle.disconnected
            or self.conn.their_state is not h11.DONE
        ):
            return None
        try:
            interim = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
            probe = self.conn.send(interim)
        except h11.LocalProtocolError:
            return None
        self.transport.write(probe or b"")
        self._watch_reset()
        return True

    def _watch_reset(self) -> None:
        """Until the answer begins, look every `RESET_POLL_SECONDS` whether the peer reset
        the connection (it had closed, not half-closed): then abort it, so the app sees the
        client gone and what it records is marked abandoned."""
        self._reset_timer = None
        cycle, sock = self.cycle, self.transport.get_extra_info("socket")
        if self.transport.is_closing() or cycle is None or cycle.response_started:
            return
        try:
            failed = sock is not None and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError:
            failed = True
        if failed:
            self.transport.abort()
            return
        loop = asyncio.get_running_loop()
        self._reset_timer = loop.call_later(RESET_POLL_SECONDS, self._watch_reset)

    def on_response_complete(self) -> None:
        self._disarm_header_timer()  # idle until the next request: the keep-alive timeout
        super().on_response_complete()
        if self._client_eof and not self.transport.is_closing():
            self.transport.close()  # nothing more can come: no keep-alive wait

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        if self._reset_timer is not None:
            self._reset_timer.cancel()
            self._reset_timer = None
        super().connection_lost(exc)

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        seconds = self.header_seconds or 0.0  # set, or no timer would have fired
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


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


#: Headers of one connection, never forwarded by a proxy in either direction (RFC 9110 §7.6.1).
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


class Target(NamedTuple):
    """What a client asked of the proxy, from the ASGI scope: the path as sent (its raw
    bytes where uvicorn kept them), the query, both together, and the headers."""

    path: str
    query: str
    target: str
    headers: list[tuple[str, str]]


def scope_target(scope: Scope) -> Target:
    raw_path = scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else quote(scope.get("path") or "/")
    query = (scope.get("query_string") or b"").decode("latin-1")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers") or ()]
    return Target(path, query, f"{path}?{query}" if query else path, headers)


def forward_url(
    asked: Target, upstream: str | None, upstream_path: str, *, label: str, scheme: str
) -> str:
    """The URL a request goes to: below its upstream's URL (`scheme` `ws` makes an
    `http(s)` upstream `ws(s)`), or in replay without an upstream the one the client used
    (its `Host`); a `Host` that is no host is a 400 naming it (`label`: the method, or
    `WebSocket`)."""
    if upstream is not None:
        base = upstream
        if scheme == "ws":
            for http, ws in (("https://", "wss://"), ("http://", "ws://")):
                if base.startswith(http):
                    base = ws + base[len(http) :]
                    break
    else:
        host = next((v for k, v in asked.headers if k.lower() == "host"), "hashreplay-serve")
        base = f"{scheme}://{host}"
        try:  # found by fuzzing: `Host: [` is not a crash
            urlsplit(base).port  # noqa: B018 - parsing is the check
        except ValueError as exc:
            msg = f"{label} {asked.target}: invalid Host header {host!r} ({exc})"
            raise ProxyError(400, "bad_request", msg) from None
    return base + upstream_path + (f"?{asked.query}" if asked.query else "")


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
    response being recorded), all of it at `end()`, once it is recorded.

    So a recording that cannot be written (disk full, permission, a path too long) becomes a
    5xx JSON error naming the problem instead of a 200 whose file is missing. A stream is
    relayed as it comes; when its recording fails, its connection is closed without the end of
    the stream, so the client sees an incomplete response (an error), never a clean end."""

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
