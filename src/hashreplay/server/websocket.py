"""WebSocket upgrades through `hashreplay serve` (docs/design.md §17, "The proxy"; docs/server.md,
"WebSockets"): a client in any language points its `ws://` URL at the proxy, and each
connection is recorded or replayed like one made in a test, with the test id from
`X-HashReplay-Test-Id` on the handshake.

The engine decides, per handshake (`Session.decide_connection`):

- **replay**: nothing is dialled; the recorded frames are played to the client through
  `engine.frame_replay.FrameReplay` (the causal gate, pacing, each client frame compared with
  the recorded one). A miss (no recording, or a client frame that differs) reaches the
  client as the miss report: before the upgrade as an HTTP JSON error (the ASGI
  `websocket.http.response` extension), after it as a close with code 1008 whose reason
  names the file and frame (the full report is logged). A recorded close is reproduced; a
  recorded cut drops the connection with no close frame; a handshake the upstream refused is
  refused again with its recorded status and body.
- **record**: the upstream is dialled with the `websockets` client, both directions are
  relayed frame by frame and fed to the connection's `FrameLog`, and the recording is
  written when the connection ends (a close either way, a cut). An upstream that gave no
  answer records nothing; the client gets a 502 naming it.
- **live / passthrough**: relayed, nothing written.

Whatever a client sends (an unknown route, a bad fault header, a frame uvicorn cannot
parse), the recording on disk is never rewritten by a failure and the process keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from hashreplay.core.constants import RUN_HEADER, TEST_ID_HEADER
from hashreplay.core.context import adapter_io, test_context
from hashreplay.core.errors import (
    BodyTooLarge,
    ProxyError,
    ReplayFailure,
    UnknownUpstream,
    error_body,
)
from hashreplay.core.format import FrameType
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.frame_log import FrameLog
from hashreplay.engine.frame_replay import Closed, Cut, Deliver, Failed, FrameReplay, Wait
from hashreplay.engine.http import plan_for
from hashreplay.engine.replay import Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session, touch_test
from hashreplay.server.cli import ServeSettings
from hashreplay.server.wire import Receive, Scope, Send, end_to_end, forward_url, scope_target
from hashreplay.server_mode import test_and_run_ids

logger = logging.getLogger("hashreplay.serve")

#: Handshake headers never sent upstream: the proxy's own and those `websockets` makes
#: itself for the upstream handshake.
_CONSUMED = (
    "host",
    "content-length",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "upgrade",
)

#: The close codes the proxy sends: a miss or a failed wait (policy violation), a frame
#: over `max_body_bytes` (message too big), an upstream that failed (internal error).
POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
INTERNAL_ERROR = 1011
#: A close reason is at most 123 bytes (RFC 6455 §5.5).
MAX_REASON_BYTES = 123


def close_reason(text: str) -> str:
    """`text` cut to fit a close frame's reason (on a character boundary)."""
    data = text.encode("utf-8")[:MAX_REASON_BYTES]
    return data.decode("utf-8", "ignore")


class WebSocketProxy:
    """The proxy's WebSocket connections (one per ASGI `websocket` scope)."""

    def __init__(
        self,
        session: Session,
        settings: ServeSettings,
        scrub: Callable[[Scope], Any],
        check_headers: Callable[[str, str, list[tuple[str, str]]], None],
    ) -> None:
        self.session = session
        self.settings = settings
        self._scrubber = scrub
        #: the proxy's own header checks (a bad `X-HashReplay-Fault` is a 400), as for HTTP
        self._check_headers = check_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return  # the client left before the handshake
        peer = _Peer(scope, receive, send)
        try:
            await self._connection(scope, peer)
        except ProxyError as problem:
            scrub = self._scrubber(scope)
            text = scrub(problem.message)
            logger.warning(
                "WebSocket %s -> %d: %s", scrub(scope.get("path") or "/"), problem.status, text
            )
            await peer.refuse(
                problem.status, [("content-type", "application/json")], _body(problem, text)
            )

    async def _connection(self, scope: Scope, peer: _Peer) -> None:
        incoming = scope_target(scope)
        target, headers = incoming.target, incoming.headers
        try:
            upstream, upstream_path = self.settings.route(incoming.path)
        except UnknownUpstream as exc:
            raise ProxyError(404, "unknown_upstream", f"WebSocket {target}: {exc}") from None
        self._check_headers("GET", target, headers)
        url = forward_url(
            incoming,
            None if upstream is None else upstream.url,
            upstream_path,
            label="WebSocket",
            scheme="ws",
        )
        test_id, run_id = test_and_run_ids(scope.get("headers") or ())
        forwarded = end_to_end(headers, (*_CONSUMED, TEST_ID_HEADER, RUN_HEADER))
        session = self.session
        session.enter_run(test_id, run_id)
        touch_test(session, test_id, self.settings.max_tests)
        with test_context(test_id):
            decision = session.decide_connection(url, forwarded, test_id=test_id)
        subprotocols = list(scope.get("subprotocols") or ())
        if isinstance(decision, Miss):
            session.take_misses(decision.prep.test_id)  # the client gets the report now
            logger.warning("%s", decision.error.report)
            raise ProxyError(404, "hashreplay_miss", decision.error.report)
        if isinstance(decision, Replay):
            await self._replay(decision, peer, target)
            return
        if isinstance(decision, Passthrough):
            forwarded = [*forwarded, *decision.headers]
        log = None
        if isinstance(decision, Record):
            log = session.frame_log(decision, url, started=time.monotonic())
        relay = _Relay(
            session, url, forwarded, subprotocols, peer, log, target, self.settings.upstream_timeout
        )
        await relay.run()

    # --- replay ------------------------------------------------------------------------

    async def _replay(self, decision: Replay, peer: _Peer, target: str) -> None:
        response = decision.response
        if response.status != 101:  # refused when it was recorded: refused again
            plan = plan_for(response, decision.path)
            await peer.refuse(plan.status or 502, plan.headers, b"".join(plan.chunks))
            return
        replay = self.session.connection_replay(decision)
        protocol = response.headers.get("sec-websocket-protocol")
        await peer.accept(protocol)
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:
            loop.call_soon_threadsafe(changed.set)

        replay.on_change(wake)
        reader = asyncio.ensure_future(_client_frames(peer, replay, changed))
        try:
            await _play(replay, peer, changed, reader)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if replay.failure is not None:
                self.session.take_misses(replay.test_id)  # reported to the client, and logged
                logger.warning("WebSocket %s: %s", target, replay.failure.report)


