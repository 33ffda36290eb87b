"""A request's conversation, a response's reply and tokens: shapes told by fields, never by host."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from hashreplay.core.format import RecordedResponse
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
