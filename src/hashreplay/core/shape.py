"""The shape of a response, compared with another's (the drift check, docs/design.md §15).

What a drift run compares of a live answer and its recording, and only that:

- the status;
- the set of field paths of a JSON body with their JSON types (`choices[].message.content`:
  `string`), a path's types united over the items of an array;
- for a stream, the event types in order with repeats of one type collapsed (ten
  `content_block_delta` events and three are both `content_block_delta`), and the field
  paths of each event type, united over its events;
- for a connection or an MCP session, its frames the same way: each frame's direction
  and what it is (a JSON-RPC method, `result of tools/call search`, a JSON frame's `type`)
  as its event type.

Never the generated text, nor how many deltas it took; volatile values (ids, times) keep
their types when normalised, so they never count. Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.format import Frame, FrameType, RecordedResponse
from hashreplay.core.streams import StreamFormat

#: The path of a body's own value.
_ROOT = "(body)"


def json_type(value: object) -> str:
    """The JSON type of a parsed value: `null`, `boolean`, `number`, `string`, `array`,
    `object` (integers and floats are both numbers, as in JSON)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def field_types(value: object, into: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Every field path of a JSON value with the types found there: `a.b`, `a[]` for the
    items of an array (united over all of them), the value itself under `(body)`."""
    found: dict[str, set[str]] = {} if into is None else into
    stack: list[tuple[str, object]] = [(_ROOT, value)]
    while stack:
        path, item = stack.pop()
        found.setdefault(path, set()).add(json_type(item))
        prefix = "" if path == _ROOT else path
        if isinstance(item, Mapping):
            for key, child in item.items():
                stack.append((f"{prefix}.{key}" if prefix else str(key), child))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{prefix}[]", child) for child in item)
    return found


@dataclass(frozen=True)
class Shape:
    """What drift compares of a response."""

    status: int | None
    #: `json`, `text`, `bytes`, `empty`, or `stream:<format>` (sse, ndjson, chunks, values)
    kind: str
    #: field path -> its types joined by `|` (a JSON body)
    fields: Mapping[str, str]
    #: the stream's event types in order, repeats of one type collapsed
    events: tuple[str, ...]
    #: event type -> field path -> types (the fields of a stream's events)
    event_fields: Mapping[str, Mapping[str, str]]


def _joined(found: Mapping[str, set[str]]) -> dict[str, str]:
    return {path: "|".join(sorted(types)) for path, types in found.items()}


def event_type(fmt: StreamFormat, event: object) -> tuple[str, object]:
    """An event's type and its payload: an SSE event's `event` name, else its data's `type`
    field, else `data` (JSON data) or `text`; an NDJSON line's or a value's `type` field,
    else `line` / the JSON type of the value."""
    payload = event
    if fmt is StreamFormat.SSE and isinstance(event, Mapping):
        payload = event.get("data")
        name = event.get("event")
        if isinstance(name, str) and name:
            return name, payload
    if isinstance(payload, Mapping):
        kind = payload.get("type")
        if isinstance(kind, str) and kind:
            return kind, payload
    if fmt is StreamFormat.SSE:
        return ("text" if isinstance(payload, str) else "data"), payload
    if fmt is StreamFormat.NDJSON:
        return "line", payload
    return json_type(payload), payload


def _frame_event(frame: Frame, requests: dict[str, str]) -> tuple[str, object]:
    """A frame's event type (its direction and what it is) and the part of it compared: a
    close by its code; a binary or plain-text frame by its type; a JSON-RPC request or
    notification by its method (`tools/call` with the tool's name), an answer by the request
    it answers (`result of tools/call search`), its `params` or `result` the fields; another
    JSON frame (a WebSocket API's event) by its `type` field, all of it the fields."""
    where = frame.direction.value
    if frame.type is FrameType.CLOSE:
        return f"{where} close {frame.code}", None
    if frame.type is FrameType.BINARY or frame.data_encoding is not None:
        return f"{where} {frame.type.value}", None
    data = frame.data
    if not isinstance(data, Mapping):
        return f"{where} {json_type(data)}", data
    method = data.get("method")
    if isinstance(method, str):
        params = data.get("params")
        name = params.get("name") if isinstance(params, Mapping) else None
        label = f"{method} {name}" if method == "tools/call" and isinstance(name, str) else method
        if "id" in data:
            requests[json_id(data["id"])] = label
        return f"{where} {label}", params
    if "jsonrpc" in data and ("result" in data or "error" in data):
        answered = requests.get(json_id(data.get("id")), "a request")
        part = "result" if "result" in data else "error"
        return f"{where} {part} of {answered}", data.get(part)
    kind = data.get("type")
    return f"{where} {kind if isinstance(kind, str) and kind else json_type(data)}", data


def json_id(value: object) -> str:
    """A JSON-RPC id as a key (`1` and `"1"` apart)."""
    return f"{type(value).__name__}:{value}"


def _frames_shape(response: RecordedResponse) -> Shape:
    """A connection's or MCP session's shape: its frames' event types in order (repeats of
    one collapsed, as a stream's) and the fields of each."""
    order: list[str] = []
    per_type: dict[str, dict[str, set[str]]] = {}
    requests: dict[str, str] = {}
    for frame in response.frames or []:
        name, payload = _frame_event(frame, requests)
        if not order or order[-1] != name:
            order.append(name)
        found = per_type.setdefault(name, {})
        if payload is not None:
            field_types(payload, found)
    fields = {name: _joined(found) for name, found in per_type.items()}
    return Shape(response.status, "frames", {}, tuple(order), fields)


def shape_of(response: RecordedResponse) -> Shape:
    """The shape of a stored (or a live, staged) response."""
    if response.frames is not None:
        return _frames_shape(response)
    body = response.body
    if response.is_streaming and response.stream_format is not None:
        fmt = StreamFormat(response.stream_format)
        kind = f"stream:{fmt.value}"
        if fmt is StreamFormat.CHUNKS or not isinstance(body, list):
            return Shape(response.status, kind, {}, (), {})  # raw bytes: no fields to compare
        order: list[str] = []
        per_type: dict[str, dict[str, set[str]]] = {}
        for event in body:
            name, payload = event_type(fmt, event)
            if not order or order[-1] != name:
                order.append(name)
            if fmt is StreamFormat.SSE and isinstance(payload, str):
                per_type.setdefault(name, {})  # text data: its words are not shape
            else:
                field_types(payload, per_type.setdefault(name, {}))
        fields = {name: _joined(found) for name, found in per_type.items()}
        return Shape(response.status, kind, {}, tuple(order), fields)
    encoding = BodyEncoding(response.body_encoding)
    if encoding is BodyEncoding.JSON and body is not None:
        return Shape(response.status, "json", _joined(field_types(body)), (), {})
    if body in (None, "", b"") or encoding is BodyEncoding.EMPTY:
        return Shape(response.status, "empty", {}, (), {})
    kind = "bytes" if encoding is BodyEncoding.BASE64 else "text"
    return Shape(response.status, kind, {}, (), {})


def _field_differences(
    where: str, recorded: Mapping[str, str], live: Mapping[str, str]
) -> list[str]:
    found: list[str] = []
    for path in sorted(recorded.keys() | live.keys()):
        was, now = recorded.get(path), live.get(path)
        if was == now:
            continue
        if was is None:
            found.append(f"{where}: field added {path} ({now})")
        elif now is None:
            found.append(f"{where}: field removed {path} ({was})")
        else:
            found.append(f"{where}: type of {path} changed from {was} to {now}")
    return found


def compare(recorded: Shape, live: Shape) -> list[str]:
    """The differences between a recorded and a live shape, most telling first (empty: the
    same shape). Pure: no I/O."""
    if recorded.status != live.status:
        return [f"status changed from {recorded.status} to {live.status}"]
    if recorded.kind != live.kind:
        return [f"body changed from {recorded.kind} to {live.kind}"]
    found: list[str] = []
    events, event = ("frames", "frame") if live.kind == "frames" else ("stream events", "event")
    if recorded.events != live.events:
        found.append(
            f"{events} changed from [{', '.join(recorded.events)}] to [{', '.join(live.events)}]"
        )
    found += _field_differences("body", recorded.fields, live.fields)
    for name in [*recorded.events, *(e for e in live.events if e not in recorded.events)]:
        was, now = recorded.event_fields.get(name), live.event_fields.get(name)
        if was is not None and now is not None:
            found += _field_differences(f"{event} {name}", was, now)
    return list(dict.fromkeys(found))
