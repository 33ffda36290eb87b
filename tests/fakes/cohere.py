"""Cohere's v2 chat API (``POST /v2/chat``), in shape, for ``cohere.ClientV2`` (on httpx).

As the real API answers:

* the reply: ``{"id": <uuid4>, "finish_reason": "COMPLETE", "message": {"role":
  "assistant", "content": [{"type": "text", "text": …}]}, "usage": {"billed_units": {…},
  "tokens": {…}, "cached_tokens": 0}}``; with ``tools``, a ``tool_plan`` and ``tool_calls``
  (ids ``<tool name>_<12 letters and digits>``) and ``finish_reason: "TOOL_CALL"``;
* ``stream: true``: SSE with named events, each ``data`` carrying its ``type`` too:
  ``message-start`` (with the id), ``content-start``, ``content-delta`` (one or more), ``content-end``
  (or ``tool-plan-delta`` (one or more), ``tool-call-start``, ``tool-call-delta`` (one or more),
  ``tool-call-end``), then ``message-end`` with the finish reason and the usage;
* errors: ``{"id": <uuid4>, "message": …}`` (``"invalid api token"`` for 401).
"""

from __future__ import annotations

import uuid
from typing import Any

from .apis import (
    ApiError,
    ApiState,
    Call,
    JSONObject,
    Reply,
    answer_chat,
    char_pieces,
    count_words,
    json_reply,
    message_texts,
    parse_object,
    random_alnum,
    split_pieces,
    sse_event,
    sse_reply,
)
from .mistral import require_bearer

__all__ = ["CHAT", "chat", "error_reply", "owns"]

CHAT = "/v2/chat"
#: tokens the real API counts for its own system preamble, billed to nobody
_PREAMBLE_TOKENS = 64


def owns(path: str) -> bool:
    return path.startswith("/v2/")


def error_reply(status: int, message: str) -> Reply:
    text = "invalid api token" if status == 401 else message
    return json_reply({"id": str(uuid.uuid4()), "message": text}, status)


def _bad(message: str) -> ApiError:
    return ApiError(error_reply(400, f"invalid request: {message}"))


def chat(state: ApiState, call: Call) -> Reply:
    require_bearer(call, error_reply(401, "invalid api token"))
    body = parse_object(call)
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _bad("model must be a non-empty string.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must contain at least one message.")
    answer = answer_chat(messages, body.get("tools"))
    billed_in = count_words(message_texts(messages))
    billed_out = answer.output_tokens
    usage = {
        "billed_units": {"input_tokens": billed_in, "output_tokens": billed_out},
        "tokens": {"input_tokens": billed_in + _PREAMBLE_TOKENS, "output_tokens": billed_out},
        "cached_tokens": 0,
    }
    reply_id = str(uuid.uuid4())
    message: JSONObject = {"role": "assistant"}
    tool_call: JSONObject | None = None
    plan = ""
    if answer.is_tool_call:
        plan = f"I will use {answer.tool_name} to answer this."
        function = {"name": answer.tool_name, "arguments": answer.arguments}
        tool_call = {
            "id": f"{answer.tool_name}_{random_alnum(12).lower()}",
            "type": "function",
            "function": function,
        }
        message.update(tool_plan=plan, tool_calls=[tool_call])
        finish = "TOOL_CALL"
    else:
        message["content"] = [{"type": "text", "text": answer.text}]
        finish = "COMPLETE"
    if not body.get("stream"):
        return json_reply(
            {"id": reply_id, "finish_reason": finish, "message": message, "usage": usage}
        )
    frames = [
        _event(
            "message-start",
            id=reply_id,
            delta={
                "message": {
                    "role": "assistant",
                    "content": [],
                    "tool_plan": "",
                    "tool_calls": [],
                    "citations": [],
                }
            },
        )
    ]
    if tool_call is None:
        frames += _text_events(answer.text)
    else:
        frames += _tool_events(plan, tool_call)
    frames.append(_event("message-end", delta={"finish_reason": finish, "usage": usage}))
    return sse_reply(frames)


def _event(name: str, **fields: Any) -> bytes:
    return sse_event({"type": name, **fields}, event=name)


def _text_events(text: str) -> list[bytes]:
    start = {"message": {"content": {"type": "text", "text": ""}}}
    return [
        _event("content-start", index=0, delta=start),
        *(
            _event("content-delta", index=0, delta={"message": {"content": {"text": piece}}})
            for piece in split_pieces(text)
        ),
        _event("content-end", index=0),
    ]


def _tool_events(plan: str, tool_call: JSONObject) -> list[bytes]:
    started = {**tool_call, "function": {**tool_call["function"], "arguments": ""}}
    arguments = str(tool_call["function"]["arguments"])
    return [
        *(
            _event("tool-plan-delta", delta={"message": {"tool_plan": piece}})
            for piece in split_pieces(plan)
        ),
        _event("tool-call-start", index=0, delta={"message": {"tool_calls": started}}),
        *(
            _event(
                "tool-call-delta",
                index=0,
                delta={"message": {"tool_calls": {"function": {"arguments": piece}}}},
            )
            for piece in char_pieces(arguments)
        ),
        _event("tool-call-end", index=0),
    ]
