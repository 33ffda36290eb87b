"""How deep a request body may nest (issue 13 item 13): `MAX_NESTING` levels.

The normaliser, the redactor and the canonical JSON of the hash all walk a body; orjson
refuses to serialise beyond 255 levels and Python's recursion limit is reached sooner on a
server's deeper stack. So a request nested deeper than `MAX_NESTING` is refused up front
with `RequestTooDeep`, the same in every intercepting mode, in-process and through the
proxy (live mode never looks at bodies). The check is nearly free for ordinary requests: a
body with fewer brackets than the limit cannot nest deeper, and only larger bodies are
walked (level by level, containers only, no recursion).
"""

from __future__ import annotations

from typing import Any, Protocol

from hashreplay.core.bodies import BodyEncoding, encode_request_body
from hashreplay.core.errors import HashReplayError

__all__ = [
    "MAX_NESTING",
    "RequestTooDeep",
    "check_nesting",
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
