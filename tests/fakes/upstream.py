"""A fake upstream HTTP server shaped like the OpenAI, Anthropic and Ollama APIs.

The real ``openai`` and ``anthropic`` SDKs and raw ``httpx``/``httpx2`` clients can talk to it
on 127.0.0.1, so tests can record real-looking traffic and replay it::

    with FakeUpstream() as fake:
        client = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test")
        client.chat.completions.create(model="gpt-fake-1", messages=[...])
        assert fake.calls[-1].json()["model"] == "gpt-fake-1"

Like the real APIs it mints fresh random ids, timestamps and durations (and noise headers) on
every call, while the content is a deterministic function of the request (see
:mod:`.apis` for the payload rules). Responses can be scripted per ``(method, path)``
to provoke errors, retries, timeouts and broken streams (see :class:`Scripted`).

It uses only the standard library: ``http.server.ThreadingHTTPServer`` speaking HTTP/1.1
with keep-alive, ``content-length`` for whole bodies and ``transfer-encoding: chunked`` for
streams, each event written (and flushed) as its own chunk.
"""

from __future__ import annotations

import gzip
import json
import socket
import socketserver
import sys
import threading
import traceback
import zlib
from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from .apis import (
    SSE_KEEPALIVE,
    ApiState,
    Call,
    Reply,
    default_error_reply,
    error_reply,
    handle,
    random_alnum,
    random_hex,
    random_int,
)

__all__ = ["Call", "FakeUpstream", "Scripted"]

_COMPRESSIBLE = ("application/json", "application/x-ndjson", "text/")
_CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


@dataclass
class Scripted:
    """A canned answer for one request to a ``(method, path)``; see :meth:`FakeUpstream.script`.

    With neither ``json`` nor ``body`` and ``status == 200`` the normal answer is served
    (after ``delay``, with the extra ``headers``); with only a non-200 ``status``, a default
    error body in that API's shape is sent.
    """

    status: int = 200
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    #: Serve the normal answer but drop the connection after this many stream events (SSE
    #: events or NDJSON lines; no chunk terminator). For a non-streamed answer: after half
    #: of the body.
    disconnect_after_chunks: int | None = None
    delay: float = 0.0
    close_without_response: bool = False
    #: Send these bytes as the chunks of a chunked body, one chunk each (set
    #: ``content-type`` in ``headers``).
    frames: list[bytes] | None = None


def _noise_headers() -> dict[str, str]:
    return {
        "x-request-id": f"req_{random_hex(32)}",
        "openai-processing-ms": str(random_int(20, 2000)),
        "x-ratelimit-remaining-requests": str(random_int(100, 9999)),
        "x-ratelimit-remaining-tokens": str(random_int(10_000, 999_999)),
        "set-cookie": f"__cf_bm={random_alnum(43)}; path=/; HttpOnly",
        "cf-ray": f"{random_hex(16)}-SJC",
    }


