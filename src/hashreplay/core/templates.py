"""Response templates (docs/scenarios.md): `{{request:<path>}}` in a recorded body, filled
from the live request at replay. Paths use the stored request layout (`headers.<lower-case
name>`). A string that is one marker takes the value's JSON type; in longer text the value
is written as text (JSON for objects and arrays). `{{{{` is a literal `{{`. A value filled
into a stream's line cannot break its framing. Pure: no I/O, no HTTP client.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import orjson

from hashreplay.core.constants import TEMPLATE_OPEN

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
