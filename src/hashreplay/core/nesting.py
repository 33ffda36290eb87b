"""How deep a body may nest: `MAX_NESTING` levels (docs/design.md §13).

orjson serialises at most 255 levels and a server's deeper stack reaches Python's recursion
limit sooner, so nothing deeper ever reaches the normaliser, the redactor or the hash. A
request is refused with `RequestTooDeep` in every intercepting mode, in-process and through
the proxy (live mode never looks at bodies); a response being stored (`deep_field`), a
recording file being read (`deep_recording_field`: a `RecordingError` naming the file and
field path) and the files `import vcr|ogx` read are held to the same limit."""

from __future__ import annotations

from typing import Any, Protocol

from hashreplay.core.bodies import BodyEncoding, encode_request_body
from hashreplay.core.errors import HashReplayError

#: The deepest nesting of lists and objects a body may have.
MAX_NESTING = 128
#: how many steps of a field path an error shows before `…`
_SHOWN_STEPS = 6


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
    """A value to store (a response, an imported body) nested too deep at field path `where`."""

    def __init__(self, where: str, next_step: str) -> None:
        self.where = where
        super().__init__(f"{where}: {too_deep_problem()}; {next_step}")


def too_deep_problem() -> str:
    return f"nested more than {MAX_NESTING} levels deep, deeper than hashreplay stores or reads"


def deep_field(value: Any, where: str, limit: int = MAX_NESTING) -> str | None:
    """The field path (from `where`) where `value` first nests deeper than `limit` levels,
    or None. Walked with a stack, never recursively."""
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
    """The field path in a recording file's JSON that nests too deep (None when none does):
    a body or exception's args past `MAX_NESTING`, else past that plus the file's own levels."""
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
    """How deep lists and dicts nest in `value` (a scalar: 0), counted to `stop_after` + 1."""
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


class _Request(Protocol):
    @property
    def content(self) -> bytes: ...

    def header(self, name: str) -> str | None: ...


def parse_checked_body(request: _Request, what: str) -> tuple[Any, BodyEncoding]:
    """The stored form of a request body (`encode_request_body`), refused with
    `RequestTooDeep` when it nests deeper than `MAX_NESTING`; nearly free for ordinary
    requests, as only a body with more brackets than the limit is walked."""
    content = request.content
    try:
        parsed, encoding = encode_request_body(content, request.header("content-type"))
    except RecursionError:  # the pure-Python JSON fallback, past ~1,000 levels
        raise RequestTooDeep(what) from None
    if isinstance(parsed, (dict, list)) and content.count(b"[") + content.count(b"{") > MAX_NESTING:
        depth = nesting_depth(parsed, stop_after=MAX_NESTING)
        if depth > MAX_NESTING:
            raise RequestTooDeep(what, depth)
    return parsed, encoding
