"""ASGI middleware for a server under test (docs/design.md §8).

    import hashreplay
    from hashreplay.asgi import TestIdMiddleware

    hashreplay.install()                    # interception from the environment
    app = TestIdMiddleware(app)             # Starlette, FastAPI or any ASGI 3 app

For each HTTP (or WebSocket) request, the test id in `X-HashReplay-Test-Id` becomes the test
context of everything the app does for that request, streamed responses and the tasks it
starts included, so the app's own upstream calls are stored per test, exactly as in-process
calls of that test would be. A request without the header runs outside any test (its calls
go to the common recordings directory). `X-HashReplay-Conversation` makes the request's
upstream calls part of that conversation of the test (docs/design.md §12), as the proxy
does. `X-HashReplay-Run` (sent by the pytest plugin) starts
a new run of the test: a re-run replays its identical requests from the first again. A replay
miss answers the app's client with the miss response (as in-process) and its report is
logged (logger `hashreplay`), since no pytest in this process fails the test with it.

Pure ASGI: no framework is imported, nothing of the request or response is buffered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

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

__all__ = ["ASGIApp", "TestIdMiddleware", "conversation_of", "test_and_run_ids"]

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


class TestIdMiddleware:
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
        try:
            with test_context(test_id), conversation_context(conversation_of(headers)):
                await self.app(scope, receive, send)
        finally:
            leave_request(session, test_id)
