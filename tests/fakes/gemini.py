"""The Gemini API (generativelanguage, `v1beta`), in shape, for the fake upstream.

``POST /v1beta/models/{model}:generateContent`` answers one JSON object;
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` answers the same reply as SSE
events (``data: {...}`` ending in CRLF CRLF, as the real API writes them), a few words each.
Like the real API, every call has a fresh random ``responseId`` and ``createTime``; the text
is ``"echo: <text of the last user turn>"``, token counts are word counts.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from .apis import (
    ApiError,
    ApiState,
    Call,
    Handler,
    Reply,
    count_words,
    json_reply,
    random_alnum,
    split_pieces,
    sse_reply,
)

_PATH = re.compile(
    r"^/v1beta/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)
_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "INVALID_ARGUMENT"}


def error_reply(status: int, message: str) -> Reply:
    """An error in Gemini's shape: ``{"error": {"code", "message", "status"}}``."""
    error = {"code": status, "message": message, "status": _STATUS.get(status, "INTERNAL")}
    return json_reply({"error": error}, status)


def find(method: str, path: str) -> Handler | None:
    """The handler for a Gemini path, or None when `path` is not one."""
    found = _PATH.match(path)
    if found is None:
        return None
    if method != "POST":
        raise ApiError(error_reply(405, f"Method {method} not allowed for {path}."))
    return generate if found["method"] == "generateContent" else stream_generate


def _texts(body: dict[str, Any]) -> tuple[list[str], str]:
    """All texts of the conversation, and the text of the last user turn."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise ApiError(error_reply(400, "contents is not specified"))
    texts: list[str] = []
    last_user = ""
    for turn in contents:
        parts = turn.get("parts", []) if isinstance(turn, dict) else []
        text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        texts.append(text)
        if turn.get("role", "user") == "user":
            last_user = text
    return texts, last_user


def _chunk(model: str, text: str, *, finish: bool, prompt: int, output: int) -> dict[str, Any]:
    candidate: dict[str, Any] = {
        "content": {"parts": [{"text": text}], "role": "model"},
        "index": 0,
    }
    if finish:
        candidate["finishReason"] = "STOP"
    usage = {"promptTokenCount": prompt}
    if finish:
        usage.update(candidatesTokenCount=output, totalTokenCount=prompt + output)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model,
        "createTime": now,
        "responseId": random_alnum(22),
    }


def _request(call: Call) -> tuple[str, str, int]:
    model = _PATH.match(call.path)["model"]  # type: ignore[index]
    try:
        body = call.json()
    except ValueError:
        raise ApiError(error_reply(400, "Invalid JSON payload received.")) from None
    texts, last_user = _texts(body if isinstance(body, dict) else {})
    return model, f"echo: {last_user}", count_words(texts)


def generate(state: ApiState, call: Call) -> Reply:
    model, reply, prompt = _request(call)
    output = count_words([reply])
    return json_reply(_chunk(model, reply, finish=True, prompt=prompt, output=output))


def stream_generate(state: ApiState, call: Call) -> Reply:
    if "alt=sse" not in call.query:
        raise ApiError(error_reply(400, "this fake streams only with ?alt=sse"))
    model, reply, prompt = _request(call)
    output = count_words([reply])
    pieces = split_pieces(reply)
    frames = []
    for i, piece in enumerate(pieces):
        chunk = _chunk(model, piece, finish=i == len(pieces) - 1, prompt=prompt, output=output)
        frames.append(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
    reply_obj = sse_reply(frames)
    reply_obj.content_type = "text/event-stream"
    return reply_obj
