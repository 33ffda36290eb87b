"""Payload builders for the fake upstream: OpenAI, Anthropic and Ollama, *in shape*.

Every builder takes the shared :class:`ApiState` and the received :class:`Call` and returns a
:class:`Reply` (a JSON body, or a list of stream frames: SSE events or NDJSON lines).

Like the real APIs, ids, timestamps, durations and other noise are fresh random values on
every call (drawn from :class:`random.SystemRandom`, so a test's ``random.seed`` can't make
them repeat), while the *content* (reply texts, embedding vectors, token counts) is a
deterministic function of the request:

* reply text: ``"echo: <text of the last user message>"``;
* with ``tools`` and a user message last: a call of the first tool with
  ``{"query": <user text>}`` instead of text;
* after a tool result: ``"tool said: <tool output>"``;
* token counts: whitespace-separated words (prompt: all messages; completion: the reply);
* embeddings: 8 floats in [-1, 1] derived from ``sha256(text)``.

The only state is the Responses API's conversation store (``previous_response_id``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import string
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from random import SystemRandom
from typing import Any

__all__ = [
    "SSE_KEEPALIVE",
    "ApiError",
    "ApiState",
    "Call",
    "Reply",
    "default_error_reply",
    "embedding_vector",
    "handle",
    "split_pieces",
]

_rng = SystemRandom()
_ALNUM = string.ascii_letters + string.digits

#: An SSE comment frame: clients must ignore it, and it does not count as an event.
SSE_KEEPALIVE = b": keepalive\n\n"

JSONObject = dict[str, Any]


# --------------------------------------------------------------------------- request / reply


@dataclass
class Call:
    """One request received by the fake upstream."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (raises ``ValueError`` if it is not JSON)."""
        return json.loads(self.body)


@dataclass
class Reply:
    """What to answer: a whole body, or (when ``frames`` is set) a chunked stream."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    frames: list[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


class ApiError(Exception):
    """Raised by a builder to answer with an error reply instead."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


