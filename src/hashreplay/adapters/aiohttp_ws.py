"""aiohttp's WebSocket client (`ClientSession.ws_connect`) recorded and replayed
(docs/design.md §17, "WebSockets"; docs/usage.md, "Realtime APIs").

The seam is `ClientSession._ws_connect`, the coroutine every `ws_connect(...)` awaits (its
context manager stays aiohttp's own, so `async with session.ws_connect(...)` and
`await session.ws_connect(...)` both go through it). The engine decides, per handshake:

- **replay**: no socket is opened; `ReplayedWebSocket` answers from the recording through
  `engine.frame_replay.FrameReplay` (the causal gate, pacing, a sent frame compared with the
  recorded one, the recorded close or cut, bounded waits);
- **record**: the real connection is opened and wrapped in `RecordingWebSocket`, which hands
  every frame the caller sends or receives to the connection's `engine.frame_log.FrameLog`
  and writes the recording when the connection ends;
- **live / passthrough**: aiohttp's own connection, untouched (a passthrough handshake
  carries the test id header).

Both wrappers are `ClientWebSocketResponse`s to the caller (`isinstance` holds; the typed
receive helpers, `send_json`, iteration and the context manager are aiohttp's own code over
the `send_frame` / `receive` / `close` overridden here). Only I/O lives here: every decision
is the engine's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import ClientWebSocketResponse, WSMessage, WSMsgType
from aiohttp.client_ws import ClientWSTimeout
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import Patches
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.context import adapter_io
from hashreplay.core.errors import BodyTooLarge, ReplayFailure
from hashreplay.core.format import FrameType
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.frame_log import FrameLog
from hashreplay.engine.frame_replay import (
    ABNORMAL_CLOSURE,
    WAIT_LIMIT_S,
    Closed,
    Cut,
    Deliver,
    Failed,
    FrameReplay,
    Wait,
)
from hashreplay.engine.replay import Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session

_patches = Patches("aiohttp_ws")

#: aiohttp's answer to a receive on a closed connection (`WS_CLOSED_MESSAGE`)
_CLOSED = WSMessage(WSMsgType.CLOSED, None, None)


def install(session: Session) -> None:
    """Route every aiohttp `ws_connect` through `session` (idempotent: a second call only
    swaps the session)."""
    with _patches.lock:
        if not _patches.attach(session):
            return
        original = aiohttp.ClientSession._ws_connect
        _patches.replace(aiohttp.ClientSession, "_ws_connect", _wrap(original))


def uninstall() -> None:
    """Restore `ClientSession._ws_connect` and forget the session."""
    _patches.restore()


def is_installed() -> bool:
    return _patches.patched


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _ws_connect(self: aiohttp.ClientSession, url: Any, **kwargs: Any) -> Any:
        session = _state.active_session()
        if session is None:
            return await original(self, url, **kwargs)
        target = _target_url(self, url, kwargs.get("params"))
        headers = CIMultiDict(self.headers)
        headers.update(CIMultiDict(kwargs.get("headers") or {}))
        decision = session.decide_connection(str(target), list(headers.items()))
        if isinstance(decision, Miss):
            raise decision.error
        if isinstance(decision, Replay):
            return _replayed(session, decision, target, headers, kwargs)
        if isinstance(decision, Passthrough) and TEST_ID_HEADER not in headers:
            for name, value in decision.headers:
                headers[name] = value
            kwargs["headers"] = headers
        if not isinstance(decision, Record):
            try:
                with adapter_io():
                    live = await original(self, url, **kwargs)
            except aiohttp.WSServerHandshakeError as exc:
                session.live_status(decision, exc.status)  # the test's `calls`
                raise
            session.live_status(decision, live._response.status)
            return live
        return await _recorded(
            session,
            decision,
            original=original,
            client=self,
            url=url,
            target=str(target),
            kwargs=kwargs,
        )

    _ws_connect.__wrapped__ = original  # type: ignore[attr-defined]
    return _ws_connect


def _target_url(client: aiohttp.ClientSession, url: Any, params: Any) -> URL:
    """The URL the handshake goes to, as `ClientSession` builds it (its `base_url`, the
    `params=` query)."""
    built = client._build_url(url)
    return built.extend_query(params) if params else built


def _timeouts(kwargs: dict[str, Any]) -> ClientWSTimeout:
    timeout = kwargs.get("timeout")
    chosen = timeout if isinstance(timeout, ClientWSTimeout) else ClientWSTimeout()
    receive = kwargs.get("receive_timeout")
    if receive is not None:
        chosen = ClientWSTimeout(ws_receive=receive, ws_close=chosen.ws_close)
    return chosen


# --- record ------------------------------------------------------------------------------


async def _recorded(
    session: Session,
    decision: Record,
    *,
    original: Callable[..., Any],
    client: aiohttp.ClientSession,
    url: Any,
    target: str,
    kwargs: dict[str, Any],
) -> ClientWebSocketResponse:
    """Dial the real connection and wrap it; a handshake the server refused (a 401) is its
    recorded answer, one that got no answer (refused, DNS, TLS) is not recorded."""
    log = session.frame_log(decision, target, started=time.monotonic())
    try:
        with adapter_io():
            live = await original(client, url, **kwargs)
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status:
            log.answered(exc.status, list((exc.headers or {}).items()))
        await session.arecord_connection(log)
        raise
    except BaseException:
        await session.arecord_connection(log)  # no answer: counted, nothing written
        raise
    response = live._response
    log.answered(response.status, list(response.headers.items()))
    return RecordingWebSocket(live, log, session)


class RecordingWebSocket(ClientWebSocketResponse):
    """A live `ClientWebSocketResponse` whose frames each way feed the connection's log;
    the recording is written when the connection ends (a close either way, a cut)."""

    def __init__(self, live: ClientWebSocketResponse, log: FrameLog, session: Session) -> None:
        # aiohttp's state stays on `live`; this object only forwards
        self._live = live
        self._log = log
        self._session = session
        self._written = False

    # --- what aiohttp's properties say, from the live connection -----------------------

    @property
    def closed(self) -> bool:
        return self._live.closed

    @property
    def close_code(self) -> int | None:
        return self._live.close_code

    @property
    def protocol(self) -> str | None:
        return self._live.protocol

    @property
    def compress(self) -> int:
        return self._live.compress

    @property
    def client_notakeover(self) -> bool:
        return self._live.client_notakeover

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._live.get_extra_info(name, default)

    def exception(self) -> BaseException | None:
        return self._live.exception()

    async def ping(self, message: bytes = b"") -> None:
        await self._live.ping(message)

    async def pong(self, message: bytes = b"") -> None:
        await self._live.pong(message)

    # --- the frames --------------------------------------------------------------------

    async def send_frame(
        self, message: bytes, opcode: WSMsgType, compress: int | None = None
    ) -> None:
        if opcode is WSMsgType.TEXT:
            await self.send_str(message.decode("utf-8"), compress)
        elif opcode is WSMsgType.BINARY:
            await self.send_bytes(message, compress)
        else:
            await self._live.send_frame(message, opcode, compress)

    async def send_str(self, data: str, compress: int | None = None) -> None:
        await self._live.send_str(data, compress)
        await self._logged(self._log.sent, FrameType.TEXT, data)

    async def send_bytes(self, data: bytes, compress: int | None = None) -> None:
        await self._live.send_bytes(data, compress)
        await self._logged(self._log.sent, FrameType.BINARY, bytes(data))

    async def receive(self, timeout: float | None = None) -> Any:
        msg = await self._live.receive(timeout)
        kind = msg.type
        if kind is WSMsgType.TEXT or kind is WSMsgType.BINARY:
            payload = msg.data
            if kind is WSMsgType.TEXT and isinstance(payload, bytes):  # decode_text=False
                payload = payload.decode("utf-8")
            ftype = FrameType.TEXT if kind is WSMsgType.TEXT else FrameType.BINARY
            await self._logged(self._log.received, ftype, payload)
            self._log.delivered()  # the caller takes it now: its place in the file
        elif kind is WSMsgType.CLOSE:
            self._log.closed(msg.data, msg.extra or "")
            await self._write()
        elif kind is WSMsgType.CLOSED or kind is WSMsgType.ERROR:
            if self._live.close_code == ABNORMAL_CLOSURE or kind is WSMsgType.ERROR:
                self._log.cut(self._live.exception())
            else:
                self._log.closed(self._live.close_code, "")
            await self._write()
        return msg

    async def close(self, *, code: int = 1000, message: bytes = b"") -> bool:
        if not self._written and not self._live.closed:
            self._log.closed(code, message.decode("utf-8", "replace"), sent=True)
        try:
            return await self._live.close(code=code, message=message)
        finally:
            await self._write()

    async def _logged(
        self, feed: Callable[[FrameType, Any], None], kind: FrameType, data: Any
    ) -> None:
        """Feed the log; past `max_body_bytes` the live connection is closed (the test
        fails already, nothing is recorded) and `BodyTooLarge` goes to the caller."""
        if self._written:
            return
        try:
            feed(kind, data)
        except BodyTooLarge:
            self._written = True
            await self._session.arecord_connection(self._log)  # nothing written: too large
            with contextlib.suppress(Exception):
                await self._live.close()
            raise

    async def _write(self) -> None:
        if not self._written:
            self._written = True
            await self._session.arecord_connection(self._log)


# --- replay ------------------------------------------------------------------------------


def _replayed(
    session: Session,
    decision: Replay,
    target: URL,
    headers: CIMultiDict[str],
    kwargs: dict[str, Any],
) -> ClientWebSocketResponse:
    """The recorded connection, or aiohttp's `WSServerHandshakeError` for a handshake the
    server refused when it was recorded."""
    response = decision.response
    if response.status != 101:
        info = aiohttp.RequestInfo(target, "GET", CIMultiDictProxy(headers), target)
        raise aiohttp.WSServerHandshakeError(
            info,
            (),
            message="Invalid response status",
            status=response.status,
            headers=CIMultiDict(response.headers),
        )
    replay = session.connection_replay(decision)
    protocol = response.headers.get("sec-websocket-protocol")
    return ReplayedWebSocket(
        replay,
        timeouts=_timeouts(kwargs),
        autoclose=bool(kwargs.get("autoclose", True)),
        decode_text=bool(kwargs.get("decode_text", True)),
        protocol=protocol,
    )


class ReplayedWebSocket(ClientWebSocketResponse):
    """A `ClientWebSocketResponse` with no socket behind it: what the recording says,
    frame by frame (`FrameReplay` decides; this object only waits and speaks aiohttp)."""

    def __init__(
        self,
        replay: FrameReplay,
        *,
        timeouts: ClientWSTimeout,
        autoclose: bool,
        decode_text: bool,
        protocol: str | None,
    ) -> None:
        self._replay = replay
        self._timeout = timeouts
        self._autoclose = autoclose
        self._decode_text = decode_text
        self._protocol = protocol
        self._closed = False
        self._close_code: int | None = None
        self._exception: BaseException | None = None
        self._waiting = False
        self._woken: asyncio.Event | None = None
        self._listening = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def close_code(self) -> int | None:
        return self._close_code

    @property
    def protocol(self) -> str | None:
        return self._protocol

    @property
    def compress(self) -> int:
        return 0

    @property
    def client_notakeover(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # no transport

    def exception(self) -> BaseException | None:
        return self._exception

    async def ping(self, message: bytes = b"") -> None:
        self._check_open()

    async def pong(self, message: bytes = b"") -> None:
        self._check_open()

    # --- the client sends --------------------------------------------------------------

    async def send_frame(
        self, message: bytes, opcode: WSMsgType, compress: int | None = None
    ) -> None:
        if opcode is WSMsgType.TEXT:
            await self._send(FrameType.TEXT, message.decode("utf-8"))
        elif opcode is WSMsgType.BINARY:
            await self._send(FrameType.BINARY, bytes(message))
        elif opcode is WSMsgType.CLOSE:
            await self.close()
        else:
            self._check_open()

    async def send_str(self, data: str, compress: int | None = None) -> None:
        if not isinstance(data, str):
            raise TypeError(f"data argument must be str ({type(data)!r})")
        await self._send(FrameType.TEXT, data)

    async def send_bytes(self, data: bytes, compress: int | None = None) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be byte-ish ({type(data)!r})")
        await self._send(FrameType.BINARY, bytes(data))

    async def _send(self, kind: FrameType, payload: str | bytes) -> None:
        self._check_open()
        failure = self._replay.send(kind, payload)
        if failure is not None:
            self._exception = failure
            raise failure

    def _check_open(self) -> None:
        """aiohttp's writer refuses a frame once the connection is closing."""
        if self._closed:
            raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")

    async def close(self, *, code: int = 1000, message: bytes = b"") -> bool:
        if self._closed:
            return False
        self._closed = True
        self._replay.close(code, message.decode("utf-8", "replace"))
        if self._close_code is None:
            self._close_code = code
        return True

    # --- the client receives -----------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Any:
        if self._waiting:
            raise RuntimeError("Concurrent call to receive() is not allowed")
        if self._closed:
            return _CLOSED
        self._waiting = True
        try:
            return await self._next(timeout or self._timeout.ws_receive)
        finally:
            self._waiting = False

    async def _next(self, bound: float | None) -> Any:
        while True:
            woken = self._arm()  # before the step: a send from another thread wakes it
            step = self._replay.next_step()
            if isinstance(step, Deliver):
                await pacing.asleep(step.delay)
                kind = WSMsgType.TEXT if step.frame.type is FrameType.TEXT else WSMsgType.BINARY
                data = step.payload
                if kind is WSMsgType.TEXT and not self._decode_text and isinstance(data, str):
                    data = data.encode("utf-8")
                return WSMessage(kind, data, None)
            if isinstance(step, Wait):
                await self._wait(woken, step, bound)
                continue
            if isinstance(step, Closed):
                await pacing.asleep(step.delay)
                if step.by_client:
                    self._closed = True
                    return _CLOSED
                self._close_code = step.code
                if self._autoclose:
                    await self.close(code=step.code or 1000)
                return WSMessage(WSMsgType.CLOSE, step.code, step.reason)
            if isinstance(step, Cut):
                await pacing.asleep(step.delay)
                self._closed = True
                self._close_code = ABNORMAL_CLOSURE
                return _CLOSED
            assert isinstance(step, Failed)
            self._closed = True
            self._close_code = ABNORMAL_CLOSURE
            self._exception = step.failure
            raise step.failure

    def _arm(self) -> asyncio.Event:
        """A fresh event the replay sets when the client sends or closes (the callback is
        registered once per connection, from the loop that receives)."""
        loop = asyncio.get_running_loop()
        event = self._woken = asyncio.Event()
        if not self._listening:
            self._listening = True

            def changed() -> None:
                current = self._woken
                if current is not None:
                    loop.call_soon_threadsafe(current.set)

            self._replay.on_change(changed)
        return event

    async def _wait(self, woken: asyncio.Event, step: Wait, bound: float | None) -> None:
        """Wait for the client to send (or close); the caller's `receive` timeout raises
        `TimeoutError` as aiohttp does, and past `WAIT_LIMIT_S` the test fails naming
        the frame it waited for."""
        limit = WAIT_LIMIT_S if bound is None else min(bound, WAIT_LIMIT_S)
        try:
            await asyncio.wait_for(woken.wait(), limit)
        except asyncio.TimeoutError:
            if bound is not None and bound < WAIT_LIMIT_S:
                self._close_code = ABNORMAL_CLOSURE
                raise
            failure: ReplayFailure = self._replay.waited_too_long(step, limit)
            self._exception = failure
            raise failure from None
