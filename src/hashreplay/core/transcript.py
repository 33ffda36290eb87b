"""Readable views of recordings. A request's conversation and a response's reply and tokens,
told by the fields they carry, never by host (OpenAI chat and Responses, Anthropic, Ollama);
and a recording as a readable conversation, one fact per line: what `git diff` shows of it.
Volatile noise (stable ids, id mapping, JSON punctuation) is left out: a changed prompt diffs
as itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import xxhash

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import MCP_STDIO_METHOD, STABLE_ID_PREFIX
from hashreplay.core.errors import RecordingError
from hashreplay.core.format import (
    EndState,
    Frame,
    FrameDirection,
    FrameType,
    RecordedRequest,
    RecordedResponse,
    Recording,
)
from hashreplay.core.model_lists import model_ids
from hashreplay.core.store import parse_recording
from hashreplay.core.streams import StreamFormat, data_values

#: Usage counters by provider: OpenAI chat/embeddings, OpenAI Responses and Anthropic, Ollama.
INPUT_KEYS: tuple[str, ...] = ("prompt_tokens", "input_tokens", "prompt_eval_count")

OUTPUT_KEYS: tuple[str, ...] = ("completion_tokens", "output_tokens", "eval_count")

TOTAL_KEYS: tuple[str, ...] = ("total_tokens",)


@dataclass
class Tokens:
    """Token counts; `responses` is how many responses reported any."""

    input: int = 0
    output: int = 0
    total: int = 0
    responses: int = 0

    def add(self, other: Tokens) -> None:
        self.input, self.output = self.input + other.input, self.output + other.output
        self.total, self.responses = self.total + other.total, self.responses + other.responses


def payloads(response: RecordedResponse) -> list[Any]:
    """The JSON values of a response: its body, or the data of each stream event/line."""
    if response.is_streaming and response.stream_format is not None:
        return data_values(StreamFormat(response.stream_format), list(response.body or []))
    return [response.body]


def _usage_blocks(value: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(value, dict):
        return
    for holder in (value, value.get("message"), value.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            yield holder["usage"]
    if any(isinstance(value.get(k), int) for k in ("prompt_eval_count", "eval_count")):
        yield value  # Ollama reports its counts at the top level


def _count(block: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    values = (block.get(key) for key in keys)
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool)), None)


def response_tokens(response: RecordedResponse) -> Tokens:
    """The tokens one response reports. Streams report running totals (Anthropic's
    `message_delta`, Ollama's last line, the Responses API's `response.completed`), so the
    largest value of each counter over the stream is the count."""
    blocks = [b for value in payloads(response) for b in _usage_blocks(value)]
    input_tokens, output_tokens, total = (
        max((c for c in (_count(b, keys) for b in blocks) if c is not None), default=None)
        for keys in (INPUT_KEYS, OUTPUT_KEYS, TOTAL_KEYS)
    )
    if input_tokens is None and output_tokens is None:
        return Tokens()
    inputs, outputs = input_tokens or 0, output_tokens or 0
    return Tokens(inputs, outputs, inputs + outputs if total is None else total, 1)


@dataclass(frozen=True)
class Turn:
    role: str
    text: str


def _signature(name: Any, arguments: Any) -> str:
    """`name(arguments)`: how a tool call is shown."""
    if arguments in (None, "") or isinstance(arguments, str):
        return f"{name}({arguments or ''})"
    return f"{name}({orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()})"


def _calls(message: dict[str, Any]) -> list[str]:
    functions = [c.get("function") for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    return [_signature(f.get("name"), f.get("arguments")) for f in functions if isinstance(f, dict)]


def text_of(content: Any) -> str:
    """A message's text: a string, or its text parts/blocks joined."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(text_of(part) for part in content)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    if isinstance(content, dict):
        return text_of(content.get("content")) if content.get("type") == "tool_result" else ""
    return str(content)