async def _client_frames(peer: _Peer, replay: FrameReplay, changed: asyncio.Event) -> None:
    """Each frame the client sends, compared with the recording; its disconnect is a close."""
    while True:
        message = await peer.receive()
        kind = message["type"]
        if kind == "websocket.disconnect":
            replay.close(message.get("code", 1000), message.get("reason") or "")
            return
        if kind != "websocket.receive":
            continue
        if message.get("text") is not None:
            failure = replay.send(FrameType.TEXT, message["text"])
        else:
            failure = replay.send(FrameType.BINARY, bytes(message.get("bytes") or b""))
        if failure is not None:
            return


async def _play(
    replay: FrameReplay, peer: _Peer, changed: asyncio.Event, reader: asyncio.Future[None]
) -> None:
    """Deliver the recorded frames as the gate opens, then end as the recording ended."""
    while True:
        changed.clear()
        step = replay.next_step()
        if isinstance(step, Deliver):
            await pacing.asleep(step.delay)
            if isinstance(step.payload, str):
                await peer.send({"type": "websocket.send", "text": step.payload})
            else:
                await peer.send({"type": "websocket.send", "bytes": step.payload})
            continue
        if isinstance(step, Wait):  # for the client: its next frame or its close
            waiter: asyncio.Future[Any] = asyncio.ensure_future(changed.wait())
            pending: set[asyncio.Future[Any]] = {waiter, reader}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if reader.done() and replay.failure is None and replay.client_close is None:
                return  # the client is gone
            continue
        if isinstance(step, Closed):
            await pacing.asleep(step.delay)
            if not step.by_client:
                await peer.close(step.code or 1000, step.reason)
            return
        if isinstance(step, Cut):
            await pacing.asleep(step.delay)
            return  # the app returns with no close: uvicorn drops the connection
        assert isinstance(step, Failed)
        await peer.close(POLICY_VIOLATION, close_reason(_short(step.failure)))
        return


def _short(failure: ReplayFailure) -> str:
    """The line of a miss report a close reason can carry: the frame and the file."""
    lines = failure.report.splitlines()
    frame = next((ln.strip() for ln in lines if ln.strip().startswith("frame:")), "")
    where = next((ln.strip() for ln in lines if ln.strip().startswith("recording:")), "")
    text = f"hashreplay miss: {frame}; {where}" if frame else lines[0] if lines else "miss"
    return text


# --- record / live -----------------------------------------------------------------------


