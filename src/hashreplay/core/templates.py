"""Response templates: `{{request:<path>}}` in a recorded body, filled from the live request
at replay (docs/scenarios.md), so an answer can echo what the application sent this time.

Paths use the stored request layout: `body.messages[-1].content`, `body.metadata.trace_id`,
`endpoint`, `method`, `url`, `headers.<lower-case name>`. A string that is one marker and
nothing else takes the value's own JSON type; inside longer text the value is written as
text (JSON for objects and arrays). `{{{{` is a literal `{{`. Pure: no I/O, no HTTP client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
        step = re.compile(_STEP).match(path, at)
        if step is None:
            msg = f"template path {path!r} does not parse at {path[at:]!r}; {PATH_FORMS}"
            raise TemplateError(msg, syntax=True)
        steps.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        at = step.end()
    return root.group(), steps


_MISSING = object()


def resolve(path: str, request: Mapping[str, Any]) -> Any:
    """The value at `path` in the request layout; a TemplateError naming the path if none."""
    root, steps = parse_path(path)
    value: Any = request.get(root, _MISSING)
    for step in steps:
        value = _step(value, step)
        if value is _MISSING:
            break
    if value is _MISSING or (value is None and root != "body"):
        msg = f"template {{{{request:{path}}}}}: this request has nothing at {path!r}"
        raise TemplateError(msg, syntax=False)
    return value


def _step(value: Any, step: str | int) -> Any:
    if isinstance(step, int):
        if isinstance(value, list) and -len(value) <= step < len(value):
            return value[step]
        return _MISSING
    if isinstance(value, dict) and step in value:
        return value[step]
    return _MISSING


def has_markers(value: Any) -> bool:
    """Whether any string in `value` holds `{{request:` (or an escape to undo)."""
    if isinstance(value, str):
        return "{{" in value
    if isinstance(value, (dict, list)):
        return b"{{" in orjson.dumps(value)
    return False


def fill(value: Any, request: Mapping[str, Any]) -> Any:
    """`value` with every marker filled from `request` (strings inside dicts and lists)."""
    if isinstance(value, str):
        return fill_text(value, request) if "{{" in value else value
    if isinstance(value, dict):
        return {k: fill(v, request) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, request) for v in value]
    return value


def fill_text(text: str, request: Mapping[str, Any]) -> Any:
    if text.startswith(TEMPLATE_OPEN) and text.endswith("}}") and text.count("{{") == 1:
        return resolve(text[len(TEMPLATE_OPEN) : -2], request)  # keeps its JSON type
    out: list[str] = []
    at = 0
    while True:
        start = text.find("{{", at)
        if start < 0:
            out.append(text[at:])
            return "".join(out)
        out.append(text[at:start])
        if text.startswith("{{{{", start):
            out.append("{{")
            at = start + 4
        elif text.startswith(TEMPLATE_OPEN, start):
            end = text.find("}}", start)
            if end < 0:
                msg = f"template {text[start : start + 60]!r} is not closed with }}}}; {PATH_FORMS}"
                raise TemplateError(msg, syntax=True)
            value = resolve(text[start + len(TEMPLATE_OPEN) : end], request)
            out.append(value if isinstance(value, str) else orjson.dumps(value).decode())
            at = end + 2
        else:
            out.append("{{")
            at = start + 2
