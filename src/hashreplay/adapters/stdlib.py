"""The adapter for the standard library's `http.client` (`HTTPConnection`, `HTTPSConnection`),
and so for `urllib.request.urlopen` and anything else built on them.

The seam is the request half of `http.client.HTTPConnection` (`putrequest`, `putheader`,
`endheaders`, `send`) and `getresponse`: `request()` and the low-level calls both go through
it. The request is held until its body is known (at `endheaders`, or at `getresponse` when
the body follows in `send()` calls), then decided once. A live request is then sent on the
real connection exactly as the caller wrote it; a replayed one never opens the connection
and `getresponse()` returns a real `http.client.HTTPResponse` reading the recorded bytes. A
recorded live response is the server's own object; what the caller reads is collected and
recorded when the body ends, fails or the response is closed.

Scenarios (docs/design.md §11): a hang waits in `getresponse()` for the connection's
timeout, then fails as a read timeout; a plan's `error_kind` is the exception the socket or
`http.client` raises for it (`socket.timeout`, `ConnectionRefusedError` when connecting,
`RemoteDisconnected`, `IncompleteRead` in a body); pacing waits before the head and as reads
reach each chunk (`_shared`). A response the caller closes before its end is recorded as
abandoned.

Connections of urllib3 (which subclasses these classes) are left alone: the urllib3 adapter
decides those requests, and a request it sends live runs inside `adapter_io()`.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import (
    Patches,
    body_bytes,
    find_exception_class,
    httplib_response,
    kind_exception,
    rebuild_exception,
)
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.context import adapter_io, in_adapter_io
from hashreplay.engine.http import (
    BreakKind,
    IncomingRequest,
    LiveExchange,
    ReplayPlan,
)
from hashreplay.engine.keys import Prepared
from hashreplay.engine.replay import Decision, Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session

_Conn = http.client.HTTPConnection
_PATCHED = ("putrequest", "putheader", "endheaders", "send", "getresponse")
_patches = Patches("stdlib")
_originals: dict[str, Callable[..., Any]] = {}  # by name, while patched
_ATTR = "_hashreplay_request"


def install(session: Session) -> None:
    """Route every `http.client` request through `session` (idempotent)."""
    with _patches.lock:
        if not _patches.attach(session):
            return
        mine = (_putrequest, _putheader, _endheaders, _send, _getresponse)
        for name, replacement in zip(_PATCHED, mine, strict=True):
            _originals[name] = _patches.replace(_Conn, name, replacement)


def uninstall() -> None:
    """Restore the original `http.client.HTTPConnection` methods."""
    with _patches.lock:
        _patches.restore()
        _originals.clear()


def is_installed() -> bool:
    return _patches.patched


class _Request:
    """A request held back until it is decided."""

    __slots__ = (
        "body",
        "decided",
        "encode_chunked",
        "ended",
        "headers",
        "live",
        "method",
        "plan",
        "prep",
        "skip_accept_encoding",
        "skip_host",
        "started",
        "url",
    )

    def __init__(self, method: str, url: str, skip_host: bool, skip_accept_encoding: bool) -> None:
        self.method = method
        self.url = url
        self.skip_host = skip_host
        self.skip_accept_encoding = skip_accept_encoding
        self.headers: list[tuple[Any, tuple[Any, ...]]] = []
        self.body: list[bytes] = []
        self.encode_chunked = False
        self.ended = False
        #: set once decided: a plan to answer from, or None when it went out live
        self.decided = False
        self.plan: ReplayPlan | None = None
        self.prep: Prepared | None = None
        #: sent on unrecorded: the decision whose status is reported to the engine
        self.live: Decision | None = None
        #: `time.monotonic()` when it was sent live
        self.started: float | None = None


def _intercepts(conn: Any) -> bool:
    if _state.active_session() is None or in_adapter_io():
        return False
    return not any(c.__module__.startswith("urllib3.") for c in type(conn).__mro__)


def _pending(conn: Any) -> _Request | None:
    request: _Request | None = conn.__dict__.get(_ATTR)
    return request


# --- the patched methods -------------------------------------------------------------------


def _putrequest(
    self: Any, method: str, url: str, skip_host: bool = False, skip_accept_encoding: bool = False
) -> None:
    self.__dict__.pop(_ATTR, None)
    if not _intercepts(self):
        _originals["putrequest"](self, method, url, skip_host, skip_accept_encoding)
        return
    self.__dict__[_ATTR] = _Request(method, url, skip_host, skip_accept_encoding)


def _putheader(self: Any, header: Any, *values: Any) -> None:
    request = _pending(self)
    if request is None or request.ended:
        _originals["putheader"](self, header, *values)
        return
    request.headers.append((header, values))


def _endheaders(self: Any, message_body: Any = None, *, encode_chunked: bool = False) -> None:
    request = _pending(self)
    if request is None or request.ended:
        _originals["endheaders"](self, message_body, encode_chunked=encode_chunked)
        return
    request.ended = True
    request.encode_chunked = encode_chunked
    data, _ = body_bytes(message_body)
    if data:
        request.body.append(data)
    if message_body is None and _body_follows(request):
        return  # the body comes in send() calls: decided at getresponse()
    _decide(self, request)


def _send(self: Any, data: Any) -> None:
    request = _pending(self)
    if request is None or request.decided:
        _originals["send"](self, data)
        return
    request.body.append(body_bytes(data)[0])


def _getresponse(self: Any) -> Any:
    request = _pending(self)
    if request is None:
        return _originals["getresponse"](self)
    del self.__dict__[_ATTR]
    if not request.decided:
        _decide(self, request)
    if request.plan is not None:
        return _replayed(self, request, request.plan)
    session = _state.active_session()
    with adapter_io():
        if request.prep is None or session is None:
            response = _originals["getresponse"](self)
            if session is not None and request.live is not None:
                session.live_status(request.live, response.status, response.getheader)
            return response
        try:
            response = _originals["getresponse"](self)
        except (OSError, http.client.HTTPException) as exc:
            session.record(request.prep, LiveExchange(None, [], [], exception=exc))
            raise
    _Watch(session, request.prep, response, request.started).attach(response)
    return response


# --- deciding and sending ------------------------------------------------------------------


def _body_follows(request: _Request) -> bool:
    for header, values in request.headers:
        name = _text(header).lower()
        value = ",".join(_text(v) for v in values).strip().lower()
        if name == "content-length" and value not in ("", "0"):
            return True
        if name == "transfer-encoding" and "chunked" in value:
            return True
    return False


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _url(conn: Any, request: _Request) -> str:
    if request.url.startswith(("http://", "https://")):
        return request.url
    scheme = "https" if isinstance(conn, http.client.HTTPSConnection) else "http"
    host = getattr(conn, "_tunnel_host", None) or conn.host
    port = getattr(conn, "_tunnel_port", None) if getattr(conn, "_tunnel_host", None) else conn.port
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    netloc = host if port in (None, conn.default_port) else f"{host}:{port}"
    return f"{scheme}://{netloc}{request.url}"


def _decide(conn: Any, request: _Request) -> None:
    request.decided = True
    session = _state.active_session()
    if session is None:  # uninstalled meanwhile: send it as written
        _send_live(conn, request)
        return
    headers = [(_text(h), ", ".join(_text(v) for v in vs)) for h, vs in request.headers]
    body = b"".join(request.body)
    decision = session.decide(IncomingRequest(request.method, _url(conn, request), headers, body))
    if isinstance(decision, (Replay, Miss)):
        plan = decision.plan()
        if plan.status is None and not _raised_on_response(plan):
            raise _exception(plan)  # a failure to connect or send, as it happened
        request.plan = plan
        return
    tagged = any(k.lower() == TEST_ID_HEADER.lower() for k, _ in headers)
    if isinstance(decision, Passthrough) and not tagged:
        request.headers.extend((k, (v,)) for k, v in decision.headers)
    if isinstance(decision, Record):
        request.prep = decision.prep
    else:
        request.live = decision
    request.started = time.monotonic()
    try:
        _send_live(conn, request)
    except (OSError, http.client.HTTPException) as exc:
        if request.prep is not None:
            session.record(request.prep, LiveExchange(None, [], [], exception=exc))
        raise


def _send_live(conn: Any, request: _Request) -> None:
    """Send the held request on the real connection, as the caller wrote it."""
    with adapter_io():
        _originals["putrequest"](
            conn, request.method, request.url, request.skip_host, request.skip_accept_encoding
        )
        for header, values in request.headers:
            _originals["putheader"](conn, header, *values)
        body = b"".join(request.body) if request.body else None
        _originals["endheaders"](conn, body, encode_chunked=request.encode_chunked)


# --- replay --------------------------------------------------------------------------------


def _exception(plan: ReplayPlan) -> BaseException:
    if plan.error_kind is not None:
        return kind_exception(plan, in_body=False)
    cls = find_exception_class(plan.exception_type, [http.client], ConnectionError)
    return rebuild_exception(cls, plan.exception_message)


def _raised_on_response(plan: ReplayPlan) -> bool:
    """A failure http.client raises while reading the response (no status line, a read
    timeout, a hang), rather than while connecting or sending."""
    if plan.hang is not None:
        return True
    if plan.error_kind is not None:
        return plan.error_kind != BreakKind.CONNECT_ERROR
    cls = find_exception_class(plan.exception_type, [http.client], ConnectionError)
    return issubclass(cls, http.client.HTTPException)


def _timeout(conn: Any) -> float | None:
    """The connection's own socket timeout (None: it waits forever)."""
    timeout = getattr(conn, "timeout", None)
    if timeout is socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
        timeout = socket.getdefaulttimeout()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout)
    return None


