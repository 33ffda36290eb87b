"""Every stored body can be decoded, and every recorded exception may be raised again
(docs/design.md §4, §2), checked when a recording is read.

A hand-edited or damaged file (`body_encoding: base64` with bad data, a response body
stored as a form, a broken multipart part) is a `RecordingError` naming the file and the
field when it is read, so replay counts it as a miss of that test, the proxy answers its
miss error, and `hashreplay verify` reports it: never a `binascii.Error` deep in a client.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.errors import RecordingError
from hashreplay.core.recording import RecordedRequest, RecordedResponse, Recording
from hashreplay.core.streams import StreamFormat

__all__ = ["check_bodies"]

_RESPONSE_ENCODINGS = frozenset(
    {BodyEncoding.JSON, BodyEncoding.TEXT, BodyEncoding.BASE64, BodyEncoding.EMPTY}
)


class _Bad(Exception):
    """One undecodable field: where (relative to the body) and why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(why)
        self.where = where
        self.why = why


def _base64(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise _Bad(where, f"base64 data must be a string, found {type(value).__name__}")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _Bad(where, f"invalid base64 data ({exc})") from None


def _response(response: RecordedResponse) -> None:
    body = response.body
    if response.is_streaming and response.stream_format is not None:
        if body is not None and not isinstance(body, list):
            raise _Bad("", f"a stream's body must be a list, found {type(body).__name__}")
        if response.stream_format is StreamFormat.SSE:
            for i, event in enumerate(body or []):
                if not isinstance(event, dict):
                    raise _Bad(f"[{i}]", f"an SSE event must be an object, found {event!r:.40}")
        if response.stream_format is StreamFormat.CHUNKS:
            for i, chunk in enumerate(body or []):
                if isinstance(chunk, dict):
                    _base64(chunk.get("base64"), f"[{i}].base64")
                elif not isinstance(chunk, str):
                    raise _Bad(f"[{i}]", f"a chunk must be text or base64, found {chunk!r:.40}")
        return
    encoding = response.body_encoding
    if encoding not in _RESPONSE_ENCODINGS:
        raise _Bad("", f"a response body cannot have body_encoding {encoding.value!r}")
    if encoding is BodyEncoding.BASE64 and body is not None:
        _base64(body, "")
    if encoding is BodyEncoding.TEXT and body is not None and not isinstance(body, str):
        raise _Bad("", f"a text body must be a string, found {type(body).__name__}")


def _request(request: RecordedRequest) -> None:
    body = request.body
    if request.body_encoding is BodyEncoding.BASE64 and body is not None:
        _base64(body, "")
    if request.body_encoding is BodyEncoding.MULTIPART:
        if not isinstance(body, list):
            raise _Bad("", f"a multipart body must be a list of parts, found {type(body).__name__}")
        for i, part in enumerate(body):
            if not isinstance(part, dict) or not isinstance(part.get("name", ""), str):
                raise _Bad(f"[{i}]", "a multipart part must be an object with a string name")
            if part.get("data_encoding") == "base64":
                _base64(part.get("data"), f"[{i}].data")


def check_bodies(recording: Recording, path: Any) -> None:
    """Raise a `RecordingError` naming the file and field of a body that cannot be decoded."""
    where = "request.body"
    try:
        _request(recording.request)
        for i, response in enumerate(recording.responses):
            where = "response.body" if i == 0 else f"later_responses[{i - 1}].body"
            _response(response)
    except _Bad as bad:
        msg = f"{where}{bad.where}: {bad.why}; re-record it"
        raise RecordingError(path, msg) from None
    for i, response in enumerate(recording.responses):
        if response.exception is not None:
            _check_exception(response.exception.type, i, recording.test_id, path)


def _check_exception(dotted: str, index: int, test_id: str | None, path: Any) -> None:
    """A recorded exception replay would refuse to raise is a `RecordingError` when the
    file is read: a miss of its test, reported by `verify` (docs/design.md §2)."""
    from hashreplay.core.typed import refused_exception  # only files holding an exception

    refused = refused_exception(dotted)
    if refused is not None:
        where = "response" if index == 0 else f"later_responses[{index - 1}]"
        how = f" (INFERENCE_MODE=record pytest '{test_id}')" if test_id else ""
        msg = f"{where}.exception.type: {refused}; re-record it{how}"
        raise RecordingError(path, msg)
