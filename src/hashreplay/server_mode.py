"""In-process server mode (docs/design.md §8): `hashreplay.install()` / `uninstall()` and the
middleware that takes each request's test id from its headers.

    import hashreplay
    from hashreplay.asgi import TestIdMiddleware    # hashreplay.wsgi.TestIdMiddleware for WSGI

    hashreplay.install()                    # interception from the environment
    app = TestIdMiddleware(app)             # Starlette, FastAPI or any ASGI 3 app

`install()` builds the configuration from the environment (`INFERENCE_MODE`, `HASHREPLAY_ROOT`
or the root found upward, `[tool.hashreplay]` of its `pyproject.toml`), exactly as
`load_config()` does, and routes every request the process makes through one `Session`.

For each request, the test id in `X-HashReplay-Test-Id` becomes the test context of everything
the app does for it (streamed responses and the tasks it starts included; for WSGI, also while
the server iterates a generator response), so the app's upstream calls are stored per test as
in-process calls of that test would be. A request without the header runs outside any test
(the common recordings directory). `X-HashReplay-Conversation` makes its calls part of that
conversation of the test (docs/design.md §12), as the proxy does; `X-HashReplay-Run` (sent by
the pytest plugin) starts a new run of the test, replaying its identical requests from the
first again. A replay miss answers the app's client with the miss response and its report is
logged (logger `hashreplay`), since no pytest in this process fails the test with it; the
report says to restart the server in a recording mode (the mode given to pytest does not
reach it), and the response to the test's request carries `X-HashReplay-Server-Misses` (how
many misses its upstream calls had before the response started), which the pytest plugin
counts in its summary.

A front end (docs/design.md §10): the adapters are imported only when `install()` runs, so
`import hashreplay` stays free of HTTP clients. Pure ASGI and WSGI: no framework is imported,
nothing of a request or response is buffered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar

from hashreplay.core.config import load_config
from hashreplay.core.constants import (
    CONVERSATION_HEADER,
    MISSES_HEADER,
    RUN_HEADER,
    TEST_ID_HEADER,
)
from hashreplay.core.context import conversation, test_context
from hashreplay.engine.miss import ServerRequest, serving
from hashreplay.engine.placeholders import Placeholders
from hashreplay.engine.session import Session

logger = logging.getLogger("hashreplay")

_lock = threading.Lock()

#: The session `install()` created (and `uninstall()` removes), or None.
_installed: list[Session | None] = [None]

_placeholders: list[Placeholders | None] = [None]


def install() -> Session:
    """Turn interception on for this process and return its session.

    Every adapter is turned on (`hashreplay.adapters.activate`: httpx/httpx2 and the
    configured call-layer `callables`). Idempotent: a second call returns the same session.
    When the process already intercepts (the pytest plugin is active, e.g. an app served
    in-process by a fixture), that session is returned and left to its owner. Raises
    `ConfigError` for an invalid configuration, with nothing left patched.
    """
    from hashreplay import adapters

    with _lock:
        session = _installed[0]
        if session is not None:
            return session
        active = adapters.active_session()
        if active is not None:
            return active
        config = load_config()
        session = Session(config)
        session.per_request = True  # no test ends here: a stale "fail" fails its request
        adapters.activate(session)
        placeholders = Placeholders(config)
        placeholders.apply(config.mode)  # keyless replay for the server's own SDK clients
        _installed[0] = session
        _placeholders[0] = placeholders
        return session


def uninstall() -> None:
    """Undo `install()`: restore the HTTP clients and forget the session (idempotent).

    A session this module did not create (the pytest plugin's) is left alone.
    """
    with _lock:
        session = _installed[0]
        if session is None:
            return
        _installed[0] = None
        placeholders, _placeholders[0] = _placeholders[0], None
        if placeholders is not None:
            placeholders.remove()
        from hashreplay import adapters

        if adapters.active_session() is session:
            adapters.deactivate()


def installed_session() -> Session | None:
    """The session requests of this process go through: `install()`'s or the plugin's."""
    session = _installed[0]
    if session is not None:
        return session
    from hashreplay import adapters

    return adapters.active_session()


_warned: list[bool] = [False]


def enter_request(session: Session | None, test_id: str | None, run_id: str | None) -> None:
    """What the middlewares do for each request before the app runs: a new run id of a test
    starts it afresh (`Session.enter_run`). Without a session (no `install()`), a request
    that carries a test id gets one warning in the log, since its calls are not recorded."""
    if session is not None:
        session.enter_run(test_id, run_id)
        return
    if test_id is not None and not _warned[0]:
        _warned[0] = True
        logger.warning(
            "hashreplay: a request carries %s: %r but hashreplay.install() was not called "
            "in this process, so its outgoing calls are neither recorded nor replayed; "
            "call hashreplay.install() at start-up",
            TEST_ID_HEADER,
            test_id,
        )


def leave_request(session: Session | None, test_id: str | None) -> None:
    """After a request: log the replay misses its calls had, when the session is the one
    `install()` created. A server has no pytest to fail the test with them; the app got the
    miss answer, and the report lands in its log. The pytest plugin's session (an app served
    in-process) keeps its misses: the plugin fails the test with them."""
    if session is None or session is not _installed[0]:
        return
    for miss in session.take_misses(test_id):
        logger.warning("%s", miss.report)
    for stale in session.take_stale(test_id):  # `stale = "warn"` (a "fail" was a miss)
        logger.warning(
            "hashreplay: %s: replayed a recording older than max_age: %s",
            test_id,
            stale.describe(session.config.root),
        )


def header_text(raw: bytes) -> str | None:
    """A header value as text (UTF-8, else Latin-1 as HTTP allows); None when blank."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.strip() or None