def _message_turns(message: Any) -> list[Turn]:
    if not isinstance(message, dict):
        return []
    role = str(message.get("role") or message.get("type") or "?")
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    text = text_of([b for b in blocks if not _is_block(b, "tool_result")] if blocks else content)
    if message.get("tool_call_id"):
        role = f"{role} {message['tool_call_id']}"
    turns = [Turn(role, text)] if text else []
    for block in blocks:
        if _is_block(block, "tool_use"):
            turns.append(Turn(role, "call " + _signature(block.get("name"), block.get("input"))))
        elif _is_block(block, "tool_result"):
            turns.append(Turn(f"tool {block.get('tool_use_id', '')}".strip(), text_of(block)))
    turns.extend(Turn(role, "call " + call) for call in _calls(message))
    return turns


def _is_block(block: Any, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def _item_turns(item: Any) -> list[Turn]:
    """One item of a Responses API `input`."""
    if not isinstance(item, dict):
        return [Turn("user", text_of(item))] if item else []
    if _is_block(item, "function_call"):
        return [Turn("assistant", "call " + _signature(item.get("name"), item.get("arguments")))]
    if _is_block(item, "function_call_output"):
        return [Turn(f"tool {item.get('call_id', '')}".strip(), text_of(item.get("output")))]
    return _message_turns(item)


def conversation(body: Any, endpoint: str = "") -> list[Turn]:
    """The turns a chat-like request body carries (empty for other bodies)."""
    if not isinstance(body, dict):
        return []
    turns = [Turn("system", text_of(body[k])) for k in ("instructions", "system") if body.get(k)]
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        turns.extend(_message_turns(message))
    raw_input = body.get("input")
    if endpoint.split("?", 1)[0].endswith("/responses") and raw_input is not None:
        for item in raw_input if isinstance(raw_input, list) else [raw_input]:
            turns.extend(_item_turns(item))
    if isinstance(body.get("prompt"), str):
        turns.append(Turn("user", body["prompt"]))
    return turns


@dataclass
class Reply:
    """The text a response assembles to, and the tool calls it makes."""

    text: str = ""
    tool_calls: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.text or self.tool_calls)


def reply(response: RecordedResponse) -> Reply:
    """What the model said, whether the response is one body or a stream of chunks."""
    if response.is_streaming:
        return _stream_reply(payloads(response))
    return _body_reply(response.body)


def _body_reply(body: Any) -> Reply:
    out = Reply()
    if not isinstance(body, dict):
        return out
    choices = [c for c in body.get("choices") or [] if isinstance(c, dict)]
    for choice in choices:  # OpenAI chat / completions
        found = choice.get("message")
        message: dict[str, Any] = found if isinstance(found, dict) else {}
        out.text += text_of(message.get("content")) or str(choice.get("text") or "")
        out.tool_calls.extend(_calls(message))
    if body.get("type") == "message" and isinstance(body.get("content"), list):  # Anthropic
        for block in body["content"]:
            if _is_block(block, "text"):
                out.text += str(block.get("text", ""))
            elif _is_block(block, "tool_use"):
                out.tool_calls.append(_signature(block.get("name"), block.get("input")))
    for item in body.get("output") or []:  # OpenAI Responses
        _add_output_item(out, item)
    if isinstance(body.get("message"), dict):  # Ollama chat
        out.text += text_of(body["message"].get("content"))
        out.tool_calls.extend(_calls(body["message"]))
    if isinstance(body.get("response"), str):  # Ollama generate
        out.text += body["response"]
    return out


def _add_output_item(out: Reply, item: Any) -> None:
    if _is_block(item, "message"):
        parts = item.get("content") or []
        out.text += "".join(str(p.get("text", "")) for p in parts if _is_block(p, "output_text"))
    elif _is_block(item, "function_call"):
        out.tool_calls.append(_signature(item.get("name"), item.get("arguments")))


