"""MCP sessions as hashreplay keys, compares and normalises them (docs/design.md, "MCP
servers"): pure rules over JSON-RPC messages as JSON values, no `mcp` import.

- **The key of a session**: the server's command line, as `stdio_request` gives it: the
  executable's name (its basename: `/usr/bin/python3` and `python3` are one server) and its
  arguments, redacted and normalised like a body by the keyer. The environment and the
  working directory are never part of it.
- **What is compared**: a client request by its `method` and its `params` without `_meta`
  (`progressToken` and the like are the client's bookkeeping); `initialize` by
  `protocolVersion` and `capabilities` only (`clientInfo` names the client's version); an
  answer the client gives to a server's request by its `result` (without `_meta`) or its
  `error`. The JSON-RPC `id` is never compared: replay answers with the live one.
- **What is normalised before writing**: a session's frames are normalised as a
  WebSocket connection's are (`core/frames.normalised_frames`: ids at id keys stable, times
  at time keys fixed, the client's messages as request bodies), after `prepared_frames`
  adds what MCP servers put elsewhere, in what the server fills (`result`, `params`,
  `error`; never the envelope's `id`, the client's numbering or the server's own request
  counter): every uuid inside a string becomes a stable `rec-` id too, and a time at a
  time key is also replaced where the message's texts repeat it (a tool's text content
  that repeats its structured result).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any

from hashreplay.core.constants import FIXED_EPOCH, MCP_STDIO_METHOD
from hashreplay.core.format import Frame, FrameDirection
from hashreplay.core.normalise import IdRegistry
from hashreplay.core.normalise_response import RESPONSE_TIME_KEYS, strings_at


class Kind(str, Enum):
    """What a JSON-RPC message is."""

    REQUEST = "request"
    NOTIFICATION = "notification"
    RESULT = "result"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value

    @property
    def is_answer(self) -> bool:
        return self in (Kind.RESULT, Kind.ERROR)


def kind_of(message: Any) -> Kind | None:
    """The kind of a JSON-RPC message (None: not one, e.g. a batch or garbage)."""
    if not isinstance(message, dict):
        return None
    if isinstance(message.get("method"), str):
        return Kind.REQUEST if "id" in message else Kind.NOTIFICATION
    if "id" in message:
        if "error" in message:
            return Kind.ERROR
        if "result" in message:
            return Kind.RESULT
    return None


def method_of(message: Mapping[str, Any]) -> str | None:
    method = message.get("method")
    return method if isinstance(method, str) else None


#: The fields of `initialize`'s params that are compared; `clientInfo` is not.
INITIALIZE_COMPARED = ("protocolVersion", "capabilities")


def _without_meta(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "_meta"}
    return value


def compared(message: Mapping[str, Any]) -> Any:
    """What of a client message is compared with the recorded one: `params` of a request
    or notification (`initialize`: its compared fields), the `result` or `error` of an
    answer; `_meta` and the `id` never."""
    if "method" in message:
        params = _without_meta(message.get("params"))
        if message.get("method") == "initialize" and isinstance(params, dict):
            return {k: params[k] for k in INITIALIZE_COMPARED if k in params}
        return {} if params is None else params
    if "error" in message:
        return {"error": _without_meta(message.get("error"))}
    return {"result": _without_meta(message.get("result"))}


def compared_path(message: Mapping[str, Any]) -> str:
    """Where `compared` took its value from, as a miss report names a field."""
    if "method" in message:
        return "params"
    return ""


def progress_token(message: Mapping[str, Any]) -> Any:
    """The `progressToken` a client request asked progress under (None: none)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def with_progress_token(message: dict[str, Any], token: Any) -> dict[str, Any]:
    """A `notifications/progress` message with its `progressToken` set to `token`."""
    params = message.get("params")
    if not isinstance(params, dict):
        return message
    return {**message, "params": {**params, "progressToken": token}}


def executable_name(command: str) -> str:
    """The executable as the key holds it: its basename (POSIX or Windows separators), so
    a server found through another path or interpreter location is the same server."""
    return re.split(r"[\\/]", command.rstrip("/\\"))[-1] or command


