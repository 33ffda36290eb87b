"""Replayed HTTP/1.1 responses for the clients built on `http.client` (urllib3, requests,
botocore, `urllib.request`), and the exceptions a recording names, rebuilt.

A replay plan is written out as the bytes a server would have sent (status line, headers,
`content-length` body or one `transfer-encoding: chunked` chunk per recorded chunk) and
parsed by a real `http.client.HTTPResponse` over an in-memory file. Every way a client reads
a response (whole, `read(amt)`, lines, raw chunks) then behaves as it does live. A recorded
stream that broke ends without its last chunk; reading past what arrived raises the recorded
exception, as the broken connection did.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib
import io
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from typing import Any

from hashreplay.engine.http import ReplayPlan

#: Framing headers the replayed bytes set themselves.
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})


def wire_bytes(plan: ReplayPlan) -> bytes:
    """The response `plan` as an HTTP/1.1 server would have sent it (no status None)."""
    status = plan.status if plan.status is not None else 500
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    lines = [f"HTTP/1.1 {status} {reason}".rstrip()]
    lines.extend(f"{k}: {v}" for k, v in plan.headers if k.lower() not in _FRAMING)
    ended = plan.exception_type is None
    if plan.is_streaming:
        lines.append("transfer-encoding: chunked")
        body = b"".join(b"%x\r\n%b\r\n" % (len(c), c) for c in plan.chunks if c)
        if ended:
            body += b"0\r\n\r\n"
    else:
        body = b"".join(plan.chunks)
        # a body that broke off promises more than arrived: reading on raises the failure
        lines.append(f"content-length: {len(body) + (0 if ended else 1)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")
    return head + body


class ReplayFile(io.BytesIO):
    """A socket's read side holding a recorded response; past its end it raises `exc`
    (the recorded failure) instead of signalling a clean end of stream."""

    def __init__(self, data: bytes, exc: Callable[[], BaseException] | None) -> None:
        super().__init__(data)
        self._exc = exc
        self._size = len(data)

    def _check(self, wanted: int | None) -> None:
        if self._exc is not None and self.tell() >= self._size and wanted != 0:
            raise self._exc()

    def read(self, size: int | None = -1, /) -> bytes:
        self._check(size)
        return super().read(size)

    def read1(self, size: int | None = -1, /) -> bytes:
        self._check(size)
        return super().read1(size)

    def readline(self, size: int | None = -1, /) -> bytes:
        self._check(size)
        return super().readline(size)

    def readinto(self, buffer: Any, /) -> int:
        self._check(len(buffer))
        return super().readinto(buffer)

    def peek(self, size: int = 0, /) -> bytes:
        position = self.tell()
        return self.getvalue()[position : position + max(size, 1)]


class _ReplaySocket:
    """Just enough of a socket for `http.client.HTTPResponse` to read from."""

    def __init__(self, fp: ReplayFile) -> None:
        self._fp = fp

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> ReplayFile:
        return self._fp


def httplib_response(
    plan: ReplayPlan,
    method: str,
    url: str,
    exc: Callable[[], BaseException] | None,
    response_class: type[http.client.HTTPResponse] = http.client.HTTPResponse,
) -> http.client.HTTPResponse:
    """A real, begun `http.client.HTTPResponse` reading the recorded response."""
    fp = ReplayFile(wire_bytes(plan), exc if plan.exception_type else None)
    response = response_class(_ReplaySocket(fp), method=method.upper(), url=url)  # type: ignore[arg-type]
    response.begin()
    return response


# --- recorded exceptions -------------------------------------------------------------------

_CAUSED_BY = re.compile(r"\(Caused by (\w+)\((.*)\)\)\s*$", re.DOTALL)


def find_exception_class(
    qualified: str | None, namespaces: Sequence[Any], default: type[BaseException]
) -> type[BaseException]:
    """The class a recording names (`module.Name`), looked up in modules already imported
    (never importing anything new) and in `namespaces`; `default` when none fits."""
    if not qualified:
        return default
    module_name, _, name = qualified.rpartition(".")
    places: list[Any] = []
    if module_name in sys.modules:
        places.append(sys.modules[module_name])
    elif module_name == "builtins":
        places.append(importlib.import_module("builtins"))
    places.extend(namespaces)
    for place in places:
        found = getattr(place, name, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
    return default


def rebuild_exception(cls: type[BaseException], message: str, **attributes: Any) -> BaseException:
    """An instance of `cls` whose `str()` is the recorded message, made without calling its
    constructor (clients' exception classes take differing arguments); `attributes` are set
    on it (what callers inspect, e.g. urllib3's `pool`, `url`, `reason`)."""
    exc = cls.__new__(cls)
    BaseException.__init__(exc, message)
    for name, value in attributes.items():
        with contextlib.suppress(AttributeError):  # a read-only property on this version
            setattr(exc, name, value)
    return exc


def caused_by(message: str) -> tuple[str, str] | None:
    """`(class name, message)` of the cause in a urllib3 retry message
    (`... (Caused by NewConnectionError("..."))`), or None."""
    match = _CAUSED_BY.search(message)
    if match is None:
        return None
    name, inner = match.groups()
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        inner = inner[1:-1]
    return name, inner


def body_bytes(body: Any) -> tuple[bytes, Any]:
    """A request body's bytes and what to send in its place: the body itself when it is
    bytes or text, else (a file, an iterable of chunks) the bytes read from it."""
    if body is None:
        return b"", None
    if isinstance(body, bytes):
        return body, body
    if isinstance(body, str):
        return body.encode("utf-8"), body
    if isinstance(body, (bytearray, memoryview)):
        data = bytes(body)
        return data, data
    if hasattr(body, "read"):
        raw = body.read()
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        return data, data
    if isinstance(body, Iterable):
        parts = [p.encode("utf-8") if isinstance(p, str) else bytes(p) for p in body]
        data = b"".join(parts)
        return data, data
    return b"", body
