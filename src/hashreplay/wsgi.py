"""WSGI middleware for a server under test (docs/design.md §8): the WSGI twin of
`hashreplay.asgi.TestIdMiddleware`.

    import hashreplay
    from hashreplay.wsgi import TestIdMiddleware

    hashreplay.install()
    app.wsgi_app = TestIdMiddleware(app.wsgi_app)      # Flask; any WSGI callable works

The test id in `X-HashReplay-Test-Id` is the test context while the app is called *and* while
the server iterates its response, so a streaming (generator) response that calls upstream
as it goes is stored under the right test too. `X-HashReplay-Conversation` names the
conversation of those calls (docs/design.md §12), as in the ASGI middleware.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, TypeVar

from hashreplay.core.constants import CONVERSATION_HEADER, RUN_HEADER, TEST_ID_HEADER
from hashreplay.core.keys import test_context
from hashreplay.engine.session import Session
from hashreplay.server_mode import (
    conversation_context,
    enter_request,
    header_text,
    installed_session,
    leave_request,
)

__all__ = ["TestIdMiddleware", "WSGIApp"]

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


def _as(context: _Context, fn: Callable[..., _T], *args: Any) -> _T:
    with test_context(context.test_id), conversation_context(context.conversation):
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


class TestIdMiddleware:
    """Runs each request of a WSGI `app` in the test context its `X-HashReplay-Test-Id`
    names; `session` defaults to the one `hashreplay.install()` created."""

    __test__ = False  # a pytest collector must not take it for a test class

    def __init__(self, app: WSGIApp, *, session: Session | None = None) -> None:
        self.app = app
        self.session = session

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        test_id = _environ_value(environ, _TEST_ID_ENVIRON)
        run_id = _environ_value(environ, _RUN_ENVIRON)
        context = _Context(test_id, _environ_value(environ, _CONVERSATION_ENVIRON))
        session = self.session or installed_session()
        enter_request(session, test_id, run_id)
        return _Body(_as(context, self.app, environ, start_response), context, session)
