"""The transport-layer adapter for `httpx2` (2.x) and `httpx` (0.28).

One implementation, applied to whichever of the two modules is installed (and to one module
once when `httpx2.alias_httpx()` made them the same). It patches the two public seams of the
real network transports, `HTTPTransport.handle_request` and
`AsyncHTTPTransport.handle_async_request`, so clients created before activation and
clients that SDKs create internally are covered; `ASGITransport`, `WSGITransport` and
`MockTransport` are other classes and stay untouched. `uninstall()` restores the originals.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import Patches, when_imported
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.context import adapter_io
from hashreplay.core.errors import assert_never
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.http import BreakKind, IncomingRequest, LiveExchange, ReplayPlan
from hashreplay.engine.keys import Prepared
from hashreplay.engine.replay import Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session

MODULE_NAMES: tuple[str, ...] = ("httpx2", "httpx")


def error_class(kind: BreakKind) -> str:
    """The name of the client's own exception for each generic failure a plan may ask for."""
    if kind is BreakKind.READ_TIMEOUT:
        return "ReadTimeout"
    if kind is BreakKind.CONNECT_ERROR:
        return "ConnectError"
    if kind is BreakKind.DISCONNECT:
        return "RemoteProtocolError"
    if kind is BreakKind.ABANDONED:
        return "ReadError"
    assert_never(kind)


_patches = Patches("httpx")


def active_session() -> Session | None:
    return _state.active_session()


def install(session: Session) -> None:
    """Route every real httpx/httpx2 request through `session`. A module imported already
    is patched now, one not imported yet when it is first imported (so a run that never uses
    it never pays for importing it). Idempotent: a second call only swaps the session."""
    if not _patches.attach(session):
        return
    for name in MODULE_NAMES:
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            when_imported(name, _patch_module_once)


def uninstall() -> None:
    """Restore the original transport methods and forget the session."""
    _patches.restore()


def is_installed() -> bool:
    """Whether the transports are patched now (tests check that nothing stays patched)."""
    return _patches.patched


def _patch_module_once(module: ModuleType) -> None:
    """Patch `module` unless it is patched already (`httpx2.alias_httpx()` makes `httpx` the
    same module) or the adapter was uninstalled meanwhile."""
    with _patches.lock:
        if not _patches.installed or _patches.get(module) is not None:
            return
        _patch_module(module)


def _patch_module(module: ModuleType) -> None:
    sync_cls = module.HTTPTransport
    async_cls = module.AsyncHTTPTransport
    streams = _Streams(module)
    sync_original = sync_cls.handle_request
    async_original = async_cls.handle_async_request

    def handle_request(self: Any, request: Any) -> Any:
        session = _state.active_session()
        if session is None:
            return sync_original(self, request)
        return _handle_sync(session, streams, sync_original, self, request)

    async def handle_async_request(self: Any, request: Any) -> Any:
        session = _state.active_session()
        if session is None:
            return await async_original(self, request)
        return await _handle_async(session, streams, async_original, self, request)

    handle_request.__wrapped__ = sync_original  # type: ignore[attr-defined]
    handle_async_request.__wrapped__ = async_original  # type: ignore[attr-defined]
    _patches.replace(sync_cls, "handle_request", handle_request, key=module)
    _patches.replace(async_cls, "handle_async_request", handle_async_request)


# --- the two I/O edges ---------------------------------------------------------------------


def _incoming(request: Any) -> IncomingRequest:
    return IncomingRequest(
        method=request.method,
        url=str(request.url),
        headers=_header_items(request.headers),
        content=request.content,
    )


def _header_items(headers: Any) -> list[tuple[str, str]]:
    """`headers.multi_items()`, with the encoding worked out once instead of per header
    (what `multi_items` costs for a typical SDK request: ~12 µs of the replay path)."""
    encoding = headers.encoding
    return [(key.lower().decode(encoding), value.decode(encoding)) for key, value in headers.raw]


def _add_headers(request: Any, decision: Passthrough) -> None:
    if decision.headers and TEST_ID_HEADER not in request.headers:
        for name, value in decision.headers:
            request.headers[name] = value


