"""A realtime WebSocket server for the tests, on aiohttp's web server (127.0.0.1, a free
port, its own loop in a thread), shaped like OpenAI Realtime: `session.created` on connect,
an answer per client event with fresh server ids and timestamps each time (like the real
API), text deltas, a binary audio frame, a close with a code, a cut with no close frame, a
refused handshake, a stream that never ends.

Client events (JSON text frames, by `type`):
- `session.update` → `session.updated`
- `conversation.item.create` → `conversation.item.created` (a fresh `item_...` id)
- `response.create` → `response.created`, two `response.text.delta`, one binary frame (the
  "audio"), `response.done`
- `bye` → a close frame (code 4000, reason "bye")
- `cut` → the TCP connection dropped with no close frame
- `flood` → text frames forever (for `max_body_bytes`)
A binary client frame is answered with its bytes reversed.
Paths: `/v1/realtime` (the above), `/refuse` (a 401 with a JSON error body).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from types import TracebackType
from typing import Any

from aiohttp import WSMsgType, web

_serial = itertools.count(1)


def fresh(prefix: str) -> str:
    """A server-made id, fresh per event like the real API's."""
    return f"{prefix}_{next(_serial):04d}{time.monotonic_ns() % 10**9:09d}"


class FakeRealtime:
    """Start with `with FakeRealtime() as fake:`; `fake.url` is `ws://127.0.0.1:<port>`;
    `fake.connections` counts the handshakes it accepted, `fake.received` the client frames."""

    def __init__(self, *, drifted: bool = False) -> None:
        #: answer as a newer API would: `session.updated` gains a field, deltas change type
        self.drifted = drifted
        self.url = ""
        self.connections = 0
        self.received: list[Any] = []
        self.handshake_headers: list[dict[str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._floods: set[asyncio.Future[None]] = set()

    def __enter__(self) -> FakeRealtime:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self._runner is None:
            return
        runner, self._runner = self._runner, None
        asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/realtime", self._realtime)
        app.router.add_get("/refuse", self._refuse)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"ws://127.0.0.1:{port}"

    async def _refuse(self, request: web.Request) -> web.Response:
        body = {
            "error": {"type": "invalid_request_error", "message": "bad key", "id": fresh("err")}
        }
        return web.json_response(body, status=401)

    async def _realtime(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoclose=True)
        await ws.prepare(request)
        self.connections += 1
        self.handshake_headers.append(dict(request.headers))
        await self._event(
            ws, "session.created", session={"id": fresh("sess"), "model": "gpt-realtime"}
        )
        async for msg in ws:
            if msg.type is WSMsgType.BINARY:
                self.received.append(msg.data)
                await ws.send_bytes(bytes(reversed(msg.data)))
                continue
            if msg.type is not WSMsgType.TEXT:
                break
            event = json.loads(msg.data)
            self.received.append(event)
            kind = event.get("type")
            if kind == "session.update":
                extra = {"usage": {"total_tokens": 3}} if self.drifted else {}
                await self._event(ws, "session.updated", session=event.get("session", {}), **extra)
            elif kind == "conversation.item.create":
                item = {**event.get("item", {}), "id": fresh("item")}
                await self._event(ws, "conversation.item.created", item=item)
            elif kind == "response.create":
                response_id = fresh("resp")
                await self._event(ws, "response.created", response={"id": response_id})
                for delta in ("Hel", "lo"):
                    await self._event(
                        ws, "response.text.delta", response_id=response_id, delta=delta
                    )
                await ws.send_bytes(b"\x00\x01audio\xff" * 4)  # PCM: no ids in it
                await self._event(
                    ws, "response.done", response={"id": response_id, "status": "completed"}
                )
            elif kind == "bye":
                await ws.close(code=4000, message=b"bye")
                break
            elif kind == "cut":
                transport = request.transport
                assert transport is not None
                transport.abort()
                break
            elif kind == "flood":  # sent from a task: this loop still reads the close
                self._floods.add(asyncio.ensure_future(self._flood(ws)))
        return ws

    async def _flood(self, ws: web.WebSocketResponse) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while not ws.closed:
                await self._event(ws, "flood.chunk", data="x" * 1000)
                await asyncio.sleep(0)  # a send may not yield: let the reader see a close

    async def _event(self, ws: web.WebSocketResponse, kind: str, **fields: Any) -> None:
        payload = {"type": kind, "event_id": fresh("event"), "created_at": time.time_ns(), **fields}
        await ws.send_str(json.dumps(payload))