def _replayed(conn: Any, request: _Request, plan: ReplayPlan) -> http.client.HTTPResponse:
    if plan.hang is not None:
        plan.hang.wait(_timeout(conn))
    if plan.status is None:
        raise _exception(plan)
    response_class = getattr(conn, "response_class", http.client.HTTPResponse)
    return httplib_response(
        plan, request.method, request.url, lambda: _exception(plan), response_class
    )


# --- record --------------------------------------------------------------------------------


#: where a watched response keeps its `_Watch`
_WATCH = "_hashreplay_watch"
#: the read methods of `http.client.HTTPResponse`; `readlines`, iteration, `readinto1` and
#: `io.TextIOWrapper` all come down to one of them, looked up by name on the response
_READS = ("read", "read1", "readline", "readinto")
_watched_classes: dict[type[Any], type[Any]] = {}
_watched_lock = threading.Lock()


def _watched_class(cls: type[Any]) -> type[Any]:
    """The subclass of a response class whose read methods and `close` feed the response's
    `_Watch` (made once per class; `__slots__ = ()` keeps the layout, so a response's class
    can be switched to it). Methods of the class, not functions put on each response: a
    method bound to a response holds it for the call, so `urlopen(url).read()`, whose
    response nothing else references, stays alive while it is read, and nothing the watch
    adds references the response, so one its caller drops unread is closed (and recorded)
    as the last reference goes, not by a later GC run."""
    with _watched_lock:
        found = _watched_classes.get(cls)
        if found is None:
            namespace: dict[str, Any] = {name: _reader(name, getattr(cls, name)) for name in _READS}
            namespace.update(
                __slots__=(),
                __module__=cls.__module__,
                __qualname__=cls.__qualname__,
                close=_closer(cls.close),
            )
            found = _watched_classes[cls] = type(cls.__name__, (cls,), namespace)
        return found