class _Handler(BaseHTTPRequestHandler):
    """Serves one connection (possibly several keep-alive requests)."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request log lines."""

    def version_string(self) -> str:
        return "cloudflare"  # the `server` header the real APIs send

    # Answer as soon as a response is written: without this, a body written after its
    # headers waits for the client's delayed ACK (~40 ms per call), as no real API does.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            with suppress(OSError):
                super().finish()
        finally:
            self.server.untrack(self.connection)

    def do_GET(self) -> None:
        try:
            self._serve()
        except (*_CLIENT_GONE, OSError):
            self.close_connection = True

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    # ----------------------------------------------------------------------- one request

    def _serve(self) -> None:
        upstream = self.server.upstream
        split = urlsplit(self.path)
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        call = Call(self.command, split.path, split.query, headers, self._read_body())
        upstream._record(call)

        scripted = upstream._next_script(call.method, call.path)
        if scripted is not None:
            if scripted.delay > 0 and upstream._stopping.wait(scripted.delay):
                self._abort()
                return
            if scripted.close_without_response:
                self._abort()
                return
        reply = self._reply_for(call, scripted)
        limit = scripted.disconnect_after_chunks if scripted is not None else None
        self._send(reply, call, limit)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _reply_for(self, call: Call, scripted: Scripted | None) -> Reply:
        if (
            scripted is not None
            and scripted.disconnect_after_chunks is None
            and (
                scripted.json is not None
                or scripted.body is not None
                or scripted.frames is not None
                or scripted.status != 200
            )
        ):
            if scripted.frames is not None:
                reply = Reply(
                    scripted.status, b"", "application/octet-stream", list(scripted.frames)
                )
            elif scripted.body is not None:
                reply = Reply(scripted.status, scripted.body, "application/octet-stream")
            elif scripted.json is not None:
                reply = Reply(scripted.status, _json_bytes(scripted.json))
            else:
                reply = default_error_reply(call.path, scripted.status)
        else:
            try:
                reply = handle(self.server.upstream._state, call)
            except Exception:  # a bug in the fake: tell the client rather than hang
                message = "fake upstream crashed:\n" + traceback.format_exc()
                reply = error_reply(call.path, 500, message)
        if scripted is not None:
            extra = {name.lower(): value for name, value in scripted.headers.items()}
            reply.content_type = extra.pop("content-type", reply.content_type)
            reply.headers.update(extra)
        return reply

    # ----------------------------------------------------------------------- writing

    def _send(self, reply: Reply, call: Call, limit: int | None) -> None:
        gzipped = (
            self.server.upstream.compress
            and "gzip" in call.headers.get("accept-encoding", "").lower()
            and reply.content_type.startswith(_COMPRESSIBLE)
        )
        headers = _noise_headers()
        headers["content-type"] = reply.content_type
        if gzipped:
            headers["content-encoding"] = "gzip"
            headers["vary"] = "Accept-Encoding"

        if reply.frames is None:
            body = gzip.compress(reply.body) if gzipped and reply.body else reply.body
            headers["content-length"] = str(len(body))
            self._write_head(reply.status, {**headers, **reply.headers})
            if limit is not None:
                self.wfile.write(body[: len(body) // 2])
                self._abort()
                return
            self.wfile.write(body)
            return

        headers["transfer-encoding"] = "chunked"
        headers["cache-control"] = "no-cache"
        self._write_head(reply.status, {**headers, **reply.headers})
        compressor = zlib.compressobj(wbits=31) if gzipped else None  # 31: gzip container
        sent = 0
        for frame in reply.frames:
            is_event = frame != SSE_KEEPALIVE
            if limit is not None and is_event and sent >= limit:
                break
            data = frame
            if compressor is not None:
                data = compressor.compress(frame) + compressor.flush(zlib.Z_SYNC_FLUSH)
            self._write_chunk(data)
            sent += is_event
        if limit is not None:
            self._abort()  # no terminating chunk: the client sees a broken stream
            return
        if compressor is not None:
            self._write_chunk(compressor.flush())
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)  # also sends `server` and `date`
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
            self.wfile.flush()

    def _abort(self) -> None:
        """Close the connection abruptly, without (the rest of) a response."""
        self.close_connection = True
        with suppress(OSError):
            self.wfile.flush()
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    allow_reuse_address = True

    def __init__(self, upstream: FakeUpstream, port: int = 0) -> None:
        self.upstream = upstream
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), which may stall without a network.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def track(self, connection: socket.socket) -> None:
        with self._open_lock:
            self._open.add(connection)

    def untrack(self, connection: socket.socket) -> None:
        with self._open_lock:
            self._open.discard(connection)

    def close_connections(self) -> None:
        """Cut kept-alive connections too, so nothing is served after ``stop()``."""
        with self._open_lock:
            connections = list(self._open)
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (*_CLIENT_GONE, OSError)):
            return
        super().handle_error(request, client_address)


class FakeUpstream:
    """The fake server. Use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(self, *, compress: bool = False, port: int = 0) -> None:
        #: gzip the answer when the request's ``accept-encoding`` allows it.
        self.compress = compress
        #: 0 picks a free port; a fixed port keeps recorded URLs stable across re-records.
        self.port = port
        #: Every request received, in order.
        self.calls: list[Call] = []
        self._state = ApiState()
        self._lock = threading.Lock()
        self._scripts: dict[tuple[str, str], deque[Scripted]] = {}
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    # ----------------------------------------------------------------------- lifecycle

    def start(self) -> FakeUpstream:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread."""
        if self._server is not None:
            raise RuntimeError("FakeUpstream is already started")
        self._stopping.clear()
        server = _Server(self, self.port)
        host, port = server.server_address[:2]
        self._url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-upstream-{port}",
            daemon=True,
        )
        self._server = server
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut down and close the listening socket (idempotent); later connects are refused."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = self._thread = None
        self._stopping.set()  # wakes requests sleeping on a scripted delay
        server.shutdown()
        server.server_close()
        server.close_connections()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        if self._url is None:
            raise RuntimeError("FakeUpstream is not started")
        return self._url

    # ----------------------------------------------------------------------- model lists

    @property
    def models(self) -> list[str]:
        """The ids ``GET /v1/models`` lists."""
        return self._state.models

    @models.setter
    def models(self, value: list[str]) -> None:
        self._state.models = list(value)

    @property
    def ollama_models(self) -> list[str]:
        """The names ``GET /api/tags`` and ``GET /api/ps`` list."""
        return self._state.ollama_models

    @ollama_models.setter
    def ollama_models(self, value: list[str]) -> None:
        self._state.ollama_models = list(value)

    # ----------------------------------------------------------------------- scripting

    def script(self, method: str, path: str, *responses: Scripted) -> None:
        """Queue ``responses`` for the next requests to ``(method, path)``, each used once."""
        with self._lock:
            queue = self._scripts.setdefault((method.upper(), path), deque())
            queue.extend(responses)

    def reset(self) -> None:
        """Forget the received calls and any queued scripts."""
        with self._lock:
            self.calls.clear()
            self._scripts.clear()

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def _next_script(self, method: str, path: str) -> Scripted | None:
        with self._lock:
            queue = self._scripts.get((method.upper(), path))
            return queue.popleft() if queue else None
