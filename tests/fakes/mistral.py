"""Mistral's chat API, in shape, for the ``mistralai`` SDK (on httpx2).

Mistral serves ``POST /v1/chat/completions``, the same path as OpenAI, so the fake upstream
mounts it under ``/mistral``: ``Mistral(server_url=f"{fake.url}/mistral")``.

What differs from OpenAI's shape, as the real API answers:

* ids are 32 lowercase hex digits, no prefix; tool-call ids are 9 letters and digits;
* the message carries ``tool_calls: null`` and ``prefix: false``; usage has just the three
  token counts, and no ``system_fingerprint``, ``service_tier`` or ``logprobs``;
* a stream's first chunk has ``{"role": "assistant", "content": ""}``, its last chunk the
  ``finish_reason`` and (always, unasked) the ``usage``, then ``data: [DONE]``;
* errors: ``401 {"message": "Unauthorized", "request_id": …}``, ``422 {"detail": [...]}``
  for a body that fails validation, otherwise ``{"object": "error", "message", "type",
  "param", "code"}``.
"""

from __future__ import annotations

import time
from typing import Any

from .apis import (
    ApiError,
    ApiState,
    Call,
    JSONObject,
    Reply,
    answer_chat,
    count_words,
    json_reply,
    message_texts,
    parse_object,
    random_alnum,
    random_hex,
    split_pieces,
    sse_event,
    sse_reply,
)

__all__ = ["CHAT", "PREFIX", "chat", "error_reply", "owns", "require_bearer"]

PREFIX = "/mistral"
CHAT = f"{PREFIX}/v1/chat/completions"

_TYPES = {400: "invalid_request_error", 404: "not_found", 429: "rate_limited"}


def owns(path: str) -> bool:
    return path == PREFIX or path.startswith(f"{PREFIX}/")


def error_reply(status: int, message: str) -> Reply:
    if status == 401:
        return json_reply({"message": "Unauthorized", "request_id": random_hex(32)}, status)
    payload = {
        "object": "error",
        "message": message,
        "type": _TYPES.get(status, "internal_server_error" if status >= 500 else "invalid_request"),
        "param": None,
        "code": str(status) if status >= 500 else None,
    }
    return json_reply(payload, status)


def _missing(field: str, body: JSONObject) -> ApiError:
    detail = {"type": "missing", "loc": ["body", field], "msg": "Field required", "input": body}
    return ApiError(json_reply({"detail": [detail]}, 422))


def require_bearer(call: Call, unauthorized: Reply) -> None:
    """401 when the request carries no ``Authorization: Bearer <key>``, as the real APIs do."""
    scheme, _, key = call.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(unauthorized)


def chat(state: ApiState, call: Call) -> Reply:
    require_bearer(call, error_reply(401, "Unauthorized"))
    body = parse_object(call)
    if not isinstance(body.get("model"), str):
        raise _missing("model", body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _missing("messages", body)
    answer = answer_chat(messages, body.get("tools"))
    prompt = count_words(message_texts(messages))
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": answer.output_tokens,
        "total_tokens": prompt + answer.output_tokens,
    }
    base: JSONObject = {"id": random_hex(32), "model": body["model"], "created": int(time.time())}
    tool_call: JSONObject | None = None
    if answer.is_tool_call:
        function = {"name": answer.tool_name, "arguments": answer.arguments}
        tool_call = {"id": random_alnum(9), "type": "function", "function": function, "index": 0}
    finish = "tool_calls" if tool_call else "stop"
    if body.get("stream"):
        return sse_reply(_chunks(base, answer.text, tool_call, finish, usage))
    message = {
        "role": "assistant",
        "content": answer.text,
        "tool_calls": [tool_call] if tool_call else None,
        "prefix": False,
    }
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return json_reply({**base, "object": "chat.completion", "usage": usage, "choices": [choice]})


def _chunks(
    base: JSONObject,
    text: str,
    tool_call: JSONObject | None,
    finish: str,
    usage: JSONObject,
) -> list[bytes]:
    def chunk(delta: JSONObject, finish_reason: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return sse_event({**base, "object": "chat.completion.chunk", "choices": [choice], **extra})

    frames = [chunk({"role": "assistant", "content": ""})]
    if tool_call is None:
        frames += [chunk({"content": piece}) for piece in split_pieces(text)]
    else:
        # Mistral sends each tool call whole, in one delta, never its arguments in pieces
        frames.append(chunk({"content": "", "tool_calls": [tool_call]}))
    frames.append(chunk({"content": ""}, finish, usage=usage))
    return [*frames, b"data: [DONE]\n\n"]