@dataclass
class ApiState:
    """Server-side state shared by all requests: model lists and stored responses."""

    models: list[str] = field(default_factory=lambda: ["gpt-fake-1", "gpt-fake-2"])
    ollama_models: list[str] = field(default_factory=lambda: ["llama-fake:1b"])
    _conversations: dict[str, list[JSONObject]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def conversation(self, response_id: str) -> list[JSONObject] | None:
        with self._lock:
            found = self._conversations.get(response_id)
            return list(found) if found is not None else None

    def remember(self, response_id: str, conversation: list[JSONObject]) -> None:
        with self._lock:
            self._conversations[response_id] = list(conversation)


def json_reply(payload: Any, status: int = 200) -> Reply:
    return Reply(status=status, body=json.dumps(payload).encode())


def sse_event(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def sse_reply(frames: list[bytes]) -> Reply:
    return Reply(content_type="text/event-stream; charset=utf-8", frames=frames)


def ndjson_reply(lines: Iterable[Any]) -> Reply:
    frames = [json.dumps(line).encode() + b"\n" for line in lines]
    return Reply(content_type="application/x-ndjson", frames=frames)


# --------------------------------------------------------------------------- noise


def random_alnum(n: int) -> str:
    return "".join(_rng.choice(_ALNUM) for _ in range(n))


def random_hex(n: int) -> str:
    return "".join(_rng.choice("0123456789abcdef") for _ in range(n))


def random_int(low: int, high: int) -> int:
    return _rng.randint(low, high)


def _obfuscation() -> str:
    """The random padding the real OpenAI API adds to stream events."""
    return random_alnum(random_int(2, 16))


def rfc3339_now(offset: timedelta = timedelta(0)) -> str:
    """Now in UTC with a nanosecond-like fraction, as Ollama writes ``created_at``."""
    now = datetime.now(timezone.utc) + offset
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}{random_int(0, 999):03d}Z"


# --------------------------------------------------------------------------- errors

_FAMILY_ERROR_TYPES: dict[int, tuple[str, str]] = {
    # status: (OpenAI type, Anthropic type)
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("invalid_request_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("invalid_request_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    408: ("timeout_error", "timeout_error"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_error"),
    529: ("server_error", "overloaded_error"),
}


def api_family(path: str) -> str:
    """Which API's error shape a path uses: ``openai``, ``anthropic`` or ``ollama``."""
    if path.startswith("/api/"):
        return "ollama"
    if path == "/v1/messages":
        return "anthropic"
    return "openai"


def error_reply(
    path: str,
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
) -> Reply:
    """An error in the shape of the API that ``path`` belongs to."""
    from .sdk_apis import sdk_error_reply  # Mistral, Cohere v2, Groq: their own shapes

    own = sdk_error_reply(path, status, message)
    if own is not None:
        return own
    family = api_family(path)
    openai_type, anthropic_type = _FAMILY_ERROR_TYPES.get(status, ("server_error", "api_error"))
    if family == "ollama":
        return json_reply({"error": message}, status)
    if family == "anthropic":
        payload: JSONObject = {
            "type": "error",
            "error": {"type": anthropic_type, "message": message},
            "request_id": f"req_{random_alnum(24)}",
        }
        return json_reply(payload, status)
    error = {"message": message, "type": openai_type, "param": param, "code": code}
    return json_reply({"error": error}, status)


def default_error_reply(path: str, status: int) -> Reply:
    """The error body for a scripted status that came without a body of its own."""
    messages = {
        401: "Incorrect API key provided.",
        404: "Not found.",
        429: "Rate limit reached for requests. Please try again later.",
        500: "The server had an error while processing your request.",
        503: "The service is temporarily unavailable.",
        529: "Overloaded",
    }
    return error_reply(path, status, messages.get(status, f"Error {status} from fake upstream"))


def _bad_request(path: str, message: str, param: str | None = None) -> ApiError:
    return ApiError(error_reply(path, 400, message, param=param))


def parse_object(call: Call) -> JSONObject:
    """The request body as a JSON object, or an ``ApiError`` (400) in the API's shape."""
    try:
        payload = call.json()
    except ValueError:
        raise _bad_request(
            call.path,
            "We could not parse the JSON body of your request. (HINT: This likely means you "
            "aren't using your HTTP library correctly.)",
        ) from None
    if not isinstance(payload, dict):
        raise _bad_request(call.path, "The request body must be a JSON object.")
    return payload


def require_model(call: Call, body: JSONObject) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad_request(call.path, "you must provide a model parameter", param="model")
    return model


def require_list(call: Call, body: JSONObject, name: str) -> list[Any]:
    value = body.get(name)
    if not isinstance(value, list):
        raise _bad_request(call.path, f"'{name}' is a required array.", param=name)
    return value


# --------------------------------------------------------------------------- content rules


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the concatenated text parts/blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    if isinstance(content, dict):
        return _part_text(content)
    return str(content)


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    kind = part.get("type")
    if kind in (None, "text", "input_text", "output_text") and isinstance(part.get("text"), str):
        return str(part["text"])
    if kind == "tool_result":
        return content_text(part.get("content"))
    return ""


def count_words(texts: Iterable[str]) -> int:
    return sum(len(text.split()) for text in texts)


def message_texts(messages: Iterable[Any]) -> list[str]:
    return [content_text(m.get("content")) for m in messages if isinstance(m, dict)]


def last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def split_pieces(text: str, words: int = 3) -> list[str]:
    """Split ``text`` into pieces of about ``words`` words; their concatenation is ``text``."""
    stripped = text.lstrip()
    tokens = re.findall(r"\S+\s*", stripped)
    if not tokens:
        return [text] if text else []
    tokens[0] = text[: len(text) - len(stripped)] + tokens[0]
    return ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


def char_pieces(text: str, size: int = 8) -> list[str]:
    """Fixed-size slices of ``text`` (used for streamed tool-call arguments)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def embedding_vector(text: str, dims: int = 8) -> list[float]:
    """``dims`` deterministic floats in [-1, 1]: big-endian 32-bit words of sha256(text)."""
    digest = hashlib.sha256(text.encode()).digest()
    while len(digest) < 4 * dims:
        digest += hashlib.sha256(digest).digest()
    words = struct.unpack(f">{dims}I", digest[: 4 * dims])
    return [round(word / 0xFFFFFFFF * 2 - 1, 10) for word in words]


@dataclass(frozen=True)
class Answer:
    """What the fake model says: a text, or a call of ``tool_name`` with ``tool_query``."""

    text: str = ""
    tool_name: str | None = None
    tool_query: str = ""

    @property
    def is_tool_call(self) -> bool:
        return self.tool_name is not None

    @property
    def arguments(self) -> str:
        return json.dumps({"query": self.tool_query})

    @property
    def output_tokens(self) -> int:
        return count_words([self.arguments if self.is_tool_call else self.text])


def _tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return "tool"
    function = tool.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return str(function["name"])
    return str(tool.get("name", "tool"))


def answer_chat(messages: list[Any], tools: Any) -> Answer:
    """The reply rule for OpenAI chat and Ollama chat (``role: tool`` carries tool output)."""
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if last.get("role") == "tool":
        return Answer(text=f"tool said: {content_text(last.get('content'))}")
    if tools and isinstance(tools, list) and last.get("role") == "user":
        return Answer(tool_name=_tool_name(tools[0]), tool_query=last_user_text(messages))
    return Answer(text=f"echo: {last_user_text(messages)}")


def answer_anthropic(messages: list[Any], tools: Any) -> Answer:
    """The reply rule for Anthropic, where tool results arrive in a *user* message."""
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if last.get("role") == "user":
        blocks = last.get("content")
        results = [
            block
            for block in (blocks if isinstance(blocks, list) else [])
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        if results:
            return Answer(text=f"tool said: {content_text(results[-1].get('content'))}")
        if tools and isinstance(tools, list):
            return Answer(tool_name=_tool_name(tools[0]), tool_query=content_text(blocks))
    return Answer(text=f"echo: {last_user_text(messages)}")


# --------------------------------------------------------------------------- OpenAI


def openai_chat(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    model = require_model(call, body)
    messages = require_list(call, body, "messages")
    answer = answer_chat(messages, body.get("tools"))
    prompt_tokens = count_words(message_texts(messages))
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": prompt_tokens + answer.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    base: JSONObject = {
        "id": f"chatcmpl-{random_alnum(24)}",
        "created": int(time.time()),
        "model": model,
        "service_tier": "default",
        "system_fingerprint": f"fp_{random_hex(10)}",
    }
    call_id = f"call_{random_alnum(24)}"
    if body.get("stream"):
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return sse_reply(_chat_chunks(base, answer, call_id, usage if include_usage else None))

    message: JSONObject = {
        "role": "assistant",
        "content": answer.text,
        "refusal": None,
        "annotations": [],
    }
    finish_reason = "stop"
    if answer.is_tool_call:
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": answer.tool_name, "arguments": answer.arguments},
            }
        ]
        finish_reason = "tool_calls"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
    completion = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
    return json_reply(completion)


def _chat_chunks(
    base: JSONObject, answer: Answer, call_id: str, usage: JSONObject | None
) -> list[bytes]:
    def chunk(delta: JSONObject, finish_reason: str | None = None) -> JSONObject:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        out: JSONObject = {**base, "object": "chat.completion.chunk", "choices": [choice]}
        if usage is not None:
            out["usage"] = None
        out["obfuscation"] = _obfuscation()
        return out

    chunks: list[JSONObject] = []
    if answer.is_tool_call:
        first_call = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": answer.tool_name, "arguments": ""},
        }
        chunks.append(
            chunk(
                {"role": "assistant", "content": None, "tool_calls": [first_call], "refusal": None}
            )
        )
        for piece in char_pieces(answer.arguments):
            chunks.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        chunks.append(chunk({}, "tool_calls"))
    else:
        chunks.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        chunks.extend(chunk({"content": piece}) for piece in split_pieces(answer.text))
        chunks.append(chunk({}, "stop"))
    if usage is not None:
        chunks.append(
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": usage,
                "obfuscation": _obfuscation(),
            }
        )
    return [sse_event(c) for c in chunks] + [b"data: [DONE]\n\n"]


def _embedding_inputs(call: Call, raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw and all(isinstance(x, int) for x in raw):
        return [" ".join(map(str, raw))]  # a single array of token ids
    if isinstance(raw, list) and raw:
        return [x if isinstance(x, str) else " ".join(map(str, x)) for x in raw]
    raise _bad_request(call.path, "'input' must be a string or a non-empty array.", "input")


def openai_embeddings(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    model = require_model(call, body)
    texts = _embedding_inputs(call, body.get("input"))
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _bad_request(call.path, "encoding_format must be 'float' or 'base64'.")
    dims = body.get("dimensions") or 8
    data = []
    for index, text in enumerate(texts):
        vector: Any = embedding_vector(text, int(dims))
        if encoding == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = count_words(texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return json_reply({"object": "list", "data": data, "model": model, "usage": usage})


def _model_object(model: str) -> JSONObject:
    return {"id": model, "object": "model", "created": 1700000000, "owned_by": "fake"}


def openai_models(state: ApiState, call: Call) -> Reply:
    return json_reply({"object": "list", "data": [_model_object(m) for m in state.models]})


def openai_model(state: ApiState, call: Call) -> Reply:
    model = call.path.removeprefix("/v1/models/")
    if model not in state.models:
        message = f"The model '{model}' does not exist"
        raise ApiError(error_reply(call.path, 404, message, param="model", code="model_not_found"))
    return json_reply(_model_object(model))


# --------------------------------------------------------------------------- OpenAI Responses


def _response_items(call: Call, raw: Any) -> list[JSONObject]:
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if isinstance(raw, list):
        return [item for item in raw if isinstance(item, dict)]
    raise _bad_request(call.path, "'input' must be a string or an array of items.", "input")


def _is_user_message(item: JSONObject) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


def openai_responses(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    model = require_model(call, body)
    items = _response_items(call, body.get("input"))
    previous_id = body.get("previous_response_id")
    history: list[JSONObject] = []
    if previous_id is not None:
        found = state.conversation(str(previous_id))
        if found is None:
            raise ApiError(
                error_reply(
                    call.path,
                    400,
                    f"Previous response with id '{previous_id}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            )
        history = found

    user_text = last_user_text(items)
    tool_outputs = [item for item in items if item.get("type") == "function_call_output"]
    tools = [
        t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"
    ]
    if tool_outputs:
        answer = Answer(text=f"tool said: {content_text(tool_outputs[-1].get('output'))}")
    elif tools and items and _is_user_message(items[-1]):
        answer = Answer(tool_name=_tool_name(tools[0]), tool_query=user_text)
    else:
        text = f"echo: {user_text}"
        if previous_id is not None:
            turn = sum(1 for m in history if m.get("role") == "assistant") + 1
            text += f" (turn {turn})"
        answer = Answer(text=text)

    instructions = body.get("instructions")
    input_texts = [content_text(m.get("content")) for m in history]
    input_texts += message_texts(items) + [content_text(i.get("output")) for i in tool_outputs]
    if isinstance(instructions, str):
        input_texts.append(instructions)
    input_tokens = count_words(input_texts)

    response_id = f"resp_{random_hex(48)}"
    if answer.is_tool_call:
        item: JSONObject = {
            "type": "function_call",
            "id": f"fc_{random_hex(48)}",
            "call_id": f"call_{random_alnum(24)}",
            "name": answer.tool_name,
            "arguments": answer.arguments,
            "status": "completed",
        }
    else:
        part = {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
        item = {
            "type": "message",
            "id": f"msg_{random_hex(48)}",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
    created = time.time()
    response: JSONObject = {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": "completed",
        "completed_at": created + random_int(50, 900) / 1000,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": model,
        "output": [item],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": previous_id,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True) is not False,
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [_response_tool(t) for t in body.get("tools") or [] if isinstance(t, dict)],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": answer.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + answer.output_tokens,
        },
        "user": None,
        "metadata": body.get("metadata") or {},
    }
    if response["store"]:
        turn_input = {"role": "user", "content": user_text}
        turn_output = {"role": "assistant", "content": answer.text or answer.arguments}
        state.remember(response_id, [*history, turn_input, turn_output])
    if body.get("stream"):
        return sse_reply(_response_events(response, item))
    return json_reply(response)


def _response_tool(tool: JSONObject) -> JSONObject:
    if tool.get("type") != "function":
        return tool
    return {"description": None, "parameters": None, "strict": True, **tool}


def _response_events(response: JSONObject, item: JSONObject) -> list[bytes]:
    frames: list[bytes] = []

    def emit(event_type: str, **fields: Any) -> None:
        payload = {"type": event_type, "sequence_number": len(frames), **fields}
        frames.append(sse_event(payload, event=event_type))

    pending = {**response, "status": "in_progress", "completed_at": None, "output": []}
    pending["usage"] = None
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    at = {"item_id": item["id"], "output_index": 0}
    if item["type"] == "message":
        part = item["content"][0]
        emit(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "content": []},
        )
        empty_part = {**part, "text": ""}
        emit("response.content_part.added", **at, content_index=0, part=empty_part)
        for piece in split_pieces(part["text"]):
            emit(
                "response.output_text.delta",
                **at,
                content_index=0,
                delta=piece,
                logprobs=[],
                obfuscation=_obfuscation(),
            )
        emit("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[])
        emit("response.content_part.done", **at, content_index=0, part=part)
    else:
        added = {**item, "status": "in_progress", "arguments": ""}
        emit("response.output_item.added", output_index=0, item=added)
        for piece in char_pieces(item["arguments"]):
            emit(
                "response.function_call_arguments.delta",
                **at,
                delta=piece,
                obfuscation=_obfuscation(),
            )
        emit("response.function_call_arguments.done", **at, arguments=item["arguments"])
    emit("response.output_item.done", output_index=0, item=item)
    emit("response.completed", response=response)
    return frames


# --------------------------------------------------------------------------- Anthropic


def anthropic_messages(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    model = require_model(call, body)
    messages = require_list(call, body, "messages")
    answer = answer_anthropic(messages, body.get("tools"))
    input_tokens = count_words([content_text(body.get("system")), *message_texts(messages)])
    usage: JSONObject = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": answer.output_tokens,
        "service_tier": "standard",
    }
    if answer.is_tool_call:
        query = {"query": answer.tool_query}
        block: JSONObject = {
            "type": "tool_use",
            "id": f"toolu_{random_alnum(24)}",
            "name": answer.tool_name,
            "input": query,
        }
        stop_reason = "tool_use"
    else:
        block = {"type": "text", "text": answer.text}
        stop_reason = "end_turn"
    message: JSONObject = {
        "id": f"msg_{random_alnum(24)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }
    if not body.get("stream"):
        return json_reply(message)

    def event(name: str, **fields: Any) -> bytes:
        return sse_event({"type": name, **fields}, event=name)

    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    if answer.is_tool_call:
        empty_block = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in char_pieces(answer.arguments)
        ]
    else:
        empty_block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in split_pieces(answer.text)]
    delta_frames = [event("content_block_delta", index=0, delta=d) for d in deltas]
    middle = max(1, len(delta_frames) // 2)
    delta_frames.insert(middle, SSE_KEEPALIVE)  # real servers do this; clients must ignore it
    frames = [
        event("message_start", message=start),
        event("content_block_start", index=0, content_block=empty_block),
        event("ping"),
        *delta_frames,
        event("content_block_stop", index=0),
        event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": answer.output_tokens},
        ),
        event("message_stop"),
    ]
    return sse_reply(frames)


# --------------------------------------------------------------------------- Ollama


def _ollama_timings(prompt_tokens: int, eval_tokens: int) -> JSONObject:
    return {
        "total_duration": random_int(100_000_000, 5_000_000_000),
        "load_duration": random_int(1_000_000, 100_000_000),
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": random_int(1_000_000, 500_000_000),
        "eval_count": eval_tokens,
        "eval_duration": random_int(10_000_000, 2_000_000_000),
    }


def _ollama_stream_default(body: JSONObject) -> bool:
    return body.get("stream") is not False  # Ollama streams unless told not to


def ollama_chat(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    model = require_model(call, body)
    messages = body.get("messages") or []
    if not isinstance(messages, list):
        raise _bad_request(call.path, "messages must be an array")
    answer = answer_chat(messages, body.get("tools"))
    final_message: JSONObject = {"role": "assistant", "content": ""}
    if answer.is_tool_call:
        function = {"name": answer.tool_name, "arguments": {"query": answer.tool_query}}
        final_message["tool_calls"] = [{"function": function}]

    def line(message: JSONObject, done: bool) -> JSONObject:
        return {"model": model, "created_at": rfc3339_now(), "message": message, "done": done}

    timings = _ollama_timings(count_words(message_texts(messages)), answer.output_tokens)
    if not _ollama_stream_default(body):
        whole = {**final_message, "content": answer.text}
        return json_reply({**line(whole, True), "done_reason": "stop", **timings})
    if answer.is_tool_call:
        pieces: list[JSONObject] = [final_message]
    else:
        pieces = [{"role": "assistant", "content": p} for p in split_pieces(answer.text)]
    last = {**line({"role": "assistant", "content": ""}, True), "done_reason": "stop", **timings}
    return ndjson_reply([*(line(p, False) for p in pieces), last])


def ollama_generate(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    model = require_model(call, body)
    prompt = content_text(body.get("prompt"))
    reply = f"echo: {prompt}"
    prompt_tokens = count_words([prompt, content_text(body.get("system"))])
    digest = hashlib.sha256(prompt.encode()).digest()
    final: JSONObject = {
        "done": True,
        "done_reason": "stop",
        "context": list(digest[:8]),
        **_ollama_timings(prompt_tokens, count_words([reply])),
    }

    def line(response: str) -> JSONObject:
        return {"model": model, "created_at": rfc3339_now(), "response": response}

    if not _ollama_stream_default(body):
        return json_reply({**line(reply), **final})
    pieces = [{**line(p), "done": False} for p in split_pieces(reply)]
    return ndjson_reply([*pieces, {**line(""), **final}])


def ollama_embed(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    model = require_model(call, body)
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else [str(x) for x in raw or []]
    payload = {
        "model": model,
        "embeddings": [embedding_vector(text) for text in texts],
        "total_duration": random_int(10_000_000, 900_000_000),
        "load_duration": random_int(1_000_000, 50_000_000),
        "prompt_eval_count": count_words(texts),
    }
    return json_reply(payload)


def ollama_embeddings_legacy(state: ApiState, call: Call) -> Reply:
    body = parse_object(call)
    require_model(call, body)
    return json_reply({"embedding": embedding_vector(content_text(body.get("prompt")))})


def _ollama_model(name: str) -> JSONObject:
    family = name.split(":", maxsplit=1)[0].split("-", maxsplit=1)[0]
    return {
        "name": name,
        "model": name,
        "size": 123,
        "digest": hashlib.sha256(name.encode()).hexdigest(),
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": family,
            "families": [family],
            "parameter_size": "1B",
            "quantization_level": "Q4_K_M",
        },
    }


def ollama_tags(state: ApiState, call: Call) -> Reply:
    models = [
        {**_ollama_model(m), "modified_at": "2025-01-01T00:00:00Z"} for m in state.ollama_models
    ]
    return json_reply({"models": models})


def ollama_ps(state: ApiState, call: Call) -> Reply:
    expires = rfc3339_now(timedelta(minutes=5))
    models = [
        {**_ollama_model(m), "expires_at": expires, "size_vram": 123} for m in state.ollama_models
    ]
    return json_reply({"models": models})


# --------------------------------------------------------------------------- generic


def plain(state: ApiState, call: Call) -> Reply:
    return Reply(body=b"hello from fake upstream", content_type="text/plain; charset=utf-8")


def binary(state: ApiState, call: Call) -> Reply:
    return Reply(body=bytes(range(256)), content_type="application/octet-stream")


def echo(state: ApiState, call: Call) -> Reply:
    try:
        received = call.json()
    except ValueError:
        received = call.body.decode("utf-8", "replace")
    return json_reply({"received": received, "headers": call.headers})


def stream_bytes(state: ApiState, call: Call) -> Reply:
    frames = [f"chunk {i}\n".encode() for i in range(5)]
    return Reply(content_type="application/octet-stream", frames=frames)


# --------------------------------------------------------------------------- routing

Handler = Callable[[ApiState, Call], Reply]

ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", "/v1/chat/completions"): openai_chat,
    ("POST", "/v1/embeddings"): openai_embeddings,
    ("POST", "/v1/responses"): openai_responses,
    ("GET", "/v1/models"): openai_models,
    ("POST", "/v1/messages"): anthropic_messages,
    ("POST", "/api/chat"): ollama_chat,
    ("POST", "/api/generate"): ollama_generate,
    ("POST", "/api/embed"): ollama_embed,
    ("POST", "/api/embeddings"): ollama_embeddings_legacy,
    ("GET", "/api/tags"): ollama_tags,
    ("GET", "/api/ps"): ollama_ps,
    ("GET", "/plain"): plain,
    ("GET", "/binary"): binary,
    ("POST", "/echo"): echo,
    ("GET", "/stream/bytes"): stream_bytes,
}


def find_handler(method: str, path: str) -> Handler:
    from .sdk_apis import find_sdk_handler  # Mistral, Cohere v2, Groq

    handler = ROUTES.get((method, path)) or find_sdk_handler(method, path)
    if handler is not None:
        return handler
    if method == "GET" and path.startswith("/v1/models/"):
        return openai_model
    from . import gemini  # its own module: it builds on the helpers above

    if (found := gemini.find(method, path)) is not None:
        return found
    if method == "POST" and path.startswith("/model/"):  # Amazon Bedrock Runtime
        from .bedrock import converse

        return lambda _state, call: converse(call)
    if any(route_path == path for _, route_path in ROUTES):
        raise ApiError(error_reply(path, 405, f"Method {method} not allowed for {path}."))
    raise ApiError(error_reply(path, 404, f"Invalid URL ({method} {path})"))


def handle(state: ApiState, call: Call) -> Reply:
    """Answer ``call`` as the real API would (in shape); errors become error replies."""
    try:
        return find_handler(call.method, call.path)(state, call)
    except ApiError as error:
        return error.reply
