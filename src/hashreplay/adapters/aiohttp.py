"""The aiohttp adapter: a client middleware added innermost to every `ClientSession` request,
answering with aiohttp's own response (docs/usage.md, "aiohttp"). Scenarios (docs/design.md
§11): a plan's hang, pacing and failures, as aiohttp's own timeouts and exceptions. A live
body released before its end is recorded as abandoned. WebSocket upgrades go on untouched."""

from __future__ import annotations

import asyncio
import errno
import inspect
import re
import threading
import time
import warnings
from collections.abc import Callable
from http.client import responses
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp import StreamReader
from aiohttp.helpers import TimerNoop, sentinel
from aiohttp.http import HttpVersion11, RawResponseMessage
from multidict import CIMultiDict, CIMultiDictProxy

from hashreplay.adapters import _runtime as _state
from hashreplay.adapters._aiohttp_bodies import ReplayReader, Tee, TeeReader
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.errors import HashReplayWarning, assert_never
from hashreplay.core.keys import adapter_io
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.http import BreakKind, IncomingRequest, LiveExchange, ReplayPlan
from hashreplay.engine.replay import Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session

_lock = threading.Lock()
_saved: list[Callable[..., Any]] = []  # the original `ClientSession._request`, while patched
_warned: list[str] = []  # the seam problem already warned about (once per process)


def install(session: Session) -> None:
    """Route every aiohttp `ClientSession` request through `session`. Idempotent: a second
    call only swaps the session. Warns (and patches nothing) when the seam is missing."""
    with _lock:
        _state.attach("aiohttp", session)
        if _saved:
            return
        if (problem := seam_problem()) is None:
            original = aiohttp.ClientSession._request
            _saved.append(original)
            aiohttp.ClientSession._request = _wrap(original)  # type: ignore[method-assign]
        elif problem not in _warned:
            _warned.append(problem)
            msg = (
                f"hashreplay cannot intercept aiohttp {aiohttp.__version__}: {problem}. Requests "
                "made through aiohttp are not recorded or replayed; upgrade aiohttp to 3.12.2 or "
                "later."
            )
            warnings.warn(HashReplayWarning(msg), stacklevel=2)


def uninstall() -> None:
    """Restore `ClientSession._request` and forget the session."""
    with _lock:
        if _saved:
            aiohttp.ClientSession._request = _saved.pop()  # type: ignore[method-assign]
        _state.detach("aiohttp")


def is_installed() -> bool:
    return bool(_saved)


