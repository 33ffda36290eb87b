"""The `websockets` adapter (docs/design.md §17, "WebSockets"): every client connection of the
`websockets` library, asyncio and sync, recorded and replayed through the engine.

The seam is the step every `connect` shares, not the `connect` name: the asyncio
`connect.connect` method (the openai SDK subclasses `connect` at import time; its subclass
inherits it) and the sync `reconnect.open_connection` (which `sync.client.connect` builds and
calls). Both are patched on their classes, reversibly (`_shared.Patches`).

- Record modes dial the real server and feed the engine's `FrameLog` from the connection's
  own sans-I/O protocol (its `recv_frame` and `send_*` on that one instance, hooked before
  the first byte is read): every frame, fragments joined into messages, close frames both
  ways. Frames past `max_body_bytes` fail the connection with close code 1009 (the test
  fails, nothing is recorded). The recording is written when the connection ends.
- Replay opens no network connection: the library's own `ClientConnection` is handed an
  in-process peer (`_Peer`) that answers the handshake and speaks WebSocket frames from the
  engine's `FrameReplay` (the causal gate, pacing, the comparison of each frame the client
  sends). The asyncio client gets an in-memory transport; the sync client, which selects on
  a real file descriptor, gets one end of a local `socket.socketpair()` (no address, no
  network), the other end served by a thread. So `recv(timeout=)`, iteration, `close_code`,
  `ConnectionClosedOK` / `ConnectionClosedError` are the library's own behaviour. A receive
  with no timeout of its own waits at most `WAIT_LIMIT_S` for a frame the recording holds
  back (or never has): the test then fails naming what it waited for, and the connection
  closes with 1011. A miss closes it with 1008.

The legacy client (`websockets.legacy.client`, `websockets.client.connect`), where present,
is patched at `Connect.__await_impl__` once the code imports it: replay hands its protocol
the same in-memory peer; recording logs its messages as the client sends and reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import websockets.asyncio.client as aclient
import websockets.sync.client as sclient
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.frames import Opcode
from websockets.http11 import Response
from websockets.protocol import Protocol, Side, State
from websockets.utils import accept_key

from hashreplay.adapters import _shared
from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import Patches, reason_phrase
from hashreplay.core.bodies import decode_body
from hashreplay.core.context import adapter_io, in_adapter_io
from hashreplay.core.errors import BodyTooLarge, ReplayFailure
from hashreplay.core.format import FrameType, RecordedResponse
from hashreplay.engine.frame_log import SWITCHING_PROTOCOLS, FrameLog
from hashreplay.engine.frame_replay import (
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

_patches = Patches("websockets")

#: RFC 6455 close codes the adapter sends
_POLICY_VIOLATION = 1008
_MESSAGE_TOO_BIG = 1009
_INTERNAL_ERROR = 1011


def install(session: Session) -> None:
    """Route every `websockets` client connection through `session` (idempotent)."""
    with _patches.lock:
        if not _patches.attach(session):
            return
        _patches.replace(aclient.connect, "connect", _async_connect(aclient.connect.connect))
        original = sclient.reconnect.open_connection
        _patches.replace(sclient.reconnect, "open_connection", _sync_open(original))
        # the legacy client warns when imported: patched only once the code imports it
        _shared.when_imported("websockets.legacy.client", _install_legacy)


def _install_legacy(module: Any) -> None:
    with _patches.lock:
        if _patches.installed and _state.active_session() is not None:
            original = module.Connect.__await_impl__
            _patches.replace(module.Connect, "__await_impl__", _legacy_connect(original))


def uninstall() -> None:
    _patches.restore()


def is_installed() -> bool:
    return _patches.patched


# --- the decision ------------------------------------------------------------------------


def _headers(extra: Any) -> list[tuple[str, str]]:
    """The handshake's own headers (`additional_headers`) as pairs."""
    if extra is None:
        return []
    if isinstance(extra, Headers):
        return list(extra.raw_items())
    items = extra.items() if hasattr(extra, "items") else extra
    return [(str(k), str(v)) for k, v in items]