def _stream_reply(values: list[Any]) -> Reply:
    out = Reply()
    calls: dict[tuple[str, Any], list[str]] = {}  # (provider, index): [name, arguments]
    for value in values:
        if not isinstance(value, dict):
            continue
        kind = value.get("type")
        deltas = [c.get("delta") for c in value.get("choices") or [] if isinstance(c, dict)]
        for delta in (d for d in deltas if isinstance(d, dict)):  # OpenAI chat chunks
            out.text += text_of(delta.get("content"))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                entry = calls.setdefault(("openai", call.get("index")), ["", ""])
                entry[0] += str(function.get("name") or "")
                entry[1] += str(function.get("arguments") or "")
        if kind == "content_block_start" and _is_block(value.get("content_block"), "tool_use"):
            name = str(value["content_block"].get("name", ""))
            calls[("anthropic", value.get("index"))] = [name, ""]
        elif kind == "content_block_delta" and isinstance(value.get("delta"), dict):
            delta = value["delta"]
            if delta.get("type") == "text_delta":
                out.text += str(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta":
                entry = calls.setdefault(("anthropic", value.get("index")), ["", ""])
                entry[1] += str(delta.get("partial_json", ""))
        elif kind == "response.output_text.delta":
            out.text += str(value.get("delta", ""))
        elif kind == "response.output_item.done" and _is_block(value.get("item"), "function_call"):
            _add_output_item(out, value["item"])
        elif kind is None and isinstance(value.get("message"), dict):  # Ollama chat lines
            out.text += text_of(value["message"].get("content"))
            out.tool_calls.extend(_calls(value["message"]))
        elif kind is None and isinstance(value.get("response"), str):  # Ollama generate
            out.text += value["response"]
    out.tool_calls.extend(f"{name}({arguments})" for name, arguments in calls.values())
    return out


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
    each response (status, answer with streamed text joined, tool calls, tokens, how it ended).
    An MCP session: its conversation of calls (`core/mcp_transcript.py`)."""
    if recording.request.method == MCP_STDIO_METHOD:
        from hashreplay.core.mcp_transcript import session_lines

        return "\n".join(session_lines(recording)) + "\n"
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
    if (call := rpc_call(body)) is not None:
        lines.append(f"→ {call}")
    elif isinstance(body, dict):
        if isinstance(tools := body.get("tools"), list) and tools:
            lines.append("tools: " + ", ".join(_tool_name(t) for t in tools))
        if body.get("stream"):
            lines.append("stream: true")
        shown = _SHOWN_KEYS if turns else _APART_KEYS
        lines.extend(f"{k}: {_compact(v)}" for k, v in sorted(body.items()) if k not in shown)
    elif body is not None:
        lines.append(f"body: {_body_text(request)}")
    if turns:
        lines.append("")
        for turn in turns:
            lines.extend(_said(_without_stable_id(turn.role), turn.text))
    return lines


#: A numbered placeholder the normaliser put in place of a volatile value (`<uuid:1>`, `<id:2>`).
_PLACEHOLDER = re.compile(r"<[\w-]+:\d+>")


def _without_stable_id(role: str) -> str:
    """`tool` for `tool rec-1a2b…-1` or `tool <id:1>`: a stable id is derived from the request
    hash, so it changes with every prompt change and would add a line of noise to each review;
    an id the test chose itself (`tool toolu_1`) says something and stays."""
    who, _, call_id = role.partition(" ")
    if call_id.startswith(STABLE_ID_PREFIX) or _PLACEHOLDER.fullmatch(call_id):
        return who
    return role


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
    if response.frames is not None:  # a WebSocket connection: its frames as a conversation
        lines.extend(frame_lines(response.frames))
        lines.append(f"end: {ending(response)}")
        return lines
    values = payloads(response) if response.body is not None else []
    if values and all(_is_rpc(value) for value in values):
        lines.extend(f"← {rpc_answer(value)}" for value in values)
        lines.append(f"end: {ending(response)}")
        return lines
    said = reply(response)
    lines.extend(f"assistant: call {call}" for call in said.tool_calls)
    if said.text:
        lines.extend(_said("assistant", said.text))
    if not said:
        lines.extend(_other_body(response))
    tokens = response_tokens(response)
    if tokens.responses:
        lines.append(f"tokens: input {tokens.input}, output {tokens.output}, total {tokens.total}")
    lines.append(f"end: {ending(response)}")
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


def _is_rpc(value: Any) -> bool:
    return isinstance(value, dict) and value.get("jsonrpc") == "2.0"


def _params(value: Any) -> Any:
    """JSON-RPC params without `_meta` (progress tokens, protocol stamps: not what was asked)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "_meta"}
    return value


