"""Amazon Bedrock Runtime, in shape, for the fake upstream.

``POST /model/{modelId}/converse`` and ``/invoke`` (an Anthropic Messages body) answer JSON;
``POST /model/{modelId}/converse-stream`` and ``/invoke-with-response-stream`` answer
``application/vnd.amazon.eventstream``: binary frames (prelude with total and header
lengths and its CRC32, typed headers ``:event-type`` / ``:content-type`` /
``:message-type``, a JSON payload, the message CRC32), one frame per HTTP chunk, as botocore's
event stream parser reads and validates them. Like the real service every call gets a fresh
``x-amzn-RequestId``, latency and the random ``p`` padding Bedrock adds to stream payloads;
the reply text is ``"echo: <last user text>"`` as in the other fake APIs.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
import zlib
from typing import Any
from urllib.parse import unquote

from .apis import Call, Reply, count_words, random_alnum, random_int, split_pieces

EVENTSTREAM = "application/vnd.amazon.eventstream"
_STRING = 7  # the event stream header value type of a UTF-8 string


def eventstream_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event stream message, CRCs included."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack(">B", len(raw_name)) + raw_name
        encoded += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event_frame(event_type: str, payload: dict[str, Any]) -> bytes:
    body = json.dumps({**payload, "p": random_alnum(random_int(4, 30))}).encode()
    headers = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return eventstream_frame(headers, body)


def _text_of(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))


def _error(status: int, kind: str, message: str) -> Reply:
    return Reply(
        status=status,
        body=json.dumps({"message": message}).encode(),
        headers={
            "x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "x-amzn-requestid": str(uuid.uuid4()),
        },
    )


def _messages(call: Call, missing: str) -> list[Any] | Reply:
    """The request's `messages`, or the error reply Bedrock gives for its body."""
    try:
        body = json.loads(call.body or b"{}")
    except ValueError:
        return _error(400, "SerializationException", "Request body is not valid JSON")
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return _error(400, "ValidationException", missing)
    return messages


def converse(call: Call) -> Reply:
    """`/model/{id}/converse` and `/model/{id}/converse-stream`; `invoke` and
    `invoke-with-response-stream` go to `invoke`."""
    parts = call.path.split("/")
    if len(parts) == 4 and parts[3] in ("invoke", "invoke-with-response-stream") and parts[2]:
        return invoke(call, stream=parts[3] != "invoke")
    if len(parts) != 4 or parts[3] not in ("converse", "converse-stream") or not parts[2]:
        return _error(404, "UnknownOperationException", f"Unknown operation {call.path}")
    messages = _messages(call, "A conversation must start with a message.")
    if isinstance(messages, Reply):
        return messages
    user = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    text = "echo: " + (_text_of(user[-1].get("content")) if user else "")
    input_tokens = count_words(_text_of(m.get("content")) for m in messages)
    usage = {
        "inputTokens": input_tokens,
        "outputTokens": count_words([text]),
        "totalTokens": input_tokens + count_words([text]),
    }
    request_id = {"x-amzn-requestid": str(uuid.uuid4())}
    if parts[3] == "converse":
        payload = {
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn",
            "usage": usage,
            "metrics": {"latencyMs": random_int(100, 3000)},
        }
        return Reply(body=json.dumps(payload).encode(), headers=request_id)
    frames = [event_frame("messageStart", {"role": "assistant"})]
    frames.extend(
        event_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}})
        for piece in split_pieces(text, 2)
    )
    frames.append(event_frame("contentBlockStop", {"contentBlockIndex": 0}))
    frames.append(event_frame("messageStop", {"stopReason": "end_turn"}))
    frames.append(
        event_frame("metadata", {"usage": usage, "metrics": {"latencyMs": random_int(100, 3000)}})
    )
    return Reply(content_type=EVENTSTREAM, frames=frames, headers=request_id)


def invoke(call: Call, *, stream: bool) -> Reply:
    """`InvokeModel` and `InvokeModelWithResponseStream` for an Anthropic model: the body is
    the Anthropic Messages API's; a streamed answer wraps each Anthropic event as base64 JSON
    in a `chunk` frame's `{"bytes": …}` and ends with Bedrock's invocation metrics, with a
    fresh `msg_bdrk_…` id and latencies per call, as the real service does."""
    messages = _messages(call, "messages: field required")
    if isinstance(messages, Reply):
        return messages
    last = messages[-1].get("content") if isinstance(messages[-1], dict) else None
    text = "echo: " + (last if isinstance(last, str) else _text_of(last))
    usage = {"input_tokens": count_words([str(last)]), "output_tokens": count_words([text])}
    message = {
        "id": "msg_bdrk_" + random_alnum(24),
        "type": "message",
        "role": "assistant",
        "model": model_id(call.path),
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": usage,
    }
    request_id = {"x-amzn-requestid": str(uuid.uuid4())}
    if not stream:
        return Reply(body=json.dumps(message).encode(), headers=request_id)
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    events.extend(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
        for p in split_pieces(text, 2)
    )
    metrics = {
        "inputTokenCount": usage["input_tokens"],
        "outputTokenCount": usage["output_tokens"],
        "invocationLatency": random_int(100, 3000),
        "firstByteLatency": random_int(50, 900),
    }
    events.append({"type": "content_block_stop", "index": 0})
    events.append({"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics})
    frames = [
        event_frame("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()})
        for e in events
    ]
    return Reply(content_type=EVENTSTREAM, frames=frames, headers=request_id)


def model_id(path: str) -> str:
    """The model id a Bedrock path names (botocore percent-encodes its `:`)."""
    return unquote(path.split("/")[2])