def _handle_sync(
    session: Session, streams: _Streams, original: Callable[..., Any], self: Any, request: Any
) -> Any:
    request.read()
    decision = session.decide(_incoming(request))
    if isinstance(decision, (Replay, Miss)):
        plan = decision.plan()
        if plan.hang is not None:
            plan.hang.wait(_read_timeout(request))
        elif plan.delays:
            pacing.sleep(plan.delays[0])
        return streams.response(plan, request, is_async=False)
    if isinstance(decision, Passthrough):
        _add_headers(request, decision)
    with adapter_io():
        if not isinstance(decision, Record):
            response = original(self, request)
            session.live_status(decision, response.status_code, response.headers.get)
            return response
        started = time.monotonic()
        try:
            response = original(self, request)
        except streams.module.TransportError as exc:
            session.record(decision.prep, LiveExchange(None, [], [], exception=exc))
            raise
    return streams.recording(response, session, decision.prep, started, is_async=False)


async def _handle_async(
    session: Session, streams: _Streams, original: Callable[..., Any], self: Any, request: Any
) -> Any:
    await request.aread()
    decision = session.decide(_incoming(request))
    if isinstance(decision, (Replay, Miss)):
        plan = decision.plan()
        if plan.hang is not None:
            await plan.hang.await_(_read_timeout(request))
        elif plan.delays:
            await pacing.asleep(plan.delays[0])
        return streams.response(plan, request, is_async=True)
    if isinstance(decision, Passthrough):
        _add_headers(request, decision)
    with adapter_io():
        if not isinstance(decision, Record):
            response = await original(self, request)
            session.live_status(decision, response.status_code, response.headers.get)
            return response
        started = time.monotonic()
        try:
            response = await original(self, request)
        except streams.module.TransportError as exc:
            await session.arecord(decision.prep, LiveExchange(None, [], [], exception=exc))
            raise
    return streams.recording(response, session, decision.prep, started, is_async=True)


def _read_timeout(request: Any) -> float | None:
    """The client's own read timeout for this request (None: it waits forever)."""
    timeout = request.extensions.get("timeout") or {}
    value = timeout.get("read")
    return float(value) if isinstance(value, (int, float)) else None


# --- streams -------------------------------------------------------------------------------


