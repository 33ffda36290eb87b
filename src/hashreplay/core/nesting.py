"""How deep a body may nest: `MAX_NESTING` levels (docs/design.md §13).

The normaliser, the redactor and the canonical JSON of the hash all walk a body; orjson
refuses to serialise beyond 255 levels and Python's recursion limit is reached sooner on a
server's deeper stack. So a request nested deeper than `MAX_NESTING` is refused up front
with `RequestTooDeep`, the same in every intercepting mode, in-process and through the
proxy (live mode never looks at bodies). The check is nearly free for ordinary requests: a
body with fewer brackets than the limit cannot nest deeper, and only larger bodies are
walked (level by level, containers only, no recursion).

The same limit holds for every body hashreplay stores or reads: a response on its way to
a file (`deep_field`, in staging: a live answer, an import), a recording file when it is
read (`deep_recording_field`, so replay, `verify`, `rehash`, `normalize`, `list` and the
review commands all see a `RecordingError` naming the file and the field path), and the
files `import vcr|ogx` read. Nothing deeper ever reaches a recursive walk.
"""

from __future__ import annotations

from typing import Any, Protocol

from hashreplay.core.bodies import BodyEncoding, encode_request_body
from hashreplay.core.errors import HashReplayError

__all__ = [
    "MAX_NESTING",
    "RequestTooDeep",
    "TooDeep",
    "check_nesting",
    "deep_field",
    "deep_recording_field",
    "nesting_depth",
    "parse_checked_body",
]

#: The deepest nesting of lists and objects a request body may have.
MAX_NESTING = 128


class RequestTooDeep(HashReplayError):
    """A request body nested deeper than `MAX_NESTING` levels."""

    def __init__(self, what: str, depth: int | None = None) -> None:
        self.depth = depth
        seen = f" (at least {depth})" if depth is not None else ""
        super().__init__(
            f"{what}: the body is nested more than {MAX_NESTING} levels deep{seen}, deeper "
            "than hashreplay records or replays; flatten it, or run this test in live mode "
            "(INFERENCE_MODE=live)"
        )


class TooDeep(HashReplayError):
    """A value to be stored (a response, an imported body) nested deeper than
    `MAX_NESTING` levels; `where` is its field path."""

    def __init__(self, where: str, next_step: str) -> None:
        self.where = where
        super().__init__(f"{where}: {too_deep_problem()}; {next_step}")


def too_deep_problem() -> str:
    return f"nested more than {MAX_NESTING} levels deep, deeper than hashreplay stores or reads"


#: how many steps of a field path an error shows before `…`
_SHOWN_STEPS = 6


def deep_field(value: Any, where: str, limit: int = MAX_NESTING) -> str | None:
    """The field path (starting at `where`) of the first place `value` nests deeper than
    `limit` levels, or None when it does not. Walked with a stack, never recursively."""
    if not isinstance(value, (dict, list, tuple)):
        return None
    if nesting_depth(value, stop_after=limit) <= limit:
        return None
    stack: list[tuple[Any, int, str]] = [(value, 1, where)]
    while stack:
        node, depth, path = stack.pop()
        if depth > limit:
            return path
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, (dict, list, tuple)):
                if depth < _SHOWN_STEPS:
                    step = f".{key}" if isinstance(key, str) else f"[{key}]"
                else:
                    step = "…" if depth == _SHOWN_STEPS else ""
                stack.append((child, depth + 1, path + step))
    return None  # pragma: no cover - nesting_depth said it goes deeper


def deep_recording_field(data: dict[str, Any]) -> str | None:
    """The field path of a recording file's JSON (`data`) that nests too deep: any body or
    exception's arguments deeper than `MAX_NESTING` levels, or anything else in the file
    deeper than that plus the file's own few levels. None when nothing does."""
    fields: list[tuple[Any, str]] = []
    request = data.get("request")
    if isinstance(request, dict):
        fields.append((request.get("body"), "request.body"))
    later = data.get("later_responses")
    responses = [(data.get("response"), "response")]
    if isinstance(later, list):
        responses.extend((r, f"later_responses[{i}]") for i, r in enumerate(later))
    for response, where in responses:
        if isinstance(response, dict):
            fields.append((response.get("body"), f"{where}.body"))
            exception = response.get("exception")
            if isinstance(exception, dict):
                fields.append((exception.get("args"), f"{where}.exception.args"))
    for value, where in fields:
        found = deep_field(value, where)
        if found is not None:
            return found
    # anything else (fields a later format version added, kept as they are)
    return deep_field(data, "(file)", MAX_NESTING + _SHOWN_STEPS)


def nesting_depth(value: Any, stop_after: int | None = None) -> int:
    """The nesting depth of lists and dicts in `value` (a scalar is 0); stops counting once
    it exceeds `stop_after`."""
    level = [value] if isinstance(value, (dict, list, tuple)) else []
    depth = 0
    while level:
        depth += 1
        if stop_after is not None and depth > stop_after:
            return depth
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below.extend(c for c in children if isinstance(c, (dict, list, tuple)))
        level = below
    return depth


def check_nesting(content: bytes, parsed: Any, what: str) -> None:
    """Raise `RequestTooDeep` when `parsed` (the body parsed from `content`) nests deeper
    than `MAX_NESTING`."""
    if not isinstance(parsed, (dict, list)):
        return
    if content.count(b"[") + content.count(b"{") <= MAX_NESTING:
        return  # not enough brackets to nest that deep
    depth = nesting_depth(parsed, stop_after=MAX_NESTING)
    if depth > MAX_NESTING:
        raise RequestTooDeep(what, depth)


class _Request(Protocol):
    @property
    def content(self) -> bytes: ...

    def header(self, name: str) -> str | None: ...


def parse_checked_body(request: _Request, what: str) -> tuple[Any, BodyEncoding]:
    """The stored form of a request body (`encode_request_body`), refused with
    `RequestTooDeep` when it nests deeper than `MAX_NESTING`."""
    try:
        parsed, encoding = encode_request_body(request.content, request.header("content-type"))
    except RecursionError:  # the pure-Python JSON fallback, past ~1,000 levels
        raise RequestTooDeep(what) from None
    check_nesting(request.content, parsed, what)
    return parsed, encoding
