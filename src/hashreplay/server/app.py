"""The ASGI app behind `hashreplay serve`: a record/replay HTTP proxy (docs/design.md §8).

Plain ASGI (no framework): lifespan, the proxy's own `/__hashreplay/health` and
`/__hashreplay/stats`, and for every other path: route to an upstream by prefix, read the
body (bounded by `--max-body-bytes`), take the test id from `X-HashReplay-Test-Id` (and a
new run from `X-HashReplay-Run`), and let the `Forwarder` replay or relay it. Every failure
becomes a JSON error that says what happened and what to do; nothing stops the process. Its
logs never carry a credential (docs/design.md §7).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from hashreplay.core.bodies import RequestTooDeep
from hashreplay.core.config import load_config
from hashreplay.core.constants import FAULT_HEADER, RUN_HEADER, TEST_ID_HEADER
from hashreplay.core.context import test_context
from hashreplay.core.errors import ConfigError, ProxyError, UnknownUpstream
from hashreplay.core.secret_values import NO_SECRETS, SecretValues, request_secrets
from hashreplay.engine.faults import FaultSpec
from hashreplay.engine.session import Session, touch_test
from hashreplay.server.cli import ADMIN_PREFIX, SETTINGS_ENV, ServeSettings
from hashreplay.server.forward import Counters, Forwarder, ProxyRequest
from hashreplay.server.websocket import WebSocketProxy
from hashreplay.server.wire import (
    JsonErrorH11Protocol,
    Receive,
    Responder,
    Scope,
    Send,
    end_to_end,
    forward_url,
    scope_target,
)
from hashreplay.server_mode import test_and_run_ids

__all__ = ["ProxyApp", "app_from_environment"]

logger = logging.getLogger("hashreplay.serve")

#: Request headers the proxy consumes itself and never forwards upstream; the conversation
#: and fault headers go to the engine and are dropped when forwarding (forward.py).
_CONSUMED = ("host", "content-length", "expect", TEST_ID_HEADER, RUN_HEADER)
#: The longest `X-HashReplay-Fault` value the proxy accepts: a test keeps one counter per
#: distinct value, so neither a value nor their number may grow without bound.
MAX_FAULT_HEADER_BYTES = 4096


class _ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class ProxyApp:
    """`hashreplay serve` as an ASGI 3 app. `session` defaults to one built from `settings`
    with `load_config` (project root, `[tool.hashreplay]`, `INFERENCE_MODE`, `--mode`)."""

    def __init__(self, settings: ServeSettings, *, session: Session | None = None) -> None:
        if session is None:
            config = load_config(
                settings.root, mode=settings.mode, recordings_dir=settings.recordings
            )
            session = Session(config)
        self.settings = settings
        self.session = session
        session.per_request = True  # no test ends here: a stale "fail" fails its request
        self.counters = Counters()
        self.forwarder = Forwarder(session, settings, self.counters)
        self.websockets = WebSocketProxy(session, settings, self._scrubber, _check_fault_header)
        install_log_filter(session)  # no credential in any log line
        userinfo = [v for u in settings.upstreams for v in u.userinfo_values]
        session.seen_secrets.add(SecretValues(userinfo))  # nor the upstream's
        session.store.sweep_temp_files()  # what a killed proxy left behind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await self.websockets(scope, receive, send)

    async def aclose(self) -> None:
        """Close the upstream connections (lifespan shutdown does it under a server)."""
        await self.forwarder.aclose()

    # --- lifespan ----------------------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                _configure_logging(self.settings.log_level)
                self.forwarder.client()
                logger.info("%s", self.describe())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def describe(self) -> str:
        config = self.session.config
        routes = (
            ", ".join(f"{u.prefix}* -> {u.shown}" for u in self.settings.upstreams)
            or "none (replay only)"
        )
        return (
            f"hashreplay serve (pid {os.getpid()}): {config.mode.value} mode, project root "
            f"{config.root}, common recordings {config.common_dir}, upstreams: {routes}"
        )

    # --- requests ----------------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        reply = Responder(send)
        path: str = scope.get("path") or "/"
        try:
            if path.startswith(ADMIN_PREFIX) or path == ADMIN_PREFIX.rstrip("/"):
                await self._admin(scope, reply)
                return
            self.counters.requests += 1
            self.counters.in_flight += 1
            try:
                await self._proxy(scope, receive, reply)
            finally:
                self.counters.in_flight -= 1
        except _ClientGone:
            return
        except ProxyError as problem:
            self.counters.error(problem.code)
            scrub = self._scrubber(scope)
            problem = _redacted(problem, scrub)
            method = scope.get("method")
            logger.warning("%s %s -> %d: %s", method, scrub(path), problem.status, problem)
            if not reply.started:
                await reply.error(problem)
        except Exception as exc:
            self.counters.error("internal")
            scrub = self._scrubber(scope)
            logger.exception("hashreplay serve failed on %s %s", scope.get("method"), scrub(path))
            if not reply.started:
                message = (
                    f"hashreplay serve failed on {scope.get('method')} {path}: "
                    f"{type(exc).__name__}: {exc}. This is a bug in hashreplay: please report "
                    "it with the proxy's log"
                )
                await reply.error(_redacted(ProxyError(500, "internal", message), scrub))

    def _scrubber(self, scope: Scope) -> Callable[[str], str]:
        """What removes every credential from an error about this request, as the plugin's
        miss report does (docs/design.md §7): the credential values of this very request
        (its headers, its URL's query and userinfo: an error may come before the request is
        keyed), those the proxy has seen, secret shapes and credential parameters
        (`?key=…`, `/…?api_key=…`)."""
        headers = [
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers") or ()
        ]
        query = (scope.get("query_string") or b"").decode("latin-1")
        url = f"http://proxy{scope.get('path') or '/'}" + (f"?{query}" if query else "")
        try:
            own = request_secrets(self.session.redactor, url, headers)
        except ValueError:  # a URL no parser takes: its shapes are still removed below
            own = NO_SECRETS
        redactor, seen = self.session.redactor, self.session.seen_secrets

        def scrub(text: str) -> str:
            return seen.text(redactor.text(own.text(text)))

        return scrub

    async def _proxy(self, scope: Scope, receive: Receive, reply: Responder) -> None:
        method: str = scope["method"]
        incoming = scope_target(scope)
        target, headers = incoming.target, incoming.headers
        try:
            upstream, upstream_path = self.settings.route(incoming.path)
        except UnknownUpstream as exc:
            raise ProxyError(404, "unknown_upstream", f"{method} {target}: {exc}") from None
        body = await self._read_body(method, target, headers, receive)
        _check_fault_header(method, target, headers)
        url = forward_url(
            incoming,
            None if upstream is None else upstream.url,
            upstream_path,
            label=method,
            scheme="http",
        )
        client_host = next((v for k, v in headers if k.lower() == "host"), None)
        asked = f"http://{client_host}{target}" if client_host else None
        test_id, run_id = test_and_run_ids(scope.get("headers") or ())
        request = ProxyRequest(
            method=method,
            url=url,
            target=target,
            headers=end_to_end(headers, _CONSUMED),
            body=body,
            test_id=test_id,
            upstream=upstream,
            asked=asked,
        )
        self.session.enter_run(test_id, run_id)
        touch_test(self.session, test_id, self.settings.max_tests)  # bounded per-test state
        with test_context(test_id):
            try:
                await self.forwarder.handle(request, reply, receive)
            except RequestTooDeep as exc:  # a client error, not a bug
                raise ProxyError(400, "request_too_deep", str(exc)) from None

    async def _read_body(
        self, method: str, target: str, headers: list[tuple[str, str]], receive: Receive
    ) -> bytes:
        limit = self.settings.max_body_bytes
        too_large = ProxyError(
            413,
            "body_too_large",
            f"the body of {method} {target} is larger than {limit} bytes, the limit of this "
            "hashreplay serve; raise it with --max-body-bytes",
        )
        declared = next((v for k, v in headers if k.lower() == "content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise too_large
        parts: list[bytes] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.body_timeout  # a slow client is cut off
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise ProxyError(
                    408,
                    "body_timeout",
                    f"the body of {method} {target} did not arrive within "
                    f"{self.settings.body_timeout:g} s ({size} bytes came); hashreplay serve "
                    "closes such slow requests; raise the limit with --body-timeout",
                    close=True,
                ) from None
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    # --- the proxy's own endpoints -----------------------------------------------------------

    async def _admin(self, scope: Scope, reply: Responder) -> None:
        name = scope["path"][len(ADMIN_PREFIX) :]
        endpoints = [f"{ADMIN_PREFIX}health", f"{ADMIN_PREFIX}stats"]
        if name not in ("health", "stats"):
            message = (
                f"no such hashreplay endpoint {scope['path']!r}; there are {', '.join(endpoints)}"
            )
            raise ProxyError(404, "unknown_endpoint", message)
        if scope["method"] not in ("GET", "HEAD"):
            raise ProxyError(405, "method_not_allowed", f"{scope['path']} answers GET only")
        if name == "health":
            await reply.json(200, {"status": "ok", "mode": self.session.config.mode.value})
            return
        await reply.json(200, self.stats())

    def stats(self) -> dict[str, object]:
        """Counts of this process (with --workers N, of the worker that answers)."""
        config = self.session.config
        return {
            "mode": config.mode.value,
            "pid": os.getpid(),
            **self.session.stats.as_dict(),
            "requests": self.counters.requests,
            "in_flight": self.counters.in_flight,
            "errors": dict(sorted(self.counters.errors.items())),
            "upstreams": {u.name or "default": u.shown for u in self.settings.upstreams},
            "root": str(config.root),
            "recordings": str(config.common_dir),
        }


def _redacted(problem: ProxyError, scrub: Callable[[str], str]) -> ProxyError:
    message = scrub(problem.message)
    if message == problem.message:
        return problem
    return ProxyError(
        problem.status, problem.code, message, retry=problem.retry, close=problem.close
    )


def _check_fault_header(method: str, target: str, headers: list[tuple[str, str]]) -> None:
    """A 400 naming the problem for a fault header the proxy cannot use, with or without a
    test id, before anything is decided: too long (a test keeps a counter per value),
    several of them, not a fault, or a value that cannot go into a response."""
    values = [v for k, v in headers if k.lower() == FAULT_HEADER.lower()]
    if not values:
        return
    what = f"{method} {target}: header {FAULT_HEADER}"
    if len(values) > 1:
        msg = f"{what} is given {len(values)} times; send one JSON object"
        raise ProxyError(400, "bad_fault", msg)
    size = len(values[0])  # decoded as Latin-1: one character per byte
    if size > MAX_FAULT_HEADER_BYTES:
        msg = (
            f"{what} is {size} bytes, over the limit of {MAX_FAULT_HEADER_BYTES} bytes; "
            'a fault is a small JSON object such as {"status": 429, "times": 1}'
        )
        raise ProxyError(400, "bad_fault", msg)
    try:
        FaultSpec.from_header(values[0], source=what)
    except ConfigError as exc:
        raise ProxyError(400, "bad_fault", str(exc)) from None


class _Formatter(logging.Formatter):
    """uvicorn's look: `WARNING:  message`."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return f"{record.levelname + ':':<10}{text}"


def _configure_logging(level: str) -> None:
    """Our log lines to stderr, beside uvicorn's, unless the host app configured logging."""
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


#: Loggers whose records a `hashreplay serve` process scrubs.
LOGGERS = ("hashreplay.serve", "hashreplay", "uvicorn.access", "uvicorn.error")


class SecretLogFilter(logging.Filter):
    """Rewrites each record's message and arguments: secret shapes and credential query
    parameters (`?key=…`) by the session's redactor, and the exact credential values the
    proxy has seen in requests."""

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


def app_from_environment() -> ProxyApp:
    """The app factory uvicorn calls in each worker (`hashreplay serve` sets the variable)."""
    text = os.environ.get(SETTINGS_ENV)
    if not text:
        msg = f"{SETTINGS_ENV} is not set: start the proxy with `hashreplay serve`"
        raise RuntimeError(msg)
    settings = ServeSettings.from_json(text)
    JsonErrorH11Protocol.header_seconds = settings.header_timeout  # the connections' limit
    return ProxyApp(settings)
