"""Streamed bodies as a recording stores them (docs/design.md §4): ordered, readable records,
SSE events, NDJSON lines, raw chunks (AWS event-stream frames among them). Parsing happens
once, when a recording is written; rendering happens on replay and yields one chunk per
event (or line), so an SDK's stream parser sees a real stream.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterable
from contextlib import suppress
from enum import Enum
from typing import Any

import orjson


class StreamFormat(str, Enum):
    SSE = "sse"
    NDJSON = "ndjson"
    CHUNKS = "chunks"
    #: the items a call-layer iterator yielded, as typed JSON values
    VALUES = "values"

    def __str__(self) -> str:
        return self.value


SSE_TYPES = ("text/event-stream",)

NDJSON_TYPES = (
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/jsonlines",
)

#: Binary event streams: always kept as raw chunks, byte for byte (their frames carry
#: lengths and checksums a client validates), however they arrived.
BINARY_STREAM_TYPES = ("application/vnd.amazon.eventstream",)


def stream_format_for(content_type: str | None, *, chunked: bool) -> StreamFormat | None:
    """A response's stream format, or None for an ordinary body: SSE and NDJSON by content type;
    raw chunks for binary event streams (Bedrock's) and any other chunked body that is not JSON."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in SSE_TYPES:
        return StreamFormat.SSE
    if media in NDJSON_TYPES:
        return StreamFormat.NDJSON
    if media in BINARY_STREAM_TYPES or (chunked and media and "json" not in media):
        return StreamFormat.CHUNKS
    return None


def parse_stream(fmt: StreamFormat, chunks: Iterable[bytes]) -> list[Any]:
    if fmt is StreamFormat.SSE:
        return parse_sse(b"".join(chunks))
    if fmt is StreamFormat.NDJSON:
        return parse_ndjson(b"".join(chunks))
    return [encode_chunk(c) for c in chunks if c]


def render_stream(fmt: StreamFormat, items: Iterable[Any]) -> list[bytes]:
    if fmt is StreamFormat.SSE:
        return [render_sse_event(e) for e in items]
    if fmt is StreamFormat.NDJSON:
        return [render_ndjson_line(v) for v in items]
    return [decode_chunk(c) for c in items]


def data_values(fmt: StreamFormat, items: list[Any]) -> list[Any]:
    """The JSON payloads of a stream, in order (what the response normaliser rewrites)."""
    if fmt is StreamFormat.SSE:
        return [e.get("data") for e in items]
    if fmt in (StreamFormat.NDJSON, StreamFormat.VALUES):
        return list(items)
    return []


def with_data_values(fmt: StreamFormat, items: list[Any], values: list[Any]) -> list[Any]:
    """`items` with their payloads replaced by `values` (inverse of `data_values`)."""
    if fmt is StreamFormat.SSE:
        pairs = zip(items, values, strict=True)
        return [{**e, "data": v} if "data" in e else dict(e) for e, v in pairs]
    if fmt in (StreamFormat.NDJSON, StreamFormat.VALUES):
        return list(values)
    return items


#: Events and types that end an LLM stream (OpenAI, Anthropic, Ollama): a client that closes
#: right after one has read the whole stream, not abandoned it.
TERMINAL_EVENTS = frozenset(
    {"[DONE]", "message_stop", "response.completed", "response.failed", "response.incomplete"}
)


def opens_server_push(method: str, accept: str | None, session_id: str | None) -> bool:
    """Whether a request opens a session's server-push stream: a GET asking for
    `text/event-stream` that carries a session id a server handed out (`ID_HEADERS` of
    `core/normalise.py`: MCP's server-to-client channel over streamable HTTP). Such a
    stream has no last event of its own: it ends when the server closes it or its client
    does (closing the session), so it is stored complete either way, and replay answers a
    reconnect past the recorded ones with the last (docs/recordings.md, "MCP over
    streamable HTTP")."""
    return (
        method.upper() == "GET"
        and bool(session_id)
        and accept is not None
        and "text/event-stream" in accept.lower()
    )


def is_jsonrpc_answer(payload: Any) -> bool:
    """Whether an event's data is a JSON-RPC response (`result`) or error with an `id`: the
    last event of an MCP server's SSE answer to a request (streamable HTTP), after which its
    client closes the stream, having read all of it (docs/recordings.md, "MCP over streamable
    HTTP")."""
    return (
        isinstance(payload, dict)
        and payload.get("jsonrpc") == "2.0"
        and "id" in payload
        and ("result" in payload or "error" in payload)
    )


def stream_finished(fmt: StreamFormat, chunks: list[bytes]) -> bool:
    """Whether a stream's bytes end with its API's own last event (`[DONE]`, `"done": true`)."""
    data = b"".join(chunks)
    if fmt is StreamFormat.SSE:
        events = parse_sse(data)
        if not events or events[-1].get("partial"):
            return False
        payload = events[-1].get("data")
        kind = payload.get("type") if isinstance(payload, dict) else payload
        # `data` may be any JSON value (`[1, 2]`, `{"type": [...]}`): only a string names an event
        return (
            events[-1].get("event") in TERMINAL_EVENTS
            or (isinstance(kind, str) and kind in TERMINAL_EVENTS)
            or is_jsonrpc_answer(payload)
        )
    if fmt is StreamFormat.NDJSON and data.endswith(b"\n"):
        lines = parse_ndjson(data)
        return bool(lines) and isinstance(lines[-1], dict) and lines[-1].get("done") is True
    return False


def _maybe_json(text: str) -> Any:
    """Objects and arrays are stored parsed (readable, normalisable); anything else as text."""
    if text.lstrip()[:1] in ("{", "["):
        with suppress(orjson.JSONDecodeError):
            return orjson.loads(text)  # an object or array: it starts with { or [
    return text


def parse_sse(data: bytes) -> list[dict[str, Any]]:
    """Split an SSE body into events: `{"event", "id", "retry", "data", "comments"}` as present,
    `data` parsed when it is a JSON object or array. A trailing event without its blank line (a
    broken stream) gets `"partial": true`, so replay can reproduce exactly what arrived."""
    text = data.decode("utf-8", errors="surrogateescape").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.removesuffix("\n").split("\n")  # what follows the final newline is not a line
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    data_lines: list[str] = []
    for line in [*lines, None]:  # None: the end; an event still open there was cut off
        if not line:
            if data_lines:
                current["data"] = _maybe_json("\n".join(data_lines))
            if current:
                events.append(current if line is not None else {**current, "partial": True})
            current, data_lines = {}, []
        elif line.startswith(":"):
            current.setdefault("comments", []).append(line[1:])
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data_lines.append(value)
            elif name in ("event", "id", "retry"):
                current[name] = value
            else:
                current.setdefault("fields", []).append([name, value])
    return events


def render_sse_event(event: dict[str, Any]) -> bytes:
    data = event.get("data")
    # `{"data": {…}}` or `{"event": "x", "data": {…}}` without the general path (a long stream
    # replays hundreds of them), to the same bytes: compact JSON has no line break
    if type(data) is dict or type(data) is list:
        if len(event) == 1:
            return b"data: " + orjson.dumps(data) + b"\n\n"
        if len(event) == 2 and type(name := event.get("event")) is str:
            head = f"event: {name}\n".encode("utf-8", errors="surrogateescape")
            return head + b"data: " + orjson.dumps(data) + b"\n\n"
    lines = [f":{c}" for c in event.get("comments", ())]
    lines.extend(f"{key}: {event[key]}" for key in ("event", "id", "retry") if key in event)
    lines.extend(f"{name}: {value}" for name, value in event.get("fields", ()))
    if "data" in event:
        text = data if isinstance(data, str) else orjson.dumps(data).decode()
        lines.extend(f"data: {line}" for line in text.split("\n"))
    end = "\n" if event.get("partial") else "\n\n"
    return ("\n".join(lines) + end).encode("utf-8", errors="surrogateescape")


def parse_ndjson(data: bytes) -> list[Any]:
    text = data.decode("utf-8", errors="surrogateescape")
    return [_maybe_json(raw.removesuffix("\r")) for raw in text.split("\n") if raw.strip()]


def render_ndjson_line(value: Any) -> bytes:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return (text + "\n").encode("utf-8", errors="surrogateescape")


def encode_chunk(chunk: bytes) -> Any:
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(chunk).decode("ascii")}


