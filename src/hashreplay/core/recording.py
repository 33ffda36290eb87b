"""The recording file format (docs/design.md §4, contract) as validated models.

A file holds one request (as normalised and hashed, so its name can always be recomputed)
and the ordered responses that identical requests of one test received: `response` is the
first, `later_responses` the rest (absent when there is only one).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import FORMAT_VERSION, KEY_VERSION
from hashreplay.core.streams import StreamFormat
from hashreplay.core.templates import has_markers


class _Model(BaseModel):
    # Unknown fields are kept (and written back) so a file made by a newer minor version
    # of hashreplay, or annotated by hand, is never silently stripped.
    model_config = ConfigDict(extra="allow", use_enum_values=False)


class RecordedRequest(_Model):
    method: str
    url: str
    endpoint: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None
    body_encoding: BodyEncoding = BodyEncoding.JSON
    model: str | None = None
    #: The conversation the request was made in (`hashreplay.conversation`, the
    #: `X-HashReplay-Conversation` header); part of the hash. Absent: none.
    conversation: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data.get("conversation") is None:
            data.pop("conversation", None)
        return data


class EndState(str, Enum):
    """How a response ended (docs/recordings.md, "How a response ended")."""

    COMPLETE = "complete"
    #: the upstream or the connection failed after `after_chunks` chunks
    ERROR = "error"
    #: the client stopped reading after `after_chunks` chunks (disconnected, timed out)
    ABANDONED = "abandoned"

    def __str__(self) -> str:
        return self.value


class Ended(_Model):
    state: EndState
    #: body chunks (stream events, lines or chunks; 1 for a whole body) delivered before it
    after_chunks: int = 0


class Timing(_Model):
    """When the response head and each chunk arrived, in µs from the request's start."""

    head_us: int
    chunks_us: list[int] = Field(default_factory=list)


class RecordedException(_Model):
    #: Qualified name of the exception class, e.g. `httpx.ReadTimeout`.
    type: str
    message: str
    args: list[Any] = Field(default_factory=list)


class RecordedResponse(_Model):
    #: HTTP status; None when the exchange failed before a response arrived.
    status: int | None
    headers: dict[str, str] = Field(default_factory=dict)
    #: JSON value, text or base64 (see `body_encoding`); for streams the ordered events,
    #: lines or chunks (see `stream_format`).
    body: Any = None
    body_encoding: BodyEncoding = BodyEncoding.JSON
    is_streaming: bool = False
    stream_format: StreamFormat | None = None
    is_exception: bool = False
    exception: RecordedException | None = None
    #: How it ended; absent: complete (or an error, when `is_exception`).
    ended: Ended | None = None
    #: Offsets of the head and chunks (only with `record_timing`); absent: not recorded.
    timing: Timing | None = None

    def has_templates(self) -> bool:
        """Whether the body may hold `{{request:…}}` markers (or an escape to undo)."""
        return has_markers(self.body)

    @property
    def end_state(self) -> EndState:
        if self.ended is not None:
            return self.ended.state
        return EndState.ERROR if self.is_exception else EndState.COMPLETE

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for optional in ("stream_format", "exception", "ended", "timing"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data


class Recording(_Model):
    format_version: int
    key_version: int
    test_id: str | None
    request: RecordedRequest
    response: RecordedResponse
    later_responses: list[RecordedResponse] = Field(default_factory=list)
    #: Stable facts only: which stable id replaced the value of which field.
    id_normalization_mapping: dict[str, str] = Field(default_factory=dict)

    @property
    def responses(self) -> list[RecordedResponse]:
        return [self.response, *self.later_responses]

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude={"request", "response", "later_responses"})
        data["request"] = self.request.to_json_dict()
        data["response"] = self.response.to_json_dict()
        if self.later_responses:
            data["later_responses"] = [r.to_json_dict() for r in self.later_responses]
        return data


def new_recording(
    *,
    test_id: str | None,
    request: RecordedRequest,
    responses: list[RecordedResponse],
    id_mapping: dict[str, str] | None = None,
) -> Recording:
    return Recording(
        format_version=FORMAT_VERSION,
        key_version=KEY_VERSION,
        test_id=test_id,
        request=request,
        response=responses[0],
        later_responses=responses[1:],
        id_normalization_mapping=dict(id_mapping or {}),
    )