def _refused(response: RecordedResponse) -> InvalidStatus:
    """A recorded handshake answer other than 101, as the library raises it."""
    body = decode_body(response.body, response.body_encoding) if response.body else b""
    status = response.status or 500
    headers = Headers(list(response.headers.items()))
    return InvalidStatus(Response(status, reason_phrase(status), headers, body))


class MissedConnection(ConnectionRefusedError):
    """A replayed handshake with no recording (the test fails with the miss report): a
    connection error, which SDKs report as one."""


# --- record: the live connection feeds the log ---------------------------------------------


def _hook_protocol(protocol: Protocol, log: FrameLog) -> None:
    """Feed `log` from one connection's sans-I/O protocol: the frames it parses and the
    ones it is asked to send, fragments joined into messages."""
    incoming: list[Any] = [None, []]  # kind, parts
    outgoing: list[Any] = [None, []]
    recv_frame = protocol.recv_frame

    def joined(state: list[Any], kind: FrameType | None, data: bytes, fin: bool) -> bytes | None:
        if kind is not None:
            state[0], state[1] = kind, []
        state[1].append(bytes(data))
        if not fin:
            return None
        return b"".join(state[1])

    def add(
        state: list[Any], feed: Callable[[FrameType, Any], None], op: Opcode, data: bytes, fin: bool
    ) -> None:
        kind = (
            FrameType.TEXT
            if op is Opcode.TEXT
            else FrameType.BINARY
            if op is Opcode.BINARY
            else None
        )
        whole = joined(state, kind, data, fin)
        if whole is not None and state[0] is not None:
            payload = whole.decode("utf-8", "replace") if state[0] is FrameType.TEXT else whole
            feed(state[0], payload)

    def on_frame(frame: Any) -> None:
        recv_frame(frame)
        if protocol.state is State.CONNECTING or log.too_large:
            return
        try:
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                add(incoming, log.received, frame.opcode, frame.data, frame.fin)
            elif frame.opcode is Opcode.CLOSE:
                close = protocol.close_rcvd
                log.closed(
                    None if close is None else close.code, "" if close is None else close.reason
                )
        except BodyTooLarge:
            with contextlib.suppress(Exception):
                protocol.fail(_MESSAGE_TOO_BIG, "hashreplay: frames over max_body_bytes")

    def sending(op: Opcode, original: Callable[..., None]) -> Callable[..., None]:
        def send(data: Any, fin: bool = True) -> None:
            original(data, fin)
            if log.too_large:
                return
            try:
                add(outgoing, log.sent, op, data, fin)
            except BodyTooLarge:
                with contextlib.suppress(Exception):
                    protocol.fail(_MESSAGE_TOO_BIG, "hashreplay: frames over max_body_bytes")
                raise

        return send

    send_close = protocol.send_close

    def on_close(code: int | None = None, reason: str = "") -> None:
        send_close(code, reason)
        if not log.too_large:
            log.closed(code, reason, sent=True)

    protocol.recv_frame = on_frame  # type: ignore[method-assign]
    protocol.send_text = sending(Opcode.TEXT, protocol.send_text)  # type: ignore[method-assign]
    protocol.send_binary = sending(Opcode.BINARY, protocol.send_binary)  # type: ignore[method-assign]
    protocol.send_continuation = sending(Opcode.CONT, protocol.send_continuation)  # type: ignore[method-assign]
    protocol.send_close = on_close  # type: ignore[method-assign]


def _hook_reads(connection: Any, log: FrameLog) -> None:
    """Tell `log` each time the client takes a message (`recv`, iteration, `recv_streaming`:
    all read through the connection's message assembler), so the frame is placed where the
    client read it (`FrameLog.delivered`)."""
    messages = connection.recv_messages
    get, get_iter = messages.get, messages.get_iter
    if asyncio.iscoroutinefunction(get):

        async def aget(*args: Any, **kwargs: Any) -> Any:
            message = await get(*args, **kwargs)
            log.delivered()
            return message

        async def aget_iter(*args: Any, **kwargs: Any) -> Any:
            log.delivered()
            async for piece in get_iter(*args, **kwargs):
                yield piece

        messages.get, messages.get_iter = aget, aget_iter
        return

    def sget(*args: Any, **kwargs: Any) -> Any:
        message = get(*args, **kwargs)
        log.delivered()
        return message

    def sget_iter(*args: Any, **kwargs: Any) -> Any:
        log.delivered()
        yield from get_iter(*args, **kwargs)

    messages.get, messages.get_iter = sget, sget_iter


