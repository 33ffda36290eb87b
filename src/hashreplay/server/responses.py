"""How the proxy answers: an ASGI `send` that knows how far the response got, JSON errors,
and the header rules of a proxy (hop-by-hop headers, RFC 9110 §7.6.1)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from hashreplay.core.errors import ProxyError

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
