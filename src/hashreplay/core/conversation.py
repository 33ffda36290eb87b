"""Readable views of recordings: the conversation a request carries, the reply a response
(or its stream chunks) assembles to, and the tokens a response reports.

Provider shapes are recognised by their fields, never by host: OpenAI chat and Responses,
Anthropic messages, Ollama chat and generate (and anything that copies them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from hashreplay.core.format import RecordedResponse
from hashreplay.core.streams import StreamFormat, data_values

# --- tokens ---------------------------------------------------------------------------------

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
        self.input += other.input
        self.output += other.output
        self.total += other.total
        self.responses += other.responses


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
    for key in keys:
        value = block.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def response_tokens(response: RecordedResponse) -> Tokens:
    """The tokens one response reports. Streams report running totals (Anthropic's
    `message_delta`, Ollama's last line, the Responses API's `response.completed`), so the
    largest value of each counter over the stream is the count."""
    blocks = [b for value in payloads(response) for b in _usage_blocks(value)]
    if not blocks:
        return Tokens()

    def largest(keys: tuple[str, ...]) -> int | None:
        counts = [c for c in (_count(b, keys) for b in blocks) if c is not None]
        return max(counts) if counts else None

    input_tokens, output_tokens = largest(INPUT_KEYS), largest(OUTPUT_KEYS)
    if input_tokens is None and output_tokens is None:
        return Tokens()
    total = largest(TOTAL_KEYS)
    if total is None:
        total = (input_tokens or 0) + (output_tokens or 0)
    return Tokens(input_tokens or 0, output_tokens or 0, total, 1)


# --- the conversation of a request ----------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    role: str
    text: str


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _signature(name: Any, arguments: Any) -> str:
    """`name(arguments)`: how a tool call is shown."""
    return f"{name}({_json(arguments) if arguments not in (None, '') else ''})"


def text_of(content: Any) -> str:
    """A message's text: a string, or its text parts/blocks joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(text_of(part) for part in content)
    if isinstance(content, dict):
        if isinstance(content.get("text"), str):
            return str(content["text"])
        if content.get("type") == "tool_result":
            return text_of(content.get("content"))
        return ""
    return str(content)


def _message_turns(message: Any) -> list[Turn]:
    if not isinstance(message, dict):
        return []
    role = str(message.get("role") or message.get("type") or "?")
    turns: list[Turn] = []
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    text = text_of([b for b in blocks if not _is_block(b, "tool_result")] if blocks else content)
    if message.get("tool_call_id"):
        role = f"{role} {message['tool_call_id']}"
    if text:
        turns.append(Turn(role, text))
    for block in blocks:
        if _is_block(block, "tool_use"):
            turns.append(Turn(role, "call " + _signature(block.get("name"), block.get("input"))))
        elif _is_block(block, "tool_result"):
            turns.append(Turn(f"tool {block.get('tool_use_id', '')}".strip(), text_of(block)))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            turns.append(
                Turn(role, "call " + _signature(function.get("name"), function.get("arguments")))
            )
    return turns


def _is_block(block: Any, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def _item_turns(item: Any) -> list[Turn]:
    """One item of a Responses API `input`."""
    if not isinstance(item, dict):
        return [Turn("user", text_of(item))] if item else []
    kind = item.get("type", "message")
    if kind == "function_call":
        return [Turn("assistant", "call " + _signature(item.get("name"), item.get("arguments")))]
    if kind == "function_call_output":
        return [Turn(f"tool {item.get('call_id', '')}".strip(), text_of(item.get("output")))]
    return _message_turns(item)


def conversation(body: Any, endpoint: str = "") -> list[Turn]:
    """The turns a chat-like request body carries (empty for other bodies)."""
    if not isinstance(body, dict):
        return []
    turns: list[Turn] = []
    for key in ("instructions", "system"):
        if body.get(key):
            turns.append(Turn("system", text_of(body[key])))
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            turns.extend(_message_turns(message))
    raw_input = body.get("input")
    if endpoint.split("?", 1)[0].endswith("/responses") and raw_input is not None:
        items = raw_input if isinstance(raw_input, list) else [raw_input]
        for item in items:
            turns.extend(_item_turns(item))
    if isinstance(body.get("prompt"), str):
        turns.append(Turn("user", body["prompt"]))
    return turns


# --- the reply of a response ----------------------------------------------------------------


@dataclass
class Reply:
    """The text a response assembles to, and the tool calls it makes."""

    text: str = ""
    tool_calls: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.text or self.tool_calls)


@dataclass
class _ToolCall:
    name: str = ""
    arguments: str = ""


def reply(response: RecordedResponse) -> Reply:
    """What the model said, whether the response is one body or a stream of chunks."""
    if response.is_streaming:
        return _stream_reply(payloads(response))
    return _body_reply(response.body)


def _body_reply(body: Any) -> Reply:
    out = Reply()
    if not isinstance(body, dict):
        return out
    for choice in body.get("choices") or []:  # OpenAI chat / completions
        if not isinstance(choice, dict):
            continue
        found = choice.get("message")
        message: dict[str, Any] = found if isinstance(found, dict) else {}
        out.text += text_of(message.get("content")) or str(choice.get("text") or "")
        _add_message_calls(out, message)
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
        _add_message_calls(out, body["message"])
    if isinstance(body.get("response"), str):  # Ollama generate
        out.text += body["response"]
    return out


def _add_message_calls(out: Reply, message: dict[str, Any]) -> None:
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out.tool_calls.append(_signature(function.get("name"), function.get("arguments")))


def _add_output_item(out: Reply, item: Any) -> None:
    if _is_block(item, "message"):
        out.text += "".join(
            str(part.get("text", ""))
            for part in item.get("content") or []
            if _is_block(part, "output_text")
        )
    elif _is_block(item, "function_call"):
        out.tool_calls.append(_signature(item.get("name"), item.get("arguments")))


def _stream_reply(values: list[Any]) -> Reply:
    out = Reply()
    calls: dict[tuple[str, Any], _ToolCall] = {}
    for value in values:
        if not isinstance(value, dict):
            continue
        kind = value.get("type")
        for choice in value.get("choices") or []:  # OpenAI chat chunks
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            out.text += text_of(delta.get("content"))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                entry = calls.setdefault(("openai", call.get("index")), _ToolCall())
                entry.name += str(function.get("name") or "")
                entry.arguments += str(function.get("arguments") or "")
        if kind == "content_block_start" and _is_block(value.get("content_block"), "tool_use"):
            block = value["content_block"]
            calls[("anthropic", value.get("index"))] = _ToolCall(str(block.get("name", "")))
        elif kind == "content_block_delta" and isinstance(value.get("delta"), dict):
            delta = value["delta"]
            if delta.get("type") == "text_delta":
                out.text += str(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta":
                entry = calls.setdefault(("anthropic", value.get("index")), _ToolCall())
                entry.arguments += str(delta.get("partial_json", ""))
        elif kind == "response.output_text.delta":
            out.text += str(value.get("delta", ""))
        elif kind == "response.output_item.done" and _is_block(value.get("item"), "function_call"):
            _add_output_item(out, value["item"])
        elif kind is None and isinstance(value.get("message"), dict):  # Ollama chat lines
            out.text += text_of(value["message"].get("content"))
            _add_message_calls(out, value["message"])
        elif kind is None and isinstance(value.get("response"), str):  # Ollama generate
            out.text += value["response"]
    out.tool_calls.extend(f"{c.name}({c.arguments})" for c in calls.values())
    return out