def decode_chunk(chunk: Any) -> bytes:
    return base64.b64decode(chunk["base64"]) if isinstance(chunk, dict) else str(chunk).encode()


#: prelude (total length, headers length, prelude CRC) and the trailing message CRC
_PRELUDE = 12

_FRAME_OVERHEAD = _PRELUDE + 4


def is_eventstream(content_type: str | None) -> bool:
    """Whether a response is an AWS event stream (`application/vnd.amazon.eventstream`)."""
    return (content_type or "").split(";", 1)[0].strip().lower() in BINARY_STREAM_TYPES


class EventStreamFrames:
    """A raw-chunk body as AWS event stream frames (Bedrock's `converse_stream`): `frames`, the
    (encoded headers, payload) of each whole, valid frame from the start; `rest`, byte for byte as
    the client saw it: a cut-off frame of a broken stream, or all from one with bad lengths/CRCs."""

    __slots__ = ("frames", "rest")

    def __init__(self, frames: list[tuple[bytes, bytes]], rest: bytes) -> None:
        self.frames = frames
        self.rest = rest

    @classmethod
    def parse(cls, items: Iterable[Any]) -> EventStreamFrames:
        """Split stored raw chunks (`encode_chunk` values) into frames, wherever they fell."""
        data = b"".join(decode_chunk(item) for item in items)
        frames: list[tuple[bytes, bytes]] = []
        at, size = 0, len(data)
        while size - at >= _FRAME_OVERHEAD:
            total, headers_len, prelude_crc = struct.unpack_from(">III", data, at)
            end = at + total
            if (
                total < _FRAME_OVERHEAD
                or end > size
                or headers_len > total - _FRAME_OVERHEAD
                or zlib.crc32(data[at : at + 8]) != prelude_crc
                or zlib.crc32(data[at : end - 4]) != struct.unpack_from(">I", data, end - 4)[0]
            ):
                break
            start = at + _PRELUDE
            frames.append((data[start : start + headers_len], data[start + headers_len : end - 4]))
            at = end
        return cls(frames, data[at:])

    def payload_values(self) -> list[Any]:
        """Each frame's payload parsed when it is a JSON object or array, else None."""
        values: list[Any] = []
        for _, payload in self.frames:
            try:  # what starts with { or [ and parses is an object or array
                values.append(orjson.loads(payload) if payload[:1] in (b"{", b"[") else None)
            except orjson.JSONDecodeError:
                values.append(None)
        return values

    def items_with(self, values: list[Any]) -> list[Any]:
        """The stored chunks, one per frame and one for `rest`, each JSON payload replaced by its
        value in `values` (None: as it was), lengths and CRCs computed afresh for the client."""
        items: list[Any] = []
        for (headers, payload), value in zip(self.frames, values, strict=True):
            new = payload if value is None else orjson.dumps(value)
            prelude = struct.pack(">II", _FRAME_OVERHEAD + len(headers) + len(new), len(headers))
            message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + new
            items.append(encode_chunk(message + struct.pack(">I", zlib.crc32(message))))
        if self.rest:
            items.append(encode_chunk(self.rest))
        return items