def _reader(name: str, read: Callable[..., Any]) -> Callable[..., Any]:
    def reader(self: Any, *args: Any, **kwargs: Any) -> Any:
        watch: _Watch | None = self.__dict__.get(_WATCH)
        if watch is None:
            return read(self, *args, **kwargs)
        watch.depth += 1
        try:
            result = read(self, *args, **kwargs)
        except BaseException as exc:  # a Ctrl-C in the read is no answer: not recorded
            watch.depth -= 1
            if not watch.depth:
                watch.finish(exc)
            raise
        watch.depth -= 1
        if not watch.depth:
            data = bytes(args[0][:result]) if name == "readinto" else result
            watch.feed(data)
            if _body_ended(self):
                watch.finish(None)
        return result

    reader.__name__ = reader.__qualname__ = name
    return reader


def _body_ended(response: Any) -> bool:
    """Whether the caller has read the whole body: http.client closes the response at its
    end, except after `readline`/`read1` reach the end of a body of known length (the
    iteration of `readlines`, `for line in response`), which leave it open with no byte
    left."""
    if response.isclosed():
        return True
    return not getattr(response, "chunked", False) and getattr(response, "length", None) == 0


def _closer(close: Callable[[Any], None]) -> Callable[[Any], None]:
    def closing(self: Any) -> None:
        watch: _Watch | None = self.__dict__.get(_WATCH)
        ended = _body_ended(self)
        try:
            close(self)
        finally:
            if watch is not None and not watch.depth:
                watch.finish(None, abandoned=not ended)

    closing.__name__ = closing.__qualname__ = "close"
    return closing


class _Watch:
    """A live `http.client.HTTPResponse` recorded as its caller reads it: what the
    outermost read call returns is kept (reads call each other inside); the body has ended
    when the response closes itself; a failure is what a read raised; a `close()` by the
    caller before then records what was read as abandoned. It holds no reference to the
    response (`_watched_class`)."""

    def __init__(
        self, session: Session, prep: Prepared, response: Any, started: float | None
    ) -> None:
        self.session = session
        self.prep = prep
        self.body = session.live_body(
            prep, response.status, list(response.getheaders()), started=started
        )
        self.depth = 0
        self.broken: BaseException | None = None

    def attach(self, response: Any) -> None:
        response.__class__ = _watched_class(type(response))
        response.__dict__[_WATCH] = self
        if response.isclosed():  # no body at all (HEAD, 204, 304)
            self.finish(None)

    def feed(self, data: bytes) -> None:
        if not data or self.broken is not None:
            return
        try:
            self.body.feed(data)
        except ValueError as exc:
            self.broken = http.client.HTTPException(str(exc))

    def finish(self, exc: BaseException | None, *, abandoned: bool = False) -> None:
        with contextlib.suppress(ValueError):
            self.body.tail()
        exchange = self.body.exchange(exc if exc is not None else self.broken, abandoned=abandoned)
        if exchange is not None:
            self.session.record(self.prep, exchange)