def rpc_call(body: Any) -> str | None:
    """An MCP (JSON-RPC 2.0) request or notification as one line: `tools/call search
    {"query":"otters"}`, `tools/list`, `notifications/progress {...}`; None for other bodies."""
    if not _is_rpc(body) or not isinstance(body.get("method"), str):
        return None
    method, params = body["method"], _params(body.get("params"))
    if method == "tools/call" and isinstance(params, dict):
        return f"{method} {params.get('name')} {_compact(params.get('arguments') or {})}"
    return f"{method} {_compact(params)}" if params else method


def rpc_answer(message: dict[str, Any]) -> str:
    """One JSON-RPC message from an MCP server: a notification or request as `rpc_call`
    shows it, a tool's result as its text (`tool error: …` when `isError`), a tool list as
    its names, another result as its fields, an error as its code and message."""
    call = rpc_call(message)
    if call is not None:
        return call
    error = message.get("error")
    if isinstance(error, dict):
        return f"error {error.get('code')}: {error.get('message')}"
    result = _params(message.get("result"))
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        text = text_of(result["content"])
        return f"{'tool error' if result.get('isError') else 'result'}: {text}"
    if isinstance(result, dict) and isinstance(tools := result.get("tools"), list):
        return "result: tools " + ", ".join(_tool_name(tool) for tool in tools)
    return f"result: {_compact(result)}"


def frame_lines(frames: list[Frame]) -> list[str]:
    """A connection's frames as a conversation, one line each in order: `→ sent [1]: …` for
    the client's, `← received [2]: …` for the server's, JSON compact with sorted keys, binary
    as its size and digest, a close as its code and reason."""
    lines = []
    for index, frame in enumerate(frames):
        sent = frame.direction is FrameDirection.SENT
        who = f"{'→ sent' if sent else '← received'} [{index}]"
        lines.append(f"{who}: {frame_text(frame)}")
    return lines


def frame_text(frame: Frame) -> str:
    """One frame's data as a reader wants it."""
    if frame.type is FrameType.CLOSE:
        reason = f" {orjson.dumps(frame.reason).decode()}" if frame.reason else ""
        return f"close {frame.code if frame.code is not None else '(no code)'}{reason}"
    data, encoding = frame.data, frame.data_encoding
    if frame.type is FrameType.BINARY or encoding is BodyEncoding.BASE64:
        raw = str(data)
        size = len(raw) * 3 // 4 - raw[-2:].count("=")
        return f"(binary, {size} bytes, xxh3 {_digest(raw.encode())})"
    if encoding is BodyEncoding.TEXT:
        return str(data)
    return _compact(data)


def ending(response: RecordedResponse) -> str:
    """How a recorded exchange ended, in words (a connection: closed, cut or abandoned)."""
    if response.frames is not None:
        count = len(response.frames)
        state = response.end_state
        if state is EndState.ERROR:
            return f"cut after {count} frames (no close frame)"
        if state is EndState.ABANDONED:
            return f"abandoned by the client after {count} frames (never closed)"
        return "closed"
    if response.ended is not None and response.ended.state is EndState.ABANDONED:
        return f"abandoned by the client after {response.ended.after_chunks} chunks"
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
