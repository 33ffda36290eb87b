"""The aiohttp adapter: a client middleware added innermost to every `ClientSession` request,
answering with aiohttp's own response (docs/usage.md, "aiohttp"). Scenarios (docs/design.md
§11): a plan's hang, pacing and failures, as aiohttp's own timeouts and exceptions. A live
body released before its end is recorded as abandoned. WebSocket upgrades go on untouched.

Response bodies are `StreamReader`s whose `_wait` (where every read waits on an empty buffer)
feeds the buffer itself, one piece per wait. All else (`read`, `readline`, `iter_*`,
`at_eof`, exceptions after `release()`) is aiohttp's own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import re
import time
import warnings
from asyncio import AbstractEventLoop
from collections import deque
from collections.abc import Callable
from http.client import responses
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp import ClientPayloadError, StreamReader
from aiohttp.helpers import TimerNoop, sentinel
from aiohttp.http import HttpVersion11, RawResponseMessage
from multidict import CIMultiDict, CIMultiDictProxy

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import Patches
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.context import adapter_io
from hashreplay.core.errors import BodyTooLarge, HashReplayWarning, assert_never
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.http import BreakKind, IncomingRequest, LiveBody, LiveExchange, ReplayPlan
from hashreplay.engine.keys import Prepared
from hashreplay.engine.replay import Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session

#: aiohttp's default read buffer (`read_bufsize`): it only tunes pause/resume thresholds.
DEFAULT_LIMIT = 2**16


class _NoTransport:
    """The protocol a fed reader reports to: nothing to pause, always connected."""

    connected = True
    upgraded = False
    _reading_paused = False  # read by the StreamReader of aiohttp 3.12

    def pause_reading(self) -> None:
        pass

    def resume_reading(self, resume_parser: bool = True) -> None:
        pass


class ReplayReader(StreamReader):
    """A plan's chunks, one per wait after its pacing delay (never blocking the loop), then
    `exc` or the end: `iter_any()` yields the recorded chunks one for one, and a recorded
    mid-stream failure comes after the bytes before it (a live reader would raise it at once)."""

    def __init__(
        self, plan: ReplayPlan, exc: BaseException | None, loop: AbstractEventLoop
    ) -> None:
        super().__init__(_NoTransport(), DEFAULT_LIMIT, loop=loop)  # type: ignore[arg-type]
        pending = 0.0  # the delay of an empty chunk is waited before the next one
        self._chunks: deque[tuple[bytes, float]] = deque()
        for i, chunk in enumerate(plan.chunks, 1):  # `delays[0]` is the head's
            pending += plan.delays[i] if i < len(plan.delays) else 0.0
            if chunk:
                self._chunks.append((chunk, pending))
                pending = 0.0
        self._failure = exc
        self._http_chunks = plan.is_streaming
        if self._http_chunks:  # `readchunk()` / `iter_chunks()` report each chunk's end, as live
            self.begin_http_chunk_receiving()

    async def _wait(self, func_name: str) -> None:
        if self._chunks:
            chunk, delay = self._chunks.popleft()
            await pacing.asleep(delay)
            self.feed_data(chunk)
            if self._http_chunks:
                self.end_http_chunk_receiving()
            return
        if self._failure is not None:
            StreamReader.set_exception(self, self._failure)
            raise self._failure
        self.feed_eof()


class Tee:
    """A live body on its way to the caller, recorded once it ends."""

    def __init__(self, session: Session, prep: Prepared, body: LiveBody) -> None:
        self.session = session
        self.prep = prep
        self.body = body

    def feed(self, data: bytes) -> None:
        try:
            self.body.feed(data)
        except ValueError as exc:  # the bytes do not decode: as aiohttp itself would say
            raise ClientPayloadError(str(exc)) from exc

    def exchange(self, exc: BaseException | None, abandoned: bool = False) -> LiveExchange | None:
        with contextlib.suppress(ValueError):  # a truncated compressed body: keep what decoded
            self.body.tail()
        return self.body.exchange(exc, abandoned=abandoned)

    async def finish(self, exc: BaseException | None) -> None:
        if (exchange := self.exchange(exc)) is not None:
            await self.session.arecord(self.prep, exchange)

    def finish_now(self, exc: BaseException | None, *, abandoned: bool = False) -> None:
        if (exchange := self.exchange(exc, abandoned)) is not None:
            self.session.record(self.prep, exchange)


class TeeReader(StreamReader):
    """A live response's `content`: each wait hands the live reader's next piece to the caller
    and the recording, written at the end, at a failure or at an early release (`set_exception`)."""

    def __init__(self, inner: StreamReader, tee: Tee, *, loop: AbstractEventLoop) -> None:
        limit = DEFAULT_LIMIT
        with contextlib.suppress(AttributeError):  # the shared empty reader has no limits
            limit = inner.get_read_buffer_limits()[0] or DEFAULT_LIMIT
        super().__init__(_NoTransport(), limit, loop=loop)  # type: ignore[arg-type]
        self._inner = inner
        self._tee = tee
        self.begin_http_chunk_receiving()

    async def _wait(self, func_name: str) -> None:
        while True:
            try:
                data, end_of_chunk = await self._inner.readchunk()
                if data:
                    self._tee.feed(data)
            except Exception as exc:  # ClientPayloadError, ServerTimeoutError, ...
                await self._tee.finish(exc)
                StreamReader.set_exception(self, exc)
                raise
            except BaseException as exc:  # the task cancelled (Ctrl-C under asyncio.run)
                self._tee.finish_now(exc)  # handed in: nothing is recorded
                raise
            if data:
                self.feed_data(data)
                if end_of_chunk:
                    self.end_http_chunk_receiving()
                return
            if not end_of_chunk:  # (b"", False): the end of the body
                await self._tee.finish(None)
                self.feed_eof()
                return

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        """aiohttp calls this when the response is released or closed: record what the caller
        read plus what of the body had arrived already, abandoned unless that was all of it."""
        if self._exception is None:
            inner, ended = self._inner, False
            if inner.exception() is None:
                # BodyTooLarge: the test is failed with it already, and a release must not raise
                with contextlib.suppress(
                    RuntimeError, ValueError, ClientPayloadError, BodyTooLarge
                ):
                    if rest := inner.read_nowait():
                        self._tee.feed(rest)
                ended = inner.at_eof()
            self._tee.finish_now(None, abandoned=not ended)
        super().set_exception(exc, *args)


_patches = Patches("aiohttp")

_warned: list[str] = []  # the seam problem already warned about (once per process)


def install(session: Session) -> None:
    """Route every aiohttp `ClientSession` request through `session`. Idempotent: a second
    call only swaps the session. Warns (and patches nothing) when the seam is missing."""
    with _patches.lock:
        if not _patches.attach(session):
            return
        if (problem := seam_problem()) is None:
            wrapped = _wrap(aiohttp.ClientSession._request)
            _patches.replace(aiohttp.ClientSession, "_request", wrapped)
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
    _patches.restore()


def is_installed() -> bool:
    return _patches.patched


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
            session.live_status(decision, passed.status, passed.headers.get)
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
