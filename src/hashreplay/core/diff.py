"""How two exchanges differ: the first field in which two requests differ (the miss report, the
name check, `hashreplay verify`), and the shape of a response compared with another's (the drift
check, docs/design.md §15). Loaded where a difference is shown, never on a replay that matches.

What a drift run compares of a live answer and its recording, and only that:

- the status;
- the set of field paths of a JSON body with their JSON types (`choices[].message.content`:
  `string`), a path's types united over the items of an array;
- for a stream, the event types in order with repeats of one type collapsed (ten
  `content_block_delta` events and three are both `content_block_delta`), and the field
  paths of each event type, united over its events.

Never the generated text, nor how many deltas it took; volatile values (ids, times) keep
their types when normalised, so they never count. Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hashreplay.core.blobs import describe_value
from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.format import RecordedResponse
from hashreplay.core.streams import StreamFormat

if TYPE_CHECKING:
    from hashreplay.core.format import RecordedRequest


_MISSING: Any = object()


SHORTEN_AT = 80


#: Strings longer than this are shown as digest, size and type (they are blob material:
#: base64 images, audio), never as their bytes.
LARGE_VALUE = 4096


@dataclass(frozen=True)
class Difference:
    path: str
    recorded: Any
    incoming: Any
    kind: str  # "value", "type", "missing" (absent from incoming), "added" (absent from recorded)

    def describe(self) -> str:
        if self.kind == "missing":
            return f"{self.path}: recorded {shorten(self.recorded)}, incoming has no such field"
        if self.kind == "added":
            return f"{self.path}: not in the recording, incoming {shorten(self.incoming)}"
        if self.kind == "type":
            return (
                f"{self.path}: recorded {type_label(self.recorded)} {shorten(self.recorded)}, "
                f"incoming {type_label(self.incoming)} {shorten(self.incoming)}"
            )
        if isinstance(self.recorded, str) and isinstance(self.incoming, str):
            rec, inc = shorten_pair(self.recorded, self.incoming)
            return f"{self.path}: recorded {rec}, incoming {inc}"
        return f"{self.path}: recorded {shorten(self.recorded)}, incoming {shorten(self.incoming)}"


def type_label(value: Any) -> str:
    if value is None:
        return "null"
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
    }.get(type(value), type(value).__name__)


def shorten(value: Any, limit: int = SHORTEN_AT) -> str:
    if isinstance(value, str) and len(value) > LARGE_VALUE:
        return describe_value(value)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shorten_pair(a: str, b: str, limit: int = SHORTEN_AT) -> tuple[str, str]:
    """Both strings shortened around where they first differ, not cut at the start."""
    if len(a) <= limit and len(b) <= limit:
        return repr(a), repr(b)
    if len(a) > LARGE_VALUE or len(b) > LARGE_VALUE:
        return shorten(a, limit), shorten(b, limit)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    lead = max(0, start - limit // 3)
    return _window(a, lead, limit), _window(b, lead, limit)


def _window(text: str, lead: int, limit: int) -> str:
    piece = text[lead : lead + limit]
    prefix = "…" if lead else ""
    suffix = "…" if lead + limit < len(text) else ""
    return f"{prefix}{piece!r}{suffix}"


def first_difference(recorded: Any, incoming: Any, path: str = "") -> Difference | None:
    """The first differing field path with both values, or None when they are equal."""
    if recorded is incoming:
        return None
    if isinstance(recorded, dict) and isinstance(incoming, dict):
        for key in sorted(set(recorded) | set(incoming), key=str):
            here = f"{path}.{key}" if path else str(key)
            a, b = recorded.get(key, _MISSING), incoming.get(key, _MISSING)
            if a is _MISSING:
                return Difference(here, None, b, "added")
            if b is _MISSING:
                return Difference(here, a, None, "missing")
            found = first_difference(a, b, here)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(incoming, list):
        for index in range(max(len(recorded), len(incoming))):
            here = f"{path}[{index}]"
            if index >= len(incoming):
                return Difference(here, recorded[index], None, "missing")
            if index >= len(recorded):
                return Difference(here, None, incoming[index], "added")
            found = first_difference(recorded[index], incoming[index], here)
            if found is not None:
                return found
        return None
    if type_label(recorded) != type_label(incoming):
        return Difference(path or "(value)", recorded, incoming, "type")
    if recorded != incoming:
        return Difference(path or "(value)", recorded, incoming, "value")
    return None


def count_differences(recorded: Any, incoming: Any, cap: int = 1000) -> int:
    """How many leaf fields differ (capped): used to rank the nearest recording."""
    if isinstance(recorded, dict) and isinstance(incoming, dict):
        total = 0
        for key in set(recorded) | set(incoming):
            if key not in recorded or key not in incoming:
                total += 1
            else:
                total += count_differences(recorded[key], incoming[key], cap - total)
            if total >= cap:
                return cap
        return total
    if isinstance(recorded, list) and isinstance(incoming, list):
        total = abs(len(recorded) - len(incoming))
        for a, b in zip(recorded, incoming, strict=False):
            total += count_differences(a, b, cap - total)
            if total >= cap:
                return cap
        return total
    return 0 if recorded == incoming else 1


def request_difference(recorded: RecordedRequest, incoming: RecordedRequest) -> Difference | None:
    """The first difference, the method and endpoint before any body field."""
    for field in ("method", "endpoint"):
        a, b = getattr(recorded, field), getattr(incoming, field)
        if a != b:
            return Difference(field, a, b, "value")
    return first_difference(recorded.body, incoming.body, "body")


__all__ = ["Shape", "compare", "event_type", "field_types", "json_type", "shape_of"]


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


def shape_of(response: RecordedResponse) -> Shape:
    """The shape of a stored (or a live, staged) response."""
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
    if recorded.events != live.events:
        found.append(
            "stream events changed from "
            f"[{', '.join(recorded.events)}] to [{', '.join(live.events)}]"
        )
    found += _field_differences("body", recorded.fields, live.fields)
    for name in [*recorded.events, *(e for e in live.events if e not in recorded.events)]:
        was, now = recorded.event_fields.get(name), live.event_fields.get(name)
        if was is not None and now is not None:
            found += _field_differences(f"event {name}", was, now)
    return list(dict.fromkeys(found))