def server_request(session: Session | None, test_id: str | None) -> ServerRequest | None:
    """The request's miss counter when `install()`'s session serves it for a test; None for
    the pytest plugin's session (an app served in-process: the plugin fails the test with
    its misses itself) or a request outside any test."""
    if session is None or test_id is None or session is not _installed[0]:
        return None
    return ServerRequest()


@contextmanager
def serving_context(request: ServerRequest | None) -> Iterator[None]:
    if request is None:
        yield
        return
    with serving(request):
        yield


def misses_header(request: ServerRequest | None) -> tuple[str, str] | None:
    """`X-HashReplay-Server-Misses: <n>` for a response whose request had misses so far."""
    if request is None or not request.misses:
        return None
    return MISSES_HEADER, str(request.misses)


@contextmanager
def conversation_context(name: str | None) -> Iterator[None]:
    """The request's `X-HashReplay-Conversation` as the context's conversation
    (docs/design.md §12), as the proxy reads it; None (no header) changes nothing."""
    if name is None:
        yield
        return
    with conversation(name):
        yield


Scope = MutableMapping[str, Any]

Message = MutableMapping[str, Any]

Receive = Callable[[], Awaitable[Message]]

Send = Callable[[Message], Awaitable[None]]

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_TEST_ID_KEY = TEST_ID_HEADER.lower().encode("ascii")

_RUN_KEY = RUN_HEADER.lower().encode("ascii")

_CONVERSATION_KEY = CONVERSATION_HEADER.lower().encode("ascii")