def stdio_request(command: str, args: Collection[str]) -> tuple[str, str, dict[str, Any]]:
    """The `method`, URL and body a stdio session is keyed and stored under: `MCP`,
    `mcp+stdio:<executable>` and `{"command": <executable>, "args": [...]}` (the keyer
    redacts and normalises the body, so a key-looking argument is never written)."""
    name = executable_name(os.fspath(command))
    return MCP_STDIO_METHOD, f"mcp+stdio:{name}", {"command": name, "args": list(args)}


def describe_command(body: Any) -> str:
    """The command line of a stored session, for reports: `python3 server.py tools`."""
    if not isinstance(body, dict):
        return "?"
    args = body.get("args")
    parts = [str(body.get("command", "?"))]
    if isinstance(args, list):
        parts += [str(a) for a in args]
    return " ".join(parts)


# --- normalising what the server sent --------------------------------------------------------


@functools.cache
def _uuid() -> re.Pattern[str]:
    return re.compile(
        r"(?i)(?<![0-9a-f])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-f])"
    )


def strings_of(value: Any) -> Iterator[str]:
    """Every string inside a JSON value."""
    for _, text in strings_at(value, ""):
        yield text


def server_times(message: Mapping[str, Any]) -> set[str]:
    """The times (strings at time keys) a server's message carries in what it fills."""
    found: set[str] = set()
    for part in SERVER_PARTS:
        _times(message.get(part), found)
    return found


def _times(value: Any, into: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in RESPONSE_TIME_KEYS and isinstance(item, str) and item != FIXED_EPOCH:
                into.add(item)
            else:
                _times(item, into)
    elif isinstance(value, list):
        for item in value:
            _times(item, into)


def _replace_in_texts(value: Any, originals: Collection[str], by: str) -> Any:
    if isinstance(value, str):
        for original in originals:
            if original in value:
                value = value.replace(original, by)
        return value
    if isinstance(value, dict):
        return {k: _replace_in_texts(v, originals, by) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_in_texts(v, originals, by) for v in value]
    return value


#: The parts of a JSON-RPC message that the server fills; the envelope (`jsonrpc`, `id`,
#: `method`) is left as it was sent.
SERVER_PARTS = ("result", "params", "error")


def prepared_server_message(
    message: dict[str, Any],
    ids: IdRegistry,
    *,
    where: str,
    known_ids: Mapping[str, str] | None = None,
    named: Collection[str] = frozenset(),
) -> dict[str, Any]:
    """What the frames' normaliser (`core/frames.normalised_frames`, which makes the ids at
    id keys stable and fixes the times at time keys) cannot see in a server's message: every
    uuid inside a string of its `result`, `params` or `error` is registered in `ids` (the
    session's registry, so the normaliser maps it wherever it appears), and each time at a
    time key is replaced inside the message's other strings by the fixed epoch (a tool's
    text content that repeats its structured result). `where` labels the message in the
    file (`response.frames[3].data`); `known_ids` are ids the test received earlier (mapped
    by the normaliser, not registered again); `named` the strings the client sent before
    (kept: the client's own values)."""
    out = dict(message)
    for part in SERVER_PARTS:
        if part not in out:
            continue
        value = out[part]
        for path, text in strings_at(value, f"{where}.{part}"):
            for found in _uuid().finditer(text):
                token = found.group()
                if (known_ids is not None and token in known_ids) or token in named:
                    continue
                ids.assign(token, path)
        times: set[str] = set()
        _times(value, times)
        if times:
            out[part] = _replace_in_texts(value, sorted(times, key=len, reverse=True), FIXED_EPOCH)
    return out


def prepared_frames(
    frames: Sequence[Frame],
    ids: IdRegistry,
    *,
    where: str,
    known_ids: Mapping[str, str] | None = None,
) -> list[Frame]:
    """An MCP session's frames ready for the frames' normaliser: each received JSON-RPC
    message `prepared_server_message`, with the strings the client sent before it named."""
    sent: set[str] = set()
    out = []
    for index, frame in enumerate(frames):
        data = frame.data
        if frame.direction is FrameDirection.SENT:
            sent.update(text for _, text in strings_at(data, ""))
        elif isinstance(data, dict) and frame.data_encoding is None:
            named = frozenset(sent - ids.stable.keys())
            data = prepared_server_message(
                data, ids, where=f"{where}[{index}].data", known_ids=known_ids, named=named
            )
            out.append(frame.replace(data=data))
            continue
        out.append(frame)
    return out