def _ended(session: Session, protocol: Protocol, log: FrameLog) -> None:
    """The live connection is over: a close frame either way was logged; else it was cut."""
    if protocol.close_rcvd is None and protocol.close_sent is None:
        log.cut()
    session.record_connection(log)


def _answered(log: FrameLog, connection: Any) -> None:
    response = connection.response
    log.answered(response.status_code, list(response.headers.raw_items()))


def _not_answered(session: Session, log: FrameLog, exc: BaseException) -> None:
    """The handshake failed: a refusal (`InvalidStatus`) is an answer, recorded; anything
    else got none and is not (docs/design.md, "Only answers are recorded")."""
    if isinstance(exc, InvalidStatus):
        response = exc.response
        log.answered(
            response.status_code, list(response.headers.raw_items()), bytes(response.body or b"")
        )
    log.cut(exc)
    session.record_connection(log)


# --- replay: an in-process peer ----------------------------------------------------------


class _Out(NamedTuple):
    """What the peer hands the client next: bytes after `delay` s; `eof` / `lost`: it
    ends the stream (a server's half close / a cut)."""

    delay: float
    data: bytes = b""
    eof: bool = False
    lost: BaseException | None = None


class _Peer:
    """The server end of a replayed connection, sans-I/O: answers the handshake and turns
    the engine's `FrameReplay` steps into the bytes a server would send, and the client's
    bytes into `send` / `close` calls. Thread-safe (the sync client's peer runs in a
    thread while the client's thread may fail the connection)."""

    def __init__(self, replay: FrameReplay, response: RecordedResponse) -> None:
        self.replay = replay
        self.response = response
        self.protocol = Protocol(Side.SERVER, state=State.OPEN, max_size=None)
        self.lock = threading.RLock()
        self.waiting: Wait | None = None
        self.over = False

    def handshake(self, key: str, offered: list[str]) -> list[_Out]:
        lines = [
            "HTTP/1.1 101 Switching Protocols",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Accept: {accept_key(key)}",
        ]
        chosen = self.response.headers.get("sec-websocket-protocol")
        if chosen and chosen in offered:
            lines.append(f"Sec-WebSocket-Protocol: {chosen}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return [_Out(0.0, head), *self.pump()]

    def client_data(self, data: bytes) -> list[_Out]:
        with self.lock:
            self.waiting = None
            self.protocol.receive_data(data)
            out: list[_Out] = []
            for event in self.protocol.events_received():
                op = getattr(event, "opcode", None)
                if op in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                    self._message(event)
                elif op is Opcode.CLOSE:
                    close = self.protocol.close_rcvd
                    self.replay.close(
                        None if close is None else close.code, "" if close is None else close.reason
                    )
            out.extend(self._sent())
            if self.protocol.state is State.CLOSED or self.protocol.close_rcvd is not None:
                self.over = True
                return [*out, _Out(0.0, lost=None, eof=True)]
            return [*out, *self.pump()]

    _parts: list[bytes]
    _kind: FrameType | None = None

    def _message(self, event: Any) -> None:
        if event.opcode is not Opcode.CONT:
            self._kind = FrameType.TEXT if event.opcode is Opcode.TEXT else FrameType.BINARY
            self._parts = []
        self._parts.append(bytes(event.data))
        if not event.fin or self._kind is None:
            return
        whole = b"".join(self._parts)
        payload = whole.decode("utf-8", "replace") if self._kind is FrameType.TEXT else whole
        if self.replay.send(self._kind, payload) is not None:  # a miss: noted on the test
            self._close(_POLICY_VIOLATION, "hashreplay: replay miss; see the test's failure")

    def pump(self) -> list[_Out]:
        """The frames the recording lets through now, up to the first wait or the end."""
        out: list[_Out] = []
        with self.lock:
            while not self.over and self.protocol.state is State.OPEN:
                step = self.replay.next_step()
                if isinstance(step, Deliver):
                    if isinstance(step.payload, str):
                        self.protocol.send_text(step.payload.encode("utf-8"))
                    else:
                        self.protocol.send_binary(step.payload)
                    out.extend(self._sent(step.delay))
                elif isinstance(step, Wait):
                    self.waiting = step
                    break
                elif isinstance(step, Closed):
                    if not step.by_client:
                        self._close(step.code, step.reason)
                        out.extend(self._sent(step.delay))
                    break
                elif isinstance(step, Cut):
                    self.over = True
                    out.append(_Out(step.delay, lost=ConnectionResetError(step.message)))
                    break
                else:
                    assert isinstance(step, Failed)
                    self._close(_INTERNAL_ERROR, "hashreplay: see the test's failure")
                    out.extend(self._sent())
                    break
        return out

    def fail(self, failure: ReplayFailure) -> list[_Out]:
        """A receive waited too long: the connection closes with 1011."""
        with self.lock:
            self.waiting = None
            if self.protocol.state is not State.OPEN:
                return []
            self._close(_INTERNAL_ERROR, "hashreplay: " + str(failure).split(": ", 2)[-1])
            return self._sent()

    def _close(self, code: int | None, reason: str) -> None:
        encoded = reason.encode("utf-8")[:120].decode("utf-8", "ignore")
        if code is None:
            self.protocol.send_close()
        else:
            self.protocol.send_close(code, encoded)

    def _sent(self, delay: float = 0.0) -> list[_Out]:
        out = []
        for data in self.protocol.data_to_send():
            out.append(_Out(delay, data) if data else _Out(delay, eof=True))
            delay = 0.0
        return out


def _replay_parts(session: Session, decision: Replay) -> tuple[FrameReplay, _Peer]:
    replay = session.connection_replay(decision)
    return replay, _Peer(replay, decision.response)


def _request_parts(head: bytes) -> tuple[str, list[str]]:
    """The key and the offered subprotocols of a handshake request, from its bytes (the
    new and the legacy client alike)."""
    key, offered = "", list[str]()
    for line in head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "sec-websocket-key":
            key = value.strip()
        elif name.strip().lower() == "sec-websocket-protocol":
            offered.extend(p.strip() for p in value.split(",") if p.strip())
    return key, offered


def _offered(connection: Any) -> list[str]:
    header = connection.request.headers.get("Sec-WebSocket-Protocol", "") or ""
    return [p.strip() for p in header.split(",") if p.strip()]


# --- asyncio ---------------------------------------------------------------------------


class _Transport(asyncio.Transport):
    """The in-memory transport of a replayed asyncio connection: what the client writes
    goes to its peer; what the peer answers is fed to the client on its loop, in order,
    each piece after its delay."""

    def __init__(self, peer: _Peer, connection: Any, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.peer = peer
        self.connection = connection
        self.loop = loop
        self.queue: deque[_Out] = deque()
        self.busy = False
        self.closing = False
        self.lost = False
        self.shaken = False

    # what the client does
    def write(self, data: Any) -> None:
        if self.lost:
            return
        if not self.shaken:
            self.shaken = True
            key, offered = _request_parts(bytes(data))
            self.enqueue(self.peer.handshake(key, offered))
            return
        self.enqueue(self.peer.client_data(bytes(data)))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True
        self.loop.call_soon(self._lose, None)

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self.lost

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    # what the peer answers
    def enqueue(self, outs: list[_Out]) -> None:
        self.queue.extend(outs)
        if not self.busy and self.queue:
            self.busy = True
            self.loop.call_soon(self._next)

    def _next(self) -> None:
        if not self.queue or self.lost:
            self.busy = False
            return
        out = self.queue[0]
        if out.delay > 0:
            self.queue[0] = out._replace(delay=0.0)
            self.loop.call_later(out.delay, self._next)
            return
        self.queue.popleft()
        if out.lost is not None or out.eof:
            self._lose(out.lost)
        elif out.data:
            self.connection.data_received(out.data)
        self.loop.call_soon(self._next)

    def _lose(self, exc: BaseException | None) -> None:
        if not self.lost:
            self.lost = True
            self.closing = True
            self.connection.connection_lost(exc)


def _bounded_async(connection: Any, peer: _Peer, transport: _Transport) -> None:
    """The connection's `recv` (and so its iteration) waits at most `WAIT_LIMIT_S` for a
    frame the recording holds back: the test then fails naming it (never a hang)."""
    recv = connection.recv

    async def bounded(decode: bool | None = None) -> Any:
        while True:
            try:
                return await asyncio.wait_for(recv(decode), WAIT_LIMIT_S)
            except TimeoutError:
                step = peer.waiting
                if step is None:
                    continue  # a paced frame is on its way
                failure = peer.replay.waited_too_long(step, WAIT_LIMIT_S)
                transport.enqueue(peer.fail(failure))

    connection.recv = bounded


def _async_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    async def connect(self: aclient.connect) -> aclient.ClientConnection:
        session = _state.active_session()
        if session is None or in_adapter_io():  # none, or the proxy's own upstream dial
            return await original(self)  # type: ignore[no-any-return]
        decision = session.decide_connection(self.uri, _headers(self.additional_headers))
        if isinstance(decision, Miss):
            raise MissedConnection(str(decision.error))
        if isinstance(decision, Replay):
            return await _async_replay(self, session, decision)
        if not isinstance(decision, Record):
            if isinstance(decision, Passthrough):
                self.additional_headers = Headers(
                    [*_headers(self.additional_headers), *decision.headers]
                )
            with adapter_io():
                live = await original(self)
            session.live_status(decision, live.response.status_code)
            return live  # type: ignore[no-any-return]
        log = session.frame_log(decision, self.uri, started=time.monotonic())
        factory = self.factory

        def hooked(uri: Any) -> Any:
            made = factory(uri)
            _hook_protocol(made.protocol, log)
            return made

        self.factory = hooked
        try:
            with adapter_io():
                connection = await original(self)
        except BaseException as exc:
            _not_answered(session, log, exc)
            raise
        finally:
            self.factory = factory
        _answered(log, connection)
        _hook_reads(connection, log)  # its reader exists once the connection is made
        connection.connection_lost_waiter.add_done_callback(
            lambda _: _ended(session, connection.protocol, log)
        )
        return connection  # type: ignore[no-any-return]

    connect.__wrapped__ = original  # type: ignore[attr-defined]
    return connect


async def _async_replay(
    self: aclient.connect, session: Session, decision: Replay
) -> aclient.ClientConnection:
    if decision.response.status != SWITCHING_PROTOCOLS:
        raise _refused(decision.response)
    _, peer = _replay_parts(session, decision)
    connection = self.factory(self.ws_uri)
    transport = _Transport(peer, connection, asyncio.get_running_loop())
    connection.connection_made(transport)
    await connection.handshake(self.additional_headers, self.user_agent_header)
    connection.start_keepalive()
    _bounded_async(connection, peer, transport)
    return connection


# --- sync ----------------------------------------------------------------------------------


def _sync_open(original: Callable[..., Any]) -> Callable[..., Any]:
    def open_connection(self: sclient.reconnect, deadline: Any) -> sclient.ClientConnection:
        session = _state.active_session()
        if session is None or in_adapter_io():  # none, or the proxy's own upstream dial
            return original(self, deadline)  # type: ignore[no-any-return]
        decision = session.decide_connection(self.uri, _headers(self.additional_headers))
        if isinstance(decision, Miss):
            raise MissedConnection(str(decision.error))
        if isinstance(decision, Replay):
            return _sync_replay(self, session, decision, deadline)
        if not isinstance(decision, Record):
            if isinstance(decision, Passthrough):
                self.additional_headers = Headers(
                    [*_headers(self.additional_headers), *decision.headers]
                )
            with adapter_io():
                live = original(self, deadline)
            session.live_status(decision, live.response.status_code)
            return live  # type: ignore[no-any-return]
        log = session.frame_log(decision, self.uri, started=time.monotonic())
        create = self.create_connection

        def hooked(sock: Any, protocol: Any, **kwargs: Any) -> Any:
            _hook_protocol(protocol, log)
            made = create(sock, protocol, **kwargs)
            close_socket = made.close_socket

            def closed() -> None:
                close_socket()
                if log.answered_at_all:  # else the handshake failed: recorded there
                    _ended(session, made.protocol, log)

            made.close_socket = closed  # type: ignore[method-assign]
            return made

        self.create_connection = hooked  # type: ignore[assignment]
        try:
            with adapter_io():
                connection = original(self, deadline)
        except BaseException as exc:
            _not_answered(session, log, exc)
            raise
        finally:
            self.create_connection = create
        _answered(log, connection)
        _hook_reads(connection, log)
        return connection  # type: ignore[no-any-return]

    open_connection.__wrapped__ = original  # type: ignore[attr-defined]
    return open_connection


def _sync_replay(
    self: sclient.reconnect, session: Session, decision: Replay, deadline: Any
) -> sclient.ClientConnection:
    if decision.response.status != SWITCHING_PROTOCOLS:
        raise _refused(decision.response)
    _, peer = _replay_parts(session, decision)
    ours, theirs = socket.socketpair()  # local, unnamed: no network
    protocol = ClientProtocol(self.ws_uri, **self.protocol_kwargs)  # type: ignore[arg-type]
    connection = self.create_connection(ours, protocol, **self.connection_kwargs)  # type: ignore[arg-type]
    sender = _SyncPeer(peer, theirs, connection)
    threading.Thread(target=sender.run, name="hashreplay-websocket-replay", daemon=True).start()
    try:
        connection.handshake(self.additional_headers, self.user_agent_header, deadline.timeout())
    except Exception:
        connection.close_socket()
        raise
    _bounded_sync(connection, sender)
    return connection


class _SyncPeer:
    """The peer of a replayed sync connection, served over one end of a socket pair."""

    def __init__(self, peer: _Peer, sock: socket.socket, connection: Any) -> None:
        self.peer = peer
        self.sock = sock
        self.connection = connection
        self.lock = threading.RLock()
        self.done = False

    def run(self) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return
                head += chunk
            key = self.connection.request.headers["Sec-WebSocket-Key"]
            rest = head.split(b"\r\n\r\n", 1)[1]
            self.emit(self.peer.handshake(key, _offered(self.connection)))
            if rest:
                self.emit(self.peer.client_data(rest))
            while not self.done:
                data = self.sock.recv(65536)
                if not data:
                    break
                self.emit(self.peer.client_data(data))
        except OSError:
            pass
        finally:
            self.end()

    def emit(self, outs: list[_Out]) -> None:
        for out in outs:
            if out.delay > 0:
                time.sleep(out.delay)
            with self.lock:
                if self.done:
                    return
                if out.lost is not None or out.eof:
                    self.end()
                    return
                with contextlib.suppress(OSError):
                    self.sock.sendall(out.data)

    def end(self) -> None:
        with self.lock:
            if not self.done:
                self.done = True
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)
                self.sock.close()


def _bounded_sync(connection: Any, sender: _SyncPeer) -> None:
    """`recv(timeout=None)` waits at most `WAIT_LIMIT_S` for a frame the recording holds
    back (the test then fails naming it); a caller's own timeout raises `TimeoutError` as
    the library does."""
    recv = connection.recv

    def bounded(timeout: float | None = None, decode: bool | None = None) -> Any:
        if timeout is not None:
            return recv(timeout, decode)
        while True:
            try:
                return recv(WAIT_LIMIT_S, decode)
            except TimeoutError:
                peer = sender.peer
                step = peer.waiting
                if step is None:
                    continue  # a paced frame is on its way
                failure = peer.replay.waited_too_long(step, WAIT_LIMIT_S)
                sender.emit(peer.fail(failure))

    connection.recv = bounded


# --- the legacy client (websockets.legacy, deprecated since websockets 14) -----------------


def _legacy_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    async def __await_impl__(self: Any) -> Any:
        session = _state.active_session()
        if session is None or in_adapter_io():  # none, or the proxy's own upstream dial
            return await original(self)
        factory = self._create_connection.args[0]
        extra = factory.keywords.get("extra_headers")
        decision = session.decide_connection(self._uri, _headers(extra))
        if isinstance(decision, Miss):
            raise MissedConnection(str(decision.error))
        if isinstance(decision, Replay):
            protocol = await _legacy_replay(self, session, decision, factory)
            self.protocol = protocol
            return protocol
        if not isinstance(decision, Record):
            if isinstance(decision, Passthrough):
                factory.keywords["extra_headers"] = Headers([*_headers(extra), *decision.headers])
            with adapter_io():
                return await original(self)
        log = session.frame_log(decision, self._uri, started=time.monotonic())
        try:
            with adapter_io():
                protocol = await original(self)
        except BaseException as exc:
            status = getattr(exc, "status_code", None)
            if isinstance(status, int):
                log.answered(status, list(Headers(getattr(exc, "headers", None) or []).raw_items()))
            log.cut(exc)
            session.record_connection(log)
            raise
        log.answered(SWITCHING_PROTOCOLS, list(protocol.response_headers.raw_items()))
        _hook_legacy(session, protocol, log)
        return protocol

    __await_impl__.__wrapped__ = original  # type: ignore[attr-defined]
    return __await_impl__


def _hook_legacy(session: Session, protocol: Any, log: FrameLog) -> None:
    """Log a legacy connection's messages as the client sends and reads them (its framing
    is its own, below any shared seam), and its end."""
    recv, send, fail = protocol.recv, protocol.send, protocol.fail_connection

    async def logged_recv() -> Any:
        message = await recv()
        kind = FrameType.TEXT if isinstance(message, str) else FrameType.BINARY
        try:
            log.received(kind, message)
        except BodyTooLarge:
            fail(_MESSAGE_TOO_BIG, "hashreplay: frames over max_body_bytes")
            raise
        log.delivered()
        return message

    async def logged_send(message: Any) -> None:
        await send(message)
        if isinstance(message, (str, bytes, bytearray, memoryview)):
            kind = FrameType.TEXT if isinstance(message, str) else FrameType.BINARY
            log.sent(kind, message if isinstance(message, str) else bytes(message))

    def ended(_: Any) -> None:
        sent, rcvd = protocol.close_sent, protocol.close_rcvd
        if sent is not None:
            log.closed(sent.code, sent.reason, sent=True)
        if rcvd is not None:
            log.closed(rcvd.code, rcvd.reason)
        _ended_legacy(session, log, closed=sent is not None or rcvd is not None)

    protocol.recv, protocol.send = logged_recv, logged_send
    protocol.connection_lost_waiter.add_done_callback(ended)


def _ended_legacy(session: Session, log: FrameLog, *, closed: bool) -> None:
    if not closed:
        log.cut()
    session.record_connection(log)


async def _legacy_replay(self: Any, session: Session, decision: Replay, factory: Any) -> Any:
    if decision.response.status != SWITCHING_PROTOCOLS:
        from websockets.legacy.exceptions import InvalidStatusCode

        status = decision.response.status or 500
        raise InvalidStatusCode(status, Headers(list(decision.response.headers.items())))
    _, peer = _replay_parts(session, decision)
    protocol = factory()
    transport = _Transport(peer, protocol, asyncio.get_running_loop())
    protocol.connection_made(transport)
    await protocol.handshake(
        self._wsuri,
        origin=protocol.origin,
        available_extensions=protocol.available_extensions,
        available_subprotocols=protocol.available_subprotocols,
        extra_headers=protocol.extra_headers,
    )
    recv = protocol.recv

    async def bounded() -> Any:
        while True:
            try:
                return await asyncio.wait_for(recv(), WAIT_LIMIT_S)  # cancelling it is safe
            except TimeoutError:
                step = peer.waiting
                if step is None:
                    continue
                failure = peer.replay.waited_too_long(step, WAIT_LIMIT_S)
                transport.enqueue(peer.fail(failure))

    protocol.recv = bounded
    return protocol


__all__ = ["MissedConnection", "install", "is_installed", "uninstall"]
