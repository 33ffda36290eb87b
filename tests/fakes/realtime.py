"""Fake realtime servers on the `websockets` library (127.0.0.1, a free port, a thread of
their own) that behave like the real APIs: every event carries fresh server-made ids (and
times) per connection, replies stream in several deltas, errors close the connection.

- `/v1/realtime`: OpenAI Realtime (session.created; session.update → session.updated;
  conversation.item.create → conversation.item.created; response.create → response.created,
  output_item.added, several response.output_text.delta, a response.output_audio.delta
  carrying audio, response.done). The openai SDK's `client.realtime.connect(...)` talks to
  it with `websocket_base_url`.
- `/v1/responses`: the Responses API's WebSocket mode (response.create → response.created,
  response.output_text.delta, response.completed).
- `/ws/google.ai.generativelanguage.*`: Gemini Live (setup → setupComplete; clientContent
  → serverContent model turn parts, then turnComplete), over TLS when the server is made
  with `tls=True`, as google-genai always dials wss:// (`client_ssl()` trusts the per-test
  certificate).
- Raw paths for the library's own clients: `/echo` (each message echoed as JSON with a fresh
  id, then a binary frame; `{"close": [code, reason]}` closes), `/forever` (streams frames
  until the client goes), `/cut` (one frame, then the TCP connection drops with no close
  frame), `/reject` (the handshake answered 401).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import itertools
import json
import ssl
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

_serial = itertools.count(1)


def fresh(prefix: str) -> str:
    """A server-made id, as the real API mints one per event."""
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def _now() -> int:
    return int(datetime.datetime.now(tz=datetime.timezone.utc).timestamp())


# --- OpenAI Realtime -------------------------------------------------------------------------


async def _openai(ws: ServerConnection) -> None:
    session = {
        "id": fresh("sess"),
        "object": "realtime.session",
        "type": "realtime",
        "model": "gpt-realtime",
        "output_modalities": ["text"],
        "instructions": "",
        "expires_at": _now() + 3600,
    }
    await ws.send(
        json.dumps({"type": "session.created", "event_id": fresh("event"), "session": session})
    )
    items: list[dict[str, Any]] = []
    async for raw in ws:
        event = json.loads(raw)
        kind = event.get("type")
        if kind == "session.update":
            session.update(event.get("session", {}))
            await ws.send(
                json.dumps(
                    {"type": "session.updated", "event_id": fresh("event"), "session": session}
                )
            )
        elif kind == "conversation.item.create":
            item = {
                **event["item"],
                "id": fresh("item"),
                "object": "realtime.item",
                "status": "completed",
            }
            items.append(item)
            await ws.send(
                json.dumps(
                    {
                        "type": "conversation.item.created",
                        "event_id": fresh("event"),
                        "previous_item_id": None,
                        "item": item,
                    }
                )
            )
        elif kind == "response.create":
            await _respond(ws, items)
        else:
            error = {"type": "invalid_request_error", "message": f"unknown event {kind!r}"}
            await ws.send(json.dumps({"type": "error", "event_id": fresh("event"), "error": error}))


async def _respond(ws: ServerConnection, items: list[dict[str, Any]]) -> None:
    said = ""
    for item in items:
        for part in item.get("content", []):
            said += part.get("text", "")
    reply = f"echo: {said}".split(" ")
    response_id, item_id = fresh("resp"), fresh("item")
    response = {
        "id": response_id,
        "object": "realtime.response",
        "status": "in_progress",
        "output": [],
    }
    await ws.send(
        json.dumps({"type": "response.created", "event_id": fresh("event"), "response": response})
    )
    item = {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "content": [],
    }
    await ws.send(
        json.dumps(
            {
                "type": "response.output_item.added",
                "event_id": fresh("event"),
                "response_id": response_id,
                "output_index": 0,
                "item": item,
            }
        )
    )
    for index, word in enumerate(reply):
        delta = word if index == 0 else f" {word}"
        await ws.send(
            json.dumps(
                {
                    "type": "response.output_text.delta",
                    "event_id": fresh("event"),
                    "response_id": response_id,
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": delta,
                }
            )
        )
    audio = "UklGRgAAAABXQVZF"  # base64 audio bytes, as the real API sends them
    await ws.send(
        json.dumps(
            {
                "type": "response.output_audio.delta",
                "event_id": fresh("event"),
                "response_id": response_id,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 1,
                "delta": audio,
            }
        )
    )
    text = " ".join(reply)
    done = {
        **response,
        "status": "completed",
        "output": [
            {**item, "status": "completed", "content": [{"type": "output_text", "text": text}]}
        ],
        "usage": {"total_tokens": 7, "input_tokens": 3, "output_tokens": 4},
    }
    await ws.send(
        json.dumps({"type": "response.done", "event_id": fresh("event"), "response": done})
    )


# --- the Responses API's WebSocket mode ------------------------------------------------------


async def _responses(ws: ServerConnection) -> None:
    async for raw in ws:
        event = json.loads(raw)
        if event.get("type") != "response.create":
            error = {"type": "error", "code": "unknown_event", "message": f"unknown {event!r:.40}"}
            await ws.send(json.dumps({**error, "sequence_number": 0}))
            continue
        said = event.get("input", "")
        said = said if isinstance(said, str) else json.dumps(said)
        response_id, item_id = fresh("resp"), fresh("msg")
        response = {
            "id": response_id,
            "object": "response",
            "created_at": _now(),
            "status": "in_progress",
            "model": event.get("model", "gpt-fake"),
            "output": [],
        }
        seq = itertools.count()
        await ws.send(
            json.dumps(
                {"type": "response.created", "sequence_number": next(seq), "response": response}
            )
        )
        words = f"echo: {said}".split(" ")
        for index, word in enumerate(words):
            delta = {
                "type": "response.output_text.delta",
                "sequence_number": next(seq),
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": word if index == 0 else f" {word}",
            }
            await ws.send(json.dumps(delta))
        text = " ".join(words)
        message = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        done = {**response, "status": "completed", "output": [message], "completed_at": _now()}
        await ws.send(
            json.dumps(
                {"type": "response.completed", "sequence_number": next(seq), "response": done}
            )
        )


# --- Gemini Live -------------------------------------------------------------------------------


async def _gemini(ws: ServerConnection) -> None:
    async for raw in ws:
        message = json.loads(raw)
        if "setup" in message:
            await ws.send(json.dumps({"setupComplete": {}}).encode())
        elif "clientContent" in message or "client_content" in message:  # proto JSON: either
            content = message.get("clientContent") or message["client_content"]
            said = "".join(
                part.get("text", "")
                for turn in content.get("turns", [])
                for part in turn.get("parts", [])
            )
            for word in f"gemini says: {said}".split(" "):
                content = {"modelTurn": {"role": "model", "parts": [{"text": word + " "}]}}
                await ws.send(json.dumps({"serverContent": content}).encode())
            usage = {"promptTokenCount": 3, "responseTokenCount": 4, "totalTokenCount": 7}
            done = {"serverContent": {"turnComplete": True}, "usageMetadata": usage}
            await ws.send(json.dumps(done).encode())


# --- raw -------------------------------------------------------------------------------------------


async def _echo(ws: ServerConnection) -> None:
    await ws.send(json.dumps({"type": "hello", "event_id": fresh("event"), "created_at": _now()}))
    async for raw in ws:
        message = json.loads(raw)
        if "close" in message:
            code, reason = message["close"]
            await ws.close(code, reason)
            return
        await ws.send(json.dumps({"type": "echo", "event_id": fresh("event"), "got": message}))
        await ws.send(b"\x00\x01binary\xff")


async def _forever(ws: ServerConnection) -> None:
    for n in itertools.count():
        await ws.send(json.dumps({"type": "delta", "n": n, "pad": "x" * 200}))
        await asyncio.sleep(0)  # let the client's close in, as a real server's loop does


async def _cut(ws: ServerConnection) -> None:
    await ws.send(json.dumps({"type": "partial", "event_id": fresh("event")}))
    await asyncio.sleep(0)
    assert ws.transport is not None
    ws.transport.abort()  # no close frame: the connection drops


_ROUTES = {
    "/v1/realtime": _openai,
    "/v1/responses": _responses,
    "/echo": _echo,
    "/forever": _forever,
    "/cut": _cut,
}


class FakeRealtime:
    """The fake servers above, one port; `handshakes` lists each handshake's path and
    headers (to check what a client sent, and that replay reached nothing)."""

    def __init__(self, *, tls: bool = False) -> None:
        self.handshakes: list[tuple[str, dict[str, str]]] = []
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._run, name="fake-realtime", daemon=True)
        self.port = 0
        self._cert_dir: tempfile.TemporaryDirectory[str] | None = None
        self.server_ssl: ssl.SSLContext | None = None
        self.cert_pem = b""
        if tls:
            self._make_certificate()

    @property
    def url(self) -> str:
        scheme = "wss" if self.server_ssl is not None else "ws"
        return f"{scheme}://127.0.0.1:{self.port}"

    def client_ssl(self) -> ssl.SSLContext:
        """A client context that trusts this server's per-test certificate only."""
        return ssl.create_default_context(cadata=self.cert_pem.decode("ascii"))

    def __enter__(self) -> FakeRealtime:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set_result, None)
            self._thread.join()
        if self._cert_dir is not None:
            self._cert_dir.cleanup()
            self._cert_dir = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = self._loop.create_future()
        async with serve(
            self._route,
            "127.0.0.1",
            0,
            ssl=self.server_ssl,
            process_request=self._handshake,
            close_timeout=0.5,  # a client the test left open does not hold up the test's end
        ) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop

    def _handshake(self, connection: ServerConnection, request: Request) -> Response | None:
        self.handshakes.append(
            (request.path, {k.lower(): v for k, v in request.headers.raw_items()})
        )
        if request.path.startswith("/reject"):
            body = json.dumps({"error": {"message": "invalid api key", "code": "invalid_api_key"}})
            headers = Headers([("Content-Type", "application/json")])
            return Response(401, "Unauthorized", headers, body.encode())
        return None

    async def _route(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        path = ws.request.path.split("?", 1)[0]
        if path.startswith("/ws/google.ai.generativelanguage."):
            await _gemini(ws)
            return
        handler = _ROUTES.get(path)
        if handler is None:
            await ws.close(4404, f"no route {path}")
            return
        await handler(ws)

    def _make_certificate(self) -> None:
        """A self-signed certificate for 127.0.0.1, made for this server alone."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = datetime.datetime.now(tz=datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        self.cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        self._cert_dir = tempfile.TemporaryDirectory()
        cert_file = Path(self._cert_dir.name) / "cert.pem"
        key_file = Path(self._cert_dir.name) / "key.pem"
        cert_file.write_bytes(self.cert_pem)
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        self.server_ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_ssl.load_cert_chain(cert_file, key_file)


@contextmanager
def fake_realtime(*, tls: bool = False) -> Iterator[FakeRealtime]:
    with FakeRealtime(tls=tls) as server:
        yield server
