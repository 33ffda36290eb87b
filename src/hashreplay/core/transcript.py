"""A recording as a readable conversation, one fact per line: what `git diff` shows of it. Volatile
noise (stable ids, id mapping, JSON punctuation) is left out: a changed prompt diffs as itself."""

from __future__ import annotations

import re
from typing import Any

import orjson
import xxhash

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.conversation import conversation, payloads, reply, response_tokens
from hashreplay.core.errors import RecordingError
from hashreplay.core.format import RecordedRequest, RecordedResponse, Recording
from hashreplay.core.keys import model_ids
from hashreplay.core.store import parse_recording

#: Request body keys not listed as parameters: shown apart, and (with turns) those the turns show.
_APART_KEYS = frozenset({"model", "tools", "stream"})
_SHOWN_KEYS = _APART_KEYS | {"messages", "system", "instructions", "prompt", "input"}
_LONG_NUMBERS = 8
#: How the textconv view of a corrupt recording, and of one no conversation view fits, starts.
CORRUPT_MARK = "hashreplay: this recording cannot be read"
UNVIEWABLE_MARK = "hashreplay: this recording has no conversation view"

#: C0 controls but newline and tab (so ESC, a bare CR), DEL, C1 controls, the bidi overrides: what
#: would move the cursor, set the title, write the clipboard (OSC 52), overwrite or reorder text.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{code:02x}" if (code := ord(match.group(0))) < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character shown as an escape (`\\x1b`), newlines and tabs
    kept: all recorded data is shown, never acts on the terminal of whoever runs `git diff`."""
    return _UNPRINTABLE.sub(_escape, text)


def transcript(recording: Recording) -> str:
    """The request (method, endpoint, model, messages, tool calls and results, parameters), then
    each response (status, answer with streamed text joined, tool calls, tokens, how it ended)."""
    lines = _request_lines(recording)
    responses = recording.responses
    for index, response in enumerate(responses):
        label = "response" if len(responses) == 1 else f"response {index + 1}/{len(responses)}"
        lines.extend(["", *_response_lines(label, response)])
    return "\n".join(lines) + "\n"


def textconv(content: bytes) -> bytes:
    """What git shows for a file: a recording as its transcript, anything else unchanged. It
    never fails (git would drop the whole diff): a corrupt recording shows as the error and its
    raw text, a body of a shape no view foresaw as the file itself, a blob as its reference."""
    if not looks_like_recording(content):
        return content
    raw = content.decode("utf-8", errors="replace")
    try:
        recording = parse_recording(content, None, lambda ref, _path: ref.describe())
    except RecordingError as exc:
        return printable(f"{CORRUPT_MARK}: {exc.problem}\n\n{raw}").encode()
    try:
        text = transcript(recording)
    except Exception as exc:  # a body shape no view foresaw: show the file, never fail git
        text = f"{UNVIEWABLE_MARK} ({type(exc).__name__}: {exc}); as stored:\n\n{raw}"
    return printable(text).encode()


def looks_like_recording(content: bytes) -> bool:
    """A JSON object that names a recording format version (possibly truncated or broken)."""
    return content.lstrip().startswith(b"{") and b'"format_version"' in content[:4096]


def _request_lines(recording: Recording) -> list[str]:
    request = recording.request
    lines = [f"{request.method} {request.endpoint}"]
    if request.model:
        lines.append(f"model: {request.model}")
    lines.append(f"test: {recording.test_id or '(none: shared, or made outside a test)'}")
    lines.extend(f"header {name}: {value}" for name, value in sorted(request.headers.items()))
    body = request.body
    turns = conversation(body, request.endpoint)
    if isinstance(body, dict):
        if isinstance(tools := body.get("tools"), list) and tools:
            lines.append("tools: " + ", ".join(_tool_name(t) for t in tools))
        if body.get("stream"):
            lines.append("stream: true")
        shown = _SHOWN_KEYS if turns else _APART_KEYS
        lines.extend(f"{k}: {_compact(v)}" for k, v in sorted(body.items()) if k not in shown)
    elif body is not None:
        lines.append(f"body: {_body_text(request)}")
    if turns:
        lines.extend(["", *(line for turn in turns for line in _said(turn.role, turn.text))])
    return lines


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            return name
        if isinstance(tool.get("type"), str):
            return str(tool["type"])
    return _compact(tool)


def _body_text(request: RecordedRequest | RecordedResponse) -> str:
    body, encoding = request.body, request.body_encoding
    if encoding is BodyEncoding.BASE64:
        raw = str(body)
        return f"(binary, {len(raw) * 3 // 4} bytes, xxh3 {_digest(raw.encode())})"
    if encoding is BodyEncoding.EMPTY or body is None:
        return "(empty)"
    if encoding is BodyEncoding.TEXT:
        return str(body)
    return _compact(body)


def _response_lines(label: str, response: RecordedResponse) -> list[str]:
    status = "-" if response.status is None else str(response.status)
    kind = response.headers.get("content-type", "")
    if response.is_streaming:
        count = len(response.body or [])
        kind = f"{kind} (stream: {response.stream_format}, {count} events)".strip()
    lines = [f"{label}: {status} {kind}".rstrip()]
    said = reply(response)
    lines.extend(f"assistant: call {call}" for call in said.tool_calls)
    if said.text:
        lines.extend(_said("assistant", said.text))
    if not said:
        lines.extend(_other_body(response))
    tokens = response_tokens(response)
    if tokens.responses:
        lines.append(f"tokens: input {tokens.input}, output {tokens.output}, total {tokens.total}")
    lines.append(f"end: {_end(response)}")
    return lines


def _other_body(response: RecordedResponse) -> list[str]:
    body = response.body
    if body is None:
        return []
    if ids := model_ids(body):
        return ["models: " + ", ".join(ids)]
    if response.is_streaming:
        return [f"event: {_compact(value)}" for value in payloads(response)]
    if isinstance(body, dict):
        return [f"body {key}: {_compact(value)}" for key, value in sorted(body.items())]
    return [f"body: {_body_text(response)}"]


def _end(response: RecordedResponse) -> str:
    recorded_end = (response.model_extra or {}).get("end")
    if isinstance(recorded_end, (str, dict)):
        return _compact(recorded_end)
    if response.is_exception:
        failure = response.exception
        what = f"{failure.type}: {failure.message}" if failure is not None else "an exception"
        if response.status is None:
            return f"failed before a response ({what})"
        if response.is_streaming:
            return f"error after {len(response.body or [])} chunks ({what})"
        return f"error ({what})"
    return "complete"


def _said(who: str, text: str) -> list[str]:
    """`who: first line`, further lines indented under it (a blank one kept as `  `)."""
    first, *rest = text.split("\n") if text else [""]
    return [f"{who}: {first}".rstrip(), *(f"  {line}".rstrip() for line in rest)]


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(_shortened(value), option=orjson.OPT_SORT_KEYS).decode()


def _shortened(value: Any) -> Any:
    """Long number lists (embeddings) as `<N numbers, xxh3 …>`: a change still shows."""
    long_list = isinstance(value, list) and len(value) > _LONG_NUMBERS
    if long_list and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return f"<{len(value)} numbers, xxh3 {_digest(orjson.dumps(value))}>"
    if isinstance(value, list):
        return [_shortened(v) for v in value]
    if isinstance(value, dict):
        return {k: _shortened(v) for k, v in value.items()}
    return value


def _digest(data: bytes) -> str:
    return xxhash.xxh3_64_hexdigest(data)[:8]