@dataclass
class _Relay:
    """One connection relayed to the upstream; with a `log`, every frame is recorded."""

    session: Session
    url: str
    headers: list[tuple[str, str]]
    subprotocols: list[str]
    peer: _Peer
    log: FrameLog | None
    target: str
    timeout: float

    async def run(self) -> None:
        upstream = await self._dial()
        if upstream is None:
            return
        log, peer = self.log, self.peer
        if log is not None:
            answer = upstream.response
            assert answer is not None
            log.answered(answer.status_code, list(answer.headers.raw_items()))
        await peer.accept(upstream.subprotocol)
        tasks = [
            asyncio.ensure_future(self._client_to_upstream(upstream)),
            asyncio.ensure_future(self._upstream_to_client(upstream)),
        ]
        try:
            await self._until_done(tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            with contextlib.suppress(Exception):
                await upstream.close()
            if log is not None:
                await self.session.arecord_connection(log)

    async def _dial(self) -> Any:
        """The upstream connection, or None once its refusal was passed on (and recorded:
        a refusal is an answer); no answer at all is a 502 and records nothing."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        log = self.log
        try:
            with adapter_io():
                return await connect(
                    self.url,
                    additional_headers=self.headers,
                    subprotocols=self.subprotocols or None,  # type: ignore[arg-type]
                    max_size=None,
                    open_timeout=self.timeout,
                    compression=None,
                )
        except InvalidStatus as exc:  # the upstream refused the handshake: its answer
            refusal = exc.response
            headers = list(refusal.headers.raw_items())
            body = bytes(refusal.body or b"")
            if log is not None:
                log.answered(refusal.status_code, headers, body)
                await self.session.arecord_connection(log)
            kept = [(k, v) for k, v in headers if k.lower() == "content-type"]
            await self.peer.refuse(refusal.status_code, kept, body)
            return None
        except Exception as exc:  # no answer: nothing is recorded
            if log is not None:
                await self.session.arecord_connection(log)
            message = (
                f"WebSocket {self.target}: the upstream {self.session.redactor.url(self.url)} "
                f"gave no answer ({type(exc).__name__}: {exc}); nothing was recorded"
            )
            raise ProxyError(502, "upstream_unreachable", message) from None

    async def _until_done(self, tasks: list[asyncio.Task[None]]) -> None:
        from websockets.exceptions import ConnectionClosed

        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        first = done.pop()
        problem = first.exception()
        if isinstance(problem, BodyTooLarge):  # the test fails already; nothing is recorded
            await self.peer.close(MESSAGE_TOO_BIG, close_reason(f"hashreplay: {problem}"))
        elif problem is not None and not isinstance(problem, (ConnectionClosed, OSError)):
            raise problem
        if first is tasks[0]:  # the client closed: the upstream's answer to it, briefly
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(tasks[1]), 5)

    async def _client_to_upstream(self, upstream: Any) -> None:
        log, peer = self.log, self.peer
        while True:
            message = await peer.receive()
            if message["type"] == "websocket.disconnect":
                code, reason = message.get("code", 1000), message.get("reason") or ""
                if log is not None:
                    log.closed(code, reason, sent=True)
                await upstream.close(code if code not in (1005, 1006) else 1000, reason)
                return
            if message["type"] != "websocket.receive":
                continue
            text = message.get("text")
            data: str | bytes = text if text is not None else bytes(message.get("bytes") or b"")
            if log is not None:
                log.sent(FrameType.TEXT if isinstance(data, str) else FrameType.BINARY, data)
            await upstream.send(data)

    async def _upstream_to_client(self, upstream: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        log, peer = self.log, self.peer
        with contextlib.suppress(ConnectionClosed):
            async for data in upstream:
                if log is not None:
                    kind = FrameType.TEXT if isinstance(data, str) else FrameType.BINARY
                    log.received(kind, data)
                    log.delivered()  # relayed now: where the client gets it
                if isinstance(data, str):
                    await peer.send({"type": "websocket.send", "text": data})
                else:
                    await peer.send({"type": "websocket.send", "bytes": bytes(data)})
        received = upstream.protocol.close_rcvd
        if received is not None:
            if log is not None and not peer.closed:
                log.closed(received.code, received.reason)
            await peer.close(received.code, received.reason)
        elif not peer.closed and log is not None:
            # no close frame: a cut; returning with no close drops the client's connection
            log.cut(upstream.protocol.close_exc)


# --- the client's side -------------------------------------------------------------------


class _Peer:
    """The client's side of one ASGI `websocket` connection."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.receive: Callable[[], Awaitable[MutableMapping[str, Any]]] = receive
        self._send = send
        self._denials = "websocket.http.response" in (scope.get("extensions") or {})
        self.accepted = False
        self.closed = False

    async def send(self, message: dict[str, Any]) -> None:
        if not self.closed:
            await self._send(message)

    async def accept(self, subprotocol: str | None) -> None:
        self.accepted = True
        await self._send({"type": "websocket.accept", "subprotocol": subprotocol})

    async def close(self, code: int, reason: str = "") -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):  # the client may be gone already
                await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def refuse(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """Answer the handshake with an HTTP response (where the server supports it), else
        close with the body's first line as the reason."""
        if self.accepted:
            await self.close(POLICY_VIOLATION, close_reason(body.decode("utf-8", "replace")))
            return
        if self._denials:
            encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
            await self._send(
                {"type": "websocket.http.response.start", "status": status, "headers": encoded}
            )
            await self._send({"type": "websocket.http.response.body", "body": body})
            self.closed = True
            return
        await self.close(POLICY_VIOLATION, close_reason(body.decode("utf-8", "replace")))


def _body(problem: ProxyError, message: str) -> bytes:
    return error_body(message, "hashreplay_error", problem.code)