def test_and_run_ids(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """(test id, run id) from ASGI headers; None for an absent or blank header."""
    test_id = run_id = None
    for name, value in headers:
        lname = name.lower()
        if lname == _TEST_ID_KEY:
            test_id = header_text(value)
        elif lname == _RUN_KEY:
            run_id = header_text(value)
    return test_id, run_id


test_and_run_ids.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def conversation_of(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The conversation `X-HashReplay-Conversation` names, or None (absent or blank)."""
    for name, value in headers:
        if name.lower() == _CONVERSATION_KEY:
            return header_text(value)
    return None


class ASGITestIdMiddleware:
    """Runs each request of `app` in the test context its `X-HashReplay-Test-Id` names.

    `session` defaults to the one `hashreplay.install()` created (looked up per request, so
    the middleware may wrap the app before `install()` runs).
    """

    __test__ = False  # a pytest collector must not take it for a test class

    def __init__(self, app: ASGIApp, *, session: Session | None = None) -> None:
        self.app = app
        self.session = session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan and other scopes: untouched
            return
        headers = scope.get("headers") or ()
        test_id, run_id = test_and_run_ids(headers)
        session = self.session or installed_session()
        enter_request(session, test_id, run_id)
        request = server_request(session, test_id)
        marked = send if request is None else _marking(send, request)
        try:
            with (
                test_context(test_id),
                conversation_context(conversation_of(headers)),
                serving_context(request),
            ):
                await self.app(scope, receive, marked)
        finally:
            leave_request(session, test_id)


def _marking(send: Send, request: ServerRequest) -> Send:
    """`send`, adding `X-HashReplay-Server-Misses` to the response start when the request's
    upstream calls had misses by then."""

    async def send_marked(message: Message) -> None:
        header = misses_header(request) if message.get("type") == "http.response.start" else None
        if header is not None:
            name, value = header
            message = {
                **message,
                "headers": [*message.get("headers", ()), (name.encode(), value.encode())],
            }
        await send(message)

    return send_marked


StartResponse = Callable[..., Any]

WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_TEST_ID_ENVIRON = "HTTP_" + TEST_ID_HEADER.upper().replace("-", "_")

_RUN_ENVIRON = "HTTP_" + RUN_HEADER.upper().replace("-", "_")

_CONVERSATION_ENVIRON = "HTTP_" + CONVERSATION_HEADER.upper().replace("-", "_")

_T = TypeVar("_T")


def _environ_value(environ: dict[str, Any], key: str) -> str | None:
    value = environ.get(key)
    if not isinstance(value, str):
        return None
    # PEP 3333: header values arrive as Latin-1 decoded `str`; recover UTF-8 bytes.
    return header_text(value.encode("latin-1", errors="replace"))


class _Context(NamedTuple):
    """What a request's headers make the context of the app's upstream calls."""

    test_id: str | None
    conversation: str | None
    server: ServerRequest | None = None


def _as(context: _Context, fn: Callable[..., _T], *args: Any) -> _T:
    with (
        test_context(context.test_id),
        conversation_context(context.conversation),
        serving_context(context.server),
    ):
        return fn(*args)


class _Body:
    """The app's response iterable, iterated and closed in the request's test context."""

    def __init__(self, inner: Iterable[bytes], context: _Context, session: Session | None) -> None:
        self._inner = inner
        self._iter: Iterator[bytes] | None = None
        self._context = context
        self._session = session

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self._iter is None:
            self._iter = _as(self._context, iter, self._inner)
        chunk: bytes = _as(self._context, next, self._iter)
        return chunk

    def close(self) -> None:
        try:
            close = getattr(self._inner, "close", None)
            if callable(close):
                _as(self._context, close)
        finally:
            leave_request(self._session, self._context.test_id)


class WSGITestIdMiddleware:
    """Runs each request of a WSGI `app` in the test context its `X-HashReplay-Test-Id`
    names; `session` defaults to the one `hashreplay.install()` created."""

    __test__ = False  # a pytest collector must not take it for a test class

    def __init__(self, app: WSGIApp, *, session: Session | None = None) -> None:
        self.app = app
        self.session = session

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        test_id = _environ_value(environ, _TEST_ID_ENVIRON)
        run_id = _environ_value(environ, _RUN_ENVIRON)
        session = self.session or installed_session()
        request = server_request(session, test_id)
        context = _Context(test_id, _environ_value(environ, _CONVERSATION_ENVIRON), request)
        enter_request(session, test_id, run_id)
        start = start_response if request is None else _starting(start_response, request)
        return _Body(_as(context, self.app, environ, start), context, session)


def _starting(start_response: StartResponse, request: ServerRequest) -> StartResponse:
    """`start_response`, adding `X-HashReplay-Server-Misses` when the request's upstream
    calls had misses by then."""

    def start_marked(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
        header = misses_header(request)
        return start_response(status, headers if header is None else [*headers, header], *exc_info)

    return start_marked