def seam_problem() -> str | None:
    """Why this aiohttp cannot be intercepted, or None. The private members relied on:
    `ClientSession._request` (wrapped, only to add the keyword), `StreamReader._wait`
    (overridden by the body readers) and `ClientResponse.start()` (given a stand-in connection)."""
    try:
        params = inspect.signature(aiohttp.ClientSession._request).parameters
    except (AttributeError, TypeError, ValueError):
        return "it has no ClientSession._request"
    if "middlewares" not in params:
        return "it has no client middlewares (aiohttp 3.12 added them)"
    if not callable(getattr(aiohttp.payload.Payload, "as_bytes", None)):
        return "its request payloads have no as_bytes() (aiohttp 3.12.2 added it)"
    if not callable(getattr(StreamReader, "_wait", None)):
        return "its StreamReader has no _wait"
    return None


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    """`_request`, our middleware appended, innermost, through its public `middlewares=`, so
    sessions made before activation or inside SDKs are covered alike. A middleware gets the
    `ClientRequest` exactly as sent (final URL, default, auth and cookie headers) and may answer
    it unsent; vcrpy and cassetter instead copy `_request`, a private method that grows every
    release. Each redirect hop is a request; cookies, retries and timeouts stay aiohttp's."""

    async def _request(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> Any:
        if _state.active_session() is None:
            return await original(self, *args, **kwargs)
        chain: Any = kwargs.get("middlewares")
        if chain is None:
            chain = getattr(self, "_middlewares", ())
        decompress = kwargs.get("auto_decompress")
        ours = _middleware(
            decompress=bool(self.auto_decompress if decompress is None else decompress),
            read_timeout=_sock_read(kwargs.get("timeout", sentinel), self.timeout),
        )
        kwargs["middlewares"] = (*chain, ours)
        return await original(self, *args, **kwargs)

    _request.__wrapped__ = original  # type: ignore[attr-defined]
    return _request


def _sock_read(timeout: Any, default: Any) -> float | None:
    """The request's own read timeout (`sock_read`; None: none), as `_request` resolves
    its `timeout=` (a `ClientTimeout`, a number for the total, or the session's)."""
    if timeout is sentinel:
        timeout = default
    value = timeout.sock_read if isinstance(timeout, aiohttp.ClientTimeout) else None
    return float(value) if isinstance(value, (int, float)) else None


def _middleware(*, decompress: bool, read_timeout: float | None) -> Callable[..., Any]:
    async def hashreplay(req: aiohttp.ClientRequest, handler: Callable[..., Any]) -> Any:
        session = _state.active_session()
        if session is None or "upgrade" in req.headers.get("connection", "").lower():
            return await handler(req)
        content: Any = req.body  # a streamed body is read once, kept by `as_bytes()` to be sent
        if not isinstance(content, (bytes, bytearray, memoryview)):
            content = await content.as_bytes()
        incoming = IncomingRequest(
            req.method, str(req.url), list(req.headers.items()), bytes(content)
        )
        decision = session.decide(incoming)
        if isinstance(decision, (Replay, Miss)):
            return await _replayed(req, decision.plan(), read_timeout)
        if isinstance(decision, Passthrough) and TEST_ID_HEADER not in req.headers:
            for name, value in decision.headers:
                req.headers[name] = value
        if not isinstance(decision, Record):
            with adapter_io():
                passed = await handler(req)
            session.live_status(decision, passed.status)
            return passed
        started = time.monotonic()
        try:
            with adapter_io():
                resp = await handler(req)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            await session.arecord(decision.prep, LiveExchange(None, [], [], exception=exc))
            raise
        headers = list(resp.headers.items())
        if decompress:  # aiohttp hands the caller decoded bytes already
            headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
        body = session.live_body(decision.prep, resp.status, headers, started=started)
        resp.content = TeeReader(resp.content, Tee(session, decision.prep, body), loop=req.loop)
        return resp

    return hashreplay


class _Canned:
    """Stands in for a response's `Connection`: its protocol answers with a parsed message;
    releasing it only runs the callbacks aiohttp added (the total timeout's cancel)."""

    upgraded = False
    transport = None

    def __init__(self, message: RawResponseMessage, payload: StreamReader) -> None:
        self._answer = (message, payload)
        self._callbacks: list[Callable[[], None]] = []
        self.closed = False

    @property
    def protocol(self) -> _Canned:
        return self

    async def read(self) -> tuple[RawResponseMessage, StreamReader]:
        return self._answer

    def add_callback(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def release(self) -> None:
        self.closed = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    close = release


_response_params: dict[type, frozenset[str]] = {}


def _new_response(req: aiohttp.ClientRequest) -> aiohttp.ClientResponse:
    cls: type[aiohttp.ClientResponse] = req.response_class or aiohttp.ClientResponse
    offered: dict[str, Any] = {
        "writer": None,
        "continue100": None,
        "timer": TimerNoop(),
        "request_info": req.request_info,
        "traces": [],
        "loop": req.loop,
        "session": getattr(req, "session", None),
        "stream_writer": SimpleNamespace(output_size=0),  # the writer of a request sent already
    }
    params = _response_params.get(cls)
    if params is None:
        params = _response_params[cls] = frozenset(inspect.signature(cls.__init__).parameters)
    return cls(req.method, req.original_url, **{k: v for k, v in offered.items() if k in params})


async def _replayed(
    req: aiohttp.ClientRequest, plan: ReplayPlan, read_timeout: float | None
) -> aiohttp.ClientResponse:
    """The request's own `response_class`, started by aiohttp's `ClientResponse.start()` from a
    parsed message (so status, headers, cookies and `raise_for_status()` are aiohttp's). A hang
    awaits the request's `sock_read` timeout (the total timeout and cancellation end it through
    aiohttp's own timer); pacing awaits `engine.scenarios.asleep` before the head."""
    if plan.hang is not None:
        await plan.hang.await_(read_timeout)
    if plan.status is None:
        raise exception_for(plan, req, in_body=False)
    if plan.delays:
        await pacing.asleep(plan.delays[0])
    exc = exception_for(plan, req, in_body=True) if plan.broken else None
    headers = CIMultiDictProxy(CIMultiDict(plan.headers))
    raw = tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in plan.headers)
    reason = responses.get(plan.status, "")
    message = RawResponseMessage(
        HttpVersion11, plan.status, reason, headers, raw, False, None, False, plan.is_streaming
    )
    resp = _new_response(req)
    await resp.start(_Canned(message, ReplayReader(plan, exc, req.loop)))  # type: ignore[arg-type]
    return resp


def exception_for(plan: ReplayPlan, req: aiohttp.ClientRequest, *, in_body: bool) -> BaseException:
    """aiohttp's exception for a plan's `error_kind` (`kind_exception`), else for a recorded
    failure: aiohttp's class of its name, else `ServerTimeoutError` for a timeout,
    `ClientConnectionError` before a response and `ClientPayloadError` within a body."""
    if plan.error_kind is not None:
        return kind_exception(plan, req, in_body=in_body)
    name = (plan.exception_type or "").rsplit(".", 1)[-1]
    message = plan.exception_message
    cls = getattr(aiohttp, name, None)
    if isinstance(cls, type) and issubclass(cls, aiohttp.ClientError):
        try:
            if issubclass(cls, aiohttp.ClientConnectorError):
                found = re.search(r"\[(.*)\]\s*$", message, re.DOTALL)
                reason = found.group(1) if found else message
                return cls(req.connection_key, OSError(None, reason))
            return cls(message)
        except TypeError:
            pass  # a constructor of another shape: the closest class below
    if "timeout" in name.lower():
        return aiohttp.ServerTimeoutError(message)
    if in_body:
        return aiohttp.ClientPayloadError(message)
    return aiohttp.ClientConnectionError(message)


def kind_exception(plan: ReplayPlan, req: aiohttp.ClientRequest, *, in_body: bool) -> BaseException:
    """What aiohttp raises for a generic failure (a `BreakKind`): a read timeout, a refused
    connection, a server that hung up, a body that ends early (cut where its client stopped)."""
    message = plan.exception_message
    kind = plan.error_kind
    if kind is None or kind is BreakKind.ABANDONED:
        return aiohttp.ClientPayloadError(message)
    if kind is BreakKind.READ_TIMEOUT:
        return aiohttp.SocketTimeoutError(message)
    if kind is BreakKind.CONNECT_ERROR:
        if in_body:
            return aiohttp.ClientConnectionError(message)
        reason = ConnectionRefusedError(errno.ECONNREFUSED, message)
        return aiohttp.ClientConnectorError(req.connection_key, reason)
    if kind is BreakKind.DISCONNECT:
        return aiohttp.ServerDisconnectedError(message)
    assert_never(kind)