class _Streams:
    """Replay and recording byte streams for one httpx-like module."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        sync_base: type = module.SyncByteStream
        async_base: type = module.AsyncByteStream
        self.replay_sync = type("ReplayStream", (_ReplayStream, sync_base), {})
        self.replay_async = type("AsyncReplayStream", (_AsyncReplayStream, async_base), {})
        self.tee_sync = type("RecordingStream", (_RecordingStream, sync_base), {})
        self.tee_async = type("AsyncRecordingStream", (_AsyncRecordingStream, async_base), {})

    def exception(self, plan: ReplayPlan, request: Any) -> BaseException:
        name = (None if plan.error_kind is None else error_class(plan.error_kind)) or (
            (plan.exception_type or "TransportError").rsplit(".", 1)[-1]
        )
        cls = getattr(self.module, name, None)
        if not (isinstance(cls, type) and issubclass(cls, self.module.TransportError)):
            cls = self.module.TransportError
        exc: BaseException = cls(plan.exception_message, request=request)
        return exc

    def response(self, plan: ReplayPlan, request: Any, *, is_async: bool) -> Any:
        if plan.status is None:
            raise self.exception(plan, request)
        exc = self.exception(plan, request) if plan.broken else None
        extensions = {"http_version": b"HTTP/1.1", "hashreplay": "replayed"}
        delays = plan.delays[1:]
        if not plan.is_streaming and exc is None and not delays:
            # bytes in hand: a Response built from content is read eagerly, which spares
            # the client the chunk-by-chunk read and decode of a stream (~50 µs a call)
            return self.module.Response(
                plan.status,
                headers=plan.headers,
                content=b"".join(plan.chunks),
                request=request,
                extensions=extensions,
            )
        chunks = plan.chunks
        if exc is None and not plan.delays and len(chunks) > 1:
            # an instant stream in one piece: a client reads its events from one chunk as
            # from many (HTTP promises no boundaries), at a third of the cost for a
            # 50-event answer; a paced or broken stream keeps its chunks
            chunks = [b"".join(chunks)]
        stream_cls = self.replay_async if is_async else self.replay_sync
        return self.module.Response(
            plan.status,
            headers=plan.headers,
            stream=stream_cls(chunks, exc, delays),
            request=request,
            extensions=extensions,
        )

    def recording(
        self, response: Any, session: Session, prep: Prepared, started: float, *, is_async: bool
    ) -> Any:
        tee = _Tee(session, prep, response, self.module, started)
        stream_cls = self.tee_async if is_async else self.tee_sync
        response.stream = stream_cls(response.stream, tee)
        return response


class _ReplayStream:
    def __init__(
        self, chunks: list[bytes], exc: BaseException | None, delays: tuple[float, ...] = ()
    ) -> None:
        self._chunks = chunks
        self._exc = exc
        self._delays = delays

    def __iter__(self) -> Iterator[bytes]:
        for i, chunk in enumerate(self._chunks):
            if i < len(self._delays):
                pacing.sleep(self._delays[i])
            yield chunk
        if self._exc is not None:
            raise self._exc

    def close(self) -> None:
        pass


class _AsyncReplayStream:
    def __init__(
        self, chunks: list[bytes], exc: BaseException | None, delays: tuple[float, ...] = ()
    ) -> None:
        self._chunks = chunks
        self._exc = exc
        self._delays = delays

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, chunk in enumerate(self._chunks):
            if i < len(self._delays):
                await pacing.asleep(self._delays[i])
            yield chunk
        if self._exc is not None:
            raise self._exc

    async def aclose(self) -> None:
        pass


class _Tee:
    """A live response's body on its way to the caller, recorded once it ends."""

    def __init__(
        self, session: Session, prep: Prepared, response: Any, module: Any, started: float
    ) -> None:
        self.session = session
        self.prep = prep
        self.module = module
        self.body = session.live_body(
            prep, response.status_code, response.headers.multi_items(), started=started
        )
        length = response.headers.get("content-length")
        self.length = int(length) if length and length.isdigit() else None
        self.received = 0

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        try:
            self.body.feed(chunk)
        except ValueError as exc:  # the bytes do not decode: as httpx itself would say
            raise self.module.DecodingError(str(exc)) from exc

    def exchange(self, exc: BaseException | None, *, closed: bool = False) -> LiveExchange | None:
        """`closed`: the client closed the response before its end (abandoned, unless every
        byte a content-length promised had arrived)."""
        with contextlib.suppress(ValueError):  # a truncated compressed stream: keep what decoded
            self.body.tail()
        abandoned = closed and (self.length is None or self.received < self.length)
        return self.body.exchange(exc, abandoned=abandoned)


class _RecordingStream:
    def __init__(self, inner: Any, tee: _Tee) -> None:
        self._inner = inner
        self._tee = tee

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._inner)
        while True:
            try:  # a read only: a GeneratorExit at the yield is the caller closing the stream
                chunk = next(chunks, None)
                if chunk is None:
                    break
                self._tee.feed(chunk)
            except BaseException as exc:  # a Ctrl-C in the read is no answer: not recorded
                self._finish(exc)
                raise
            yield chunk
        self._finish(None)

    def _finish(self, exc: BaseException | None, *, closed: bool = False) -> None:
        exchange = self._tee.exchange(exc, closed=closed)
        if exchange is not None:
            self._tee.session.record(self._tee.prep, exchange)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._finish(None, closed=True)


class _AsyncRecordingStream:
    def __init__(self, inner: Any, tee: _Tee) -> None:
        self._inner = inner
        self._tee = tee

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self._inner)
        while True:
            try:  # a read only: a GeneratorExit at the yield is the caller closing the stream
                chunk = await anext(chunks, None)
                if chunk is None:
                    break
                self._tee.feed(chunk)
            except BaseException as exc:  # a cancelled read is no answer: not recorded
                await self._finish(exc)
                raise
            yield chunk
        await self._finish(None)

    async def _finish(self, exc: BaseException | None, *, closed: bool = False) -> None:
        exchange = self._tee.exchange(exc, closed=closed)
        if exchange is not None:
            await self._tee.session.arecord(self._tee.prep, exchange)

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            await self._finish(None, closed=True)
