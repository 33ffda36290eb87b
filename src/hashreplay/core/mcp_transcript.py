"""An MCP session's recording as a conversation of calls (docs/recordings.md, "MCP
sessions"): what `hashreplay textconv` and `git diff` show of it, one message per line in the
order they crossed, `→` what the client sent and `←` what the server sent:

    → tools/call search {"q":"cats"}
    ← result {"hits":["cats result 1"],"id":"rec-…"}

A tool's answer shows its structured content when it has one, else its text; `_meta` and
the JSON-RPC ids are left out (a changed question diffs as itself). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

from hashreplay.core.format import EndState, FrameDirection, RecordedResponse, Recording
from hashreplay.core.mcp import Kind, describe_command, kind_of

SENT_MARK = "→"
RECEIVED_MARK = "←"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _without_meta(value: Any) -> Any:
    return {k: v for k, v in value.items() if k != "_meta"} if isinstance(value, dict) else value


def _tool_answer(result: Any) -> str | None:
    """A `tools/call` result as its structured content, else its text (None: not one)."""
    if not isinstance(result, dict) or "content" not in result:
        return None
    prefix = "error " if result.get("isError") else ""
    if result.get("structuredContent") is not None:
        return prefix + _compact(result["structuredContent"])
    texts = [
        str(part.get("text", ""))
        for part in result.get("content") or []
        if isinstance(part, dict) and part.get("type") == "text"
    ]
    return prefix + " ".join(texts) if texts else None


def message_line(data: Any) -> str:
    """One JSON-RPC message as the conversation shows it (without its direction)."""
    kind = kind_of(data)
    if kind is None:
        return f"(not a JSON-RPC message) {_compact(data)}"
    if kind is Kind.REQUEST or kind is Kind.NOTIFICATION:
        method = str(data["method"])
        params = _without_meta(data.get("params"))
        if method == "tools/call" and isinstance(params, dict):
            arguments = params.get("arguments")
            shown = "" if not arguments else " " + _compact(arguments)
            return f"{method} {params.get('name', '?')}{shown}"
        return method if not params else f"{method} {_compact(params)}"
    if kind is Kind.ERROR:
        error = data.get("error")
        if isinstance(error, dict):
            return f"error {error.get('code', '?')}: {error.get('message', '')}"
        return f"error {_compact(error)}"
    result = _without_meta(data.get("result"))
    answer = _tool_answer(result)
    return f"result {answer if answer is not None else _compact(result)}"


def _end(response: RecordedResponse) -> str:
    ended = response.ended
    if ended is None or ended.state is EndState.COMPLETE:
        return "closed by the client"
    if ended.state is EndState.ERROR:
        return f"the server's output ended (it exited) after {ended.after_chunks} messages"
    return f"left open by the client after {ended.after_chunks} messages"


def session_lines(recording: Recording) -> list[str]:
    """The whole recording: the server's command line, the test, then each session."""
    lines = [
        f"MCP {describe_command(recording.request.body)}",
        f"test: {recording.test_id or '(none: made outside a test)'}",
    ]
    responses = recording.responses
    for index, response in enumerate(responses):
        label = "session" if len(responses) == 1 else f"session {index + 1}/{len(responses)}"
        lines.extend(["", f"{label}:"])
        for frame in response.frames or []:
            mark = SENT_MARK if frame.direction is FrameDirection.SENT else RECEIVED_MARK
            lines.append(f"{mark} {message_line(frame.data)}")
        lines.append(f"end: {_end(response)}")
    return lines
