"""Groq's OpenAI-compatible chat API (``POST /openai/v1/chat/completions``), in shape, for the
``groq`` SDK (on httpx): ``Groq(base_url=fake.url)``.

It is OpenAI's chat completion (see :func:`.apis.openai_chat`) with Groq's differences, as the
real API answers:

* ids ``chatcmpl-<uuid4>``, ``service_tier: "on_demand"``, no ``obfuscation`` padding;
* ``x_groq: {"id": "req_<26 letters and digits>"}`` on the completion and on a stream's first
  chunk; the stream's finishing chunk carries ``x_groq.usage``;
* usage with Groq's timings (``queue_time``, ``prompt_time``, ``completion_time``,
  ``total_time``: fresh random seconds on every call) and ``usage_breakdown: null``;
* errors in OpenAI's shape (``{"error": {"message", "type", "code"}}``), 401 with
  ``code: "invalid_api_key"``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from .apis import (
    ApiState,
    Call,
    JSONObject,
    Reply,
    answer_chat,
    count_words,
    json_reply,
    message_texts,
    openai_chat,
    parse_object,
    random_alnum,
    random_int,
    sse_event,
)
from .mistral import require_bearer

__all__ = ["CHAT", "chat", "error_reply", "owns"]

PREFIX = "/openai/"
CHAT = "/openai/v1/chat/completions"


def owns(path: str) -> bool:
    return path.startswith(PREFIX)


def error_reply(status: int, message: str) -> Reply:
    codes = {401: "invalid_api_key", 404: "unknown_url", 429: "rate_limit_exceeded"}
    kind = "invalid_request_error" if status < 500 else "internal_server_error"
    text = "Invalid API Key" if status == 401 else message
    return json_reply({"error": {"message": text, "type": kind, "code": codes.get(status)}}, status)


def chat(state: ApiState, call: Call) -> Reply:
    require_bearer(call, error_reply(401, "Invalid API Key"))
    reply = openai_chat(state, call)  # a bad request raises ApiError in Groq's shape
    ids = {"id": f"chatcmpl-{uuid.uuid4()}", "x_groq": {"id": f"req_{random_alnum(26).lower()}"}}
    if reply.frames is None:
        completion = json.loads(reply.body)
        usage = _usage(completion.get("usage") or {})
        completion.update(ids, usage=usage, service_tier="on_demand", usage_breakdown=None)
        for choice in completion["choices"]:
            for name in ("refusal", "annotations"):
                choice["message"].pop(name, None)
        return json_reply(completion)
    messages = parse_object(call)["messages"]
    counts = {
        "prompt_tokens": count_words(message_texts(messages)),
        "completion_tokens": answer_chat(messages, parse_object(call).get("tools")).output_tokens,
    }
    reply.frames = [
        _groq_frame(frame, ids, index, counts) for index, frame in enumerate(reply.frames)
    ]
    return reply


def _groq_frame(frame: bytes, ids: JSONObject, index: int, counts: JSONObject) -> bytes:
    if not frame.startswith(b"data: {"):
        return frame  # data: [DONE]
    chunk = json.loads(frame[len(b"data: ") :])
    chunk.pop("obfuscation", None)
    chunk.update(id=ids["id"], service_tier="on_demand")
    choices: list[Any] = chunk.get("choices") or []
    if index == 0:
        chunk["x_groq"] = ids["x_groq"]
    elif choices and choices[0].get("finish_reason"):
        chunk["x_groq"] = {**ids["x_groq"], "usage": _usage(counts)}
    if chunk.get("usage"):
        chunk["usage"] = _usage(chunk["usage"])
    return sse_event(chunk)


def _usage(openai_usage: JSONObject) -> JSONObject:
    prompt = int(openai_usage.get("prompt_tokens", 0))
    completion = int(openai_usage.get("completion_tokens", 0))
    queue, prompt_s, completion_s = (random_int(1, 200_000) / 1e6 for _ in range(3))
    return {
        "queue_time": queue,
        "prompt_tokens": prompt,
        "prompt_time": prompt_s,
        "completion_tokens": completion,
        "completion_time": completion_s,
        "total_tokens": prompt + completion,
        "total_time": prompt_s + completion_s,
    }
