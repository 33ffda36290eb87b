"""The first field in which two values differ, and how to show it (the miss report, the name
check, `hashreplay verify`). Loaded where a difference is shown, never on a replay that
matches. Pure functions: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hashreplay.core.blobs import describe_value

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
