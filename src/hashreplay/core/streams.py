"""What a stored response body holds, beyond plain JSON or text.

Streamed bodies as ordered, readable records: SSE events, NDJSON lines, raw chunks. Parsing
happens once, when a recording is written; rendering happens on replay and yields one chunk
per event (or line), so an SDK's stream parser sees a real stream.

Response templates: `{{request:<path>}}` in a recorded body, filled from the live request at
replay (docs/scenarios.md). Paths use the stored request layout (`headers.<lower-case name>`).
A string that is one marker takes the value's JSON type; in longer text the value is written
as text (JSON for objects and arrays). `{{{{` is a literal `{{`. Pure: no I/O, no HTTP client.
"""

from __future__ import annotations

import base64
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from enum import Enum
from functools import partial
from typing import Any

import orjson

from hashreplay.core.constants import TEMPLATE_OPEN


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
        return events[-1].get("event") in TERMINAL_EVENTS or (
            isinstance(kind, str) and kind in TERMINAL_EVENTS
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


ROOTS = ("body", "endpoint", "headers", "method", "url")

PATH_FORMS = (
    "{{request:<path>}} where <path> is body.<key>… with [<index>] steps (negative from the "
    "end), headers.<name>, endpoint, method or url; e.g. {{request:body.messages[-1].content}}"
)

#: compiled on first use (only scenarios fill templates), not at import
_STEP = r"\.([A-Za-z0-9_\-]+)|\[(-?\d+)\]"

_ROOT = r"[A-Za-z_]+"

_MISSING = object()


class TemplateError(ValueError):
    """A marker that does not parse (`syntax`) or resolves to nothing in this request."""

    def __init__(self, message: str, *, syntax: bool) -> None:
        super().__init__(message)
        self.syntax = syntax


def parse_path(path: str) -> tuple[str, list[str | int]]:
    """`body.messages[-1].content` -> ("body", ["messages", -1, "content"])."""
    root = re.match(_ROOT, path)
    if root is None or root.group() not in ROOTS:
        msg = f"template path {path!r} must start with one of {', '.join(ROOTS)}; {PATH_FORMS}"
        raise TemplateError(msg, syntax=True)
    steps: list[str | int] = []
    at = root.end()
    while at < len(path):
        if (step := re.compile(_STEP).match(path, at)) is None:
            msg = f"template path {path!r} does not parse at {path[at:]!r}; {PATH_FORMS}"
            raise TemplateError(msg, syntax=True)
        steps.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        at = step.end()
    return root.group(), steps


def resolve(path: str, request: Mapping[str, Any]) -> Any:
    """The value at `path` in the request layout; a TemplateError naming the path if none."""
    root, steps = parse_path(path)
    value: Any = request.get(root, _MISSING)
    for step in steps:
        if isinstance(step, int):
            found = isinstance(value, list) and -len(value) <= step < len(value)
        else:
            found = isinstance(value, dict) and step in value
        value = value[step] if found else _MISSING
    if value is _MISSING or (value is None and root != "body"):
        msg = f"template {{{{request:{path}}}}}: this request has nothing at {path!r}"
        raise TemplateError(msg, syntax=False)
    return value


def has_markers(value: Any) -> bool:
    """Whether any string in `value` holds `{{request:` (or an escape to undo)."""
    if isinstance(value, str):
        return "{{" in value
    return isinstance(value, (dict, list)) and b"{{" in orjson.dumps(value)


def _map_strings(value: Any, text: Callable[[str], Any], *, dicts: bool = True) -> Any:
    if isinstance(value, str):
        return text(value) if "{{" in value else value
    if dicts and isinstance(value, dict):
        return {k: _map_strings(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, text, dicts=dicts) for v in value]
    return value


def fill(value: Any, request: Mapping[str, Any]) -> Any:
    """`value` with every marker filled from `request` (strings inside dicts and lists)."""
    return _map_strings(value, lambda text: fill_text(text, request))


def fill_text(text: str, request: Mapping[str, Any], *, framing: str = "", where: str = "") -> Any:
    """`text` with its markers filled. With `framing` (the characters that frame a stream: CR,
    LF), a value holding one of them is refused, naming the template and `where` it is."""
    if "{{" not in text:
        return text
    if text.startswith(TEMPLATE_OPEN) and text.endswith("}}") and text.count("{{") == 1:
        path = text[len(TEMPLATE_OPEN) : -2]
        value = resolve(path, request)  # keeps its JSON type
        if framing and isinstance(value, str):
            _check_framing(path, value, framing, where)
        return value
    out: list[str] = []
    at = 0
    while (start := text.find("{{", at)) >= 0:
        out.append(text[at:start])
        if not text.startswith(TEMPLATE_OPEN, start):  # `{{{{` is `{{`, and so is any other `{{`
            out.append("{{")
            at = start + (4 if text.startswith("{{{{", start) else 2)
            continue
        if (end := text.find("}}", start)) < 0:
            msg = f"template {text[start : start + 60]!r} is not closed with }}}}; {PATH_FORMS}"
            raise TemplateError(msg, syntax=True)
        path = text[start + len(TEMPLATE_OPEN) : end]
        value = resolve(path, request)
        filled = value if isinstance(value, str) else orjson.dumps(value).decode()
        if framing:
            _check_framing(path, filled, framing, where)
        out.append(filled)
        at = end + 2
    return "".join(out) + text[at:]


def escape(value: Any) -> Any:
    """`value` with every `{{` in its strings (not dict keys) written `{{{{`, so text from a live
    upstream (a model asked to print `{{request:body.model}}`) is never a template on replay:
    `fill` gives back the exact original text (docs/scenarios.md, "Templates")."""
    return _map_strings(value, lambda text: text.replace("{{", "{{{{"))


#: What frames an SSE or NDJSON stream: a line break ends a field, a blank line an event.
LINE_BREAKS = "\r\n"

#: SSE `data` text is written one `data:` line per line of the value, which the client joins
#: with LF again: only CR (which the client also reads as a line end) cannot go there.
CARRIAGE_RETURN = "\r"

_SSE_LINES = ("event", "id", "retry")


def _check_framing(path: str, value: str, framing: str, where: str) -> None:
    if found := [repr(c) for c in framing if c in value]:
        msg = (
            f"template {{{{request:{path}}}}} in {where} is refused: its value holds "
            f"{' and '.join(found)}, which would break the stream's framing (a new field, line "
            "or event the upstream never sent). In a stream a template can fill JSON data (its "
            "strings are JSON-escaped) and the text of an SSE `data` field (CR excepted); move "
            "the template into the event's JSON data, or match a request whose value has no "
            "line break"
        )
        raise TemplateError(msg, syntax=False)


def fill_stream(fmt: str | None, items: Any, request: Mapping[str, Any]) -> Any:
    """A recorded stream (`fmt`: `sse`, `ndjson`, `chunks`, `values`) with its markers filled,
    where no value can add framing: values inside JSON data are JSON-encoded; one that would put
    a line break into a text line of the stream is a TemplateError naming template and field."""
    if fmt not in ("sse", "ndjson") or not isinstance(items, list):
        return fill(items, request)
    out: list[Any] = []
    for index, item in enumerate(items):
        where = f"stream event {index}"
        if fmt == "ndjson" and isinstance(item, str):
            out.append(fill_text(item, request, framing=LINE_BREAKS, where=f"{where} (a line)"))
        elif fmt == "sse" and isinstance(item, dict):
            out.append({key: _fill_field(key, v, request, where) for key, v in item.items()})
        else:
            out.append(fill(item, request))
    return out


def _fill_field(key: str, value: Any, request: Mapping[str, Any], where: str) -> Any:
    at = f"{where}, field {key!r}"
    if key == "data" and isinstance(value, str):
        return fill_text(value, request, framing=CARRIAGE_RETURN, where=at)
    if key in ("comments", "fields") or (key in _SSE_LINES and isinstance(value, str)):
        line = partial(fill_text, request=request, framing=LINE_BREAKS, where=at)
        return _map_strings(value, line, dicts=False)
    return fill(value, request)
