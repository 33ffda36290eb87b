"""`hashreplay.install()` / `hashreplay.uninstall()`: interception in any process
(docs/design.md §8).

A server under test calls `install()` once at start-up: the configuration comes from the
environment (`INFERENCE_MODE`, `HASHREPLAY_ROOT` or the root found upward, `[tool.hashreplay]`
of that root's `pyproject.toml`), exactly as `load_config()` builds it, and every request the
process makes through `httpx2`/`httpx` goes through one `Session`. The test id of each call
comes from the context, which `hashreplay.asgi.TestIdMiddleware` (or the WSGI one) sets from
the `X-HashReplay-Test-Id` header.

This is a front end (docs/design.md §10): the adapters are imported only when `install()` runs,
so `import hashreplay` stays free of HTTP clients.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hashreplay.core.config import load_config
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.keys import conversation
from hashreplay.engine.lifecycle import Placeholders
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


@contextmanager
def conversation_context(name: str | None) -> Iterator[None]:
    """The request's `X-HashReplay-Conversation` as the context's conversation
    (docs/design.md §12), as the proxy reads it; None (no header) changes nothing."""
    if name is None:
        yield
        return
    with conversation(name):
        yield
