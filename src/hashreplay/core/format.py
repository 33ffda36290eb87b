"""The recording file format (docs/design.md §4, contract) as pydantic models.

A file holds one request (as normalised and hashed, so its name can always be recomputed)
and the ordered responses that identical requests of one test received: `response` is the
first, `later_responses` the rest (absent when there is only one).

The models are the format's one definition: they check a file's JSON field by field
(`recording_from_json`) and write it (`model_dump(mode="json")`). A field of the wrong type
is named the way a reader of the file finds it: `response.ended.state: expected one of
'complete', 'error', 'abandoned', found 'done'`. Unknown fields are kept (pydantic's
`extra="allow"`) and written back, so a file made by a newer minor version of hashreplay, or
annotated by hand, is never silently stripped. Optional fields that are unset are left out
of the file, so files stay as small as the exchange they hold.

Scalars are strict (`"200"` is not a status); enums take their values. The schemas are built
on first use (`defer_build`), so a run that reads no recording pays nothing for them.

Every stored body can be decoded, and every recorded exception may be raised again
(docs/design.md §4, §2), checked when a recording is read.

A hand-edited or damaged file (`body_encoding: base64` with bad data, a response body
stored as a form, a broken multipart part) is a `RecordingError` naming the file and the
field when it is read, so replay counts it as a miss of that test, the proxy answers its
miss error, and `hashreplay verify` reports it: never a `binascii.Error` deep in a client.
"""

from __future__ import annotations

import base64
import binascii
from enum import Enum
from typing import Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_serializer,
)

from hashreplay.core.age import parse_day
from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import CALL_METHOD, FORMAT_VERSION, KEY_VERSION
from hashreplay.core.errors import ConfigError, RecordingError
from hashreplay.core.matching import MatchRule
from hashreplay.core.streams import StreamFormat
from hashreplay.core.templates import has_markers

_M = TypeVar("_M", bound="_Model")


class FormatError(ValueError):
    """A recording's JSON does not have the shape of the format: `where` (a dotted path,
    e.g. `response.status`) and what is wrong there."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


class _Model(BaseModel):
    """Unknown fields kept; the fields named in `omit_when_none` left out of the JSON while
    unset (and `later_responses` while empty)."""

    model_config = ConfigDict(extra="allow", defer_build=True)
    omit_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in self.omit_when_none:
            if not data.get(name, True):
                del data[name]
        return data

    def replace(self: _M, **changes: Any) -> _M:
        """A shallow copy with `changes` (field names) in place; unchecked, as the values
        come from code, not from a file."""
        unknown = set(changes) - set(type(self).model_fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return self.model_copy(update=changes)


class RecordedRequest(_Model):
    omit_when_none = ("conversation",)

    method: StrictStr
    url: StrictStr
    endpoint: StrictStr
    headers: dict[str, StrictStr] = {}
    body: Any = None
    body_encoding: BodyEncoding = BodyEncoding.JSON
    model: StrictStr | None = None
    #: The conversation the request was made in (`hashreplay.conversation`, the
    #: `X-HashReplay-Conversation` header); part of the hash. Absent: none.
    conversation: StrictStr | None = None


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
    #: body chunks (stream events, lines or chunks; 1 for a whole body) delivered before
    after_chunks: StrictInt = 0


class Timing(_Model):
    """When the response head and each chunk arrived, in µs from the request's start."""

    head_us: StrictInt
    chunks_us: list[StrictInt] = []


class RecordedException(_Model):
    #: Qualified name of the exception class, e.g. `httpx.ReadTimeout`.
    type: StrictStr
    message: StrictStr
    args: list[Any] = []


class FrameDirection(str, Enum):
    """Who sent a WebSocket frame (docs/recordings.md, "WebSocket connections")."""

    SENT = "sent"  # by the client
    RECEIVED = "received"  # by the client, from the server

    def __str__(self) -> str:
        return self.value


class FrameType(str, Enum):
    TEXT = "text"
    BINARY = "binary"
    CLOSE = "close"

    def __str__(self) -> str:
        return self.value


class Frame(_Model):
    """One frame of a WebSocket connection (docs/design.md §17): a text frame's data is
    JSON when it parses as an object or array, else text (`data_encoding: "text"`); a binary
    frame's is base64 (`data_encoding: "base64"`); a close frame has its `code` and
    `reason` and no data."""

    omit_when_none = ("data", "data_encoding", "at_us", "after_sent", "code", "reason")

    direction: FrameDirection
    type: FrameType
    data: Any = None
    #: absent: JSON (or no data, for a close frame)
    data_encoding: BodyEncoding | None = None
    #: µs since the handshake's answer arrived (only with `record_timing`)
    at_us: StrictInt | None = None
    #: a received frame: how many frames the client had sent before it arrived
    after_sent: StrictInt | None = None
    code: StrictInt | None = None
    reason: StrictStr | None = None

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # only None is unset here: `after_sent: 0` and `reason: ""` are facts
        data: dict[str, Any] = handler(self)
        for name in self.omit_when_none:
            if data.get(name, 0) is None:
                del data[name]
        return data


class RecordedResponse(_Model):
    omit_when_none = ("stream_format", "exception", "ended", "timing", "recorded_on", "frames")

    #: HTTP status; None when the exchange failed before a response arrived.
    status: StrictInt | None
    headers: dict[str, StrictStr] = {}
    #: JSON value, text or base64 (see `body_encoding`); for streams the ordered events,
    #: lines or chunks (see `stream_format`).
    body: Any = None
    body_encoding: BodyEncoding = BodyEncoding.JSON
    is_streaming: StrictBool = False
    stream_format: StreamFormat | None = None
    is_exception: StrictBool = False
    exception: RecordedException | None = None
    #: How it ended; absent: complete (or an error, when `is_exception`).
    ended: Ended | None = None
    #: Offsets of the head and chunks (only with `record_timing`); absent: not recorded.
    timing: Timing | None = None
    #: The UTC day (`YYYY-MM-DD`) this content was recorded; kept by a re-record that got
    #: the same normalised content. Absent: recorded before hashreplay kept days (no age).
    recorded_on: StrictStr | None = None
    #: A WebSocket connection's frames in order, after its handshake's answer (status 101);
    #: absent: not a connection (docs/design.md §17). `ended` says how it ended: absent,
    #: closed with a close frame; "error", cut (no close); "abandoned", the client left
    #: without closing. `after_chunks` counts frames there.
    frames: list[Frame] | None = None

    @field_validator("recorded_on")
    @classmethod
    def _check_day(cls, value: str | None) -> str | None:
        if value is not None:
            parse_day(value)  # a ValueError: the reader names the field
        return value

    def has_templates(self) -> bool:
        """Whether the body may hold `{{request:…}}` markers (or an escape to undo)."""
        return has_markers(self.body)

    @property
    def end_state(self) -> EndState:
        if self.ended is not None:
            return self.ended.state
        return EndState.ERROR if self.is_exception else EndState.COMPLETE


class Recording(_Model):
    omit_when_none = ("later_responses", "match")

    format_version: StrictInt
    key_version: StrictInt
    test_id: StrictStr | None
    request: RecordedRequest
    response: RecordedResponse
    later_responses: list[RecordedResponse] = []
    #: Stable facts only: which stable id replaced the value of which field.
    id_normalization_mapping: dict[str, StrictStr] = {}
    #: The matching rule that named the file (`ignore`, `match_on`) when it is narrower than
    #: the default, and where it came from (`from`: "project", "marker", "import"; absent in
    #: files written before, which keep their rule as their own) (docs/design.md §14);
    #: absent: the default rule.
    match: dict[str, list[StrictStr] | StrictStr] | None = None

    @property
    def responses(self) -> list[RecordedResponse]:
        return [self.response, *self.later_responses]


_EXPECTED = {
    "missing": None,
    "int_type": "an integer",
    "int_parsing": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
}


_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


_ENUMS: dict[tuple[str, ...], type[Enum]] = {
    ("state",): EndState,
    ("direction",): FrameDirection,
    ("type",): FrameType,
    ("data_encoding",): BodyEncoding,
    ("body_encoding",): BodyEncoding,
    ("stream_format",): StreamFormat,
}


#: The member tags pydantic puts in the location of an error inside a union (`match`'s
#: values): not part of the field's path.
_UNION_TAGS = frozenset({"list[str]", "str"})


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if part in _UNION_TAGS:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _found(value: Any) -> str:
    if isinstance(value, str) and len(value) <= 40:
        return repr(value)
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _problem(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "field required"
    if kind == "enum":
        enum = _ENUMS.get((str(error["loc"][-1]),))
        allowed = (
            ", ".join(repr(m.value) for m in enum) if enum else error["ctx"].get("expected", "")
        )
        return f"expected one of {allowed}, found {_found(error['input'])}"
    expected = _EXPECTED.get(kind)
    if expected is None:
        return str(error["msg"]).removeprefix("Value error, ")
    return f"expected {expected}, found {_found(error['input'])}"


def recording_from_json(value: Any) -> Recording:
    """The recording in `value` (a file's parsed JSON), each field checked; a FormatError
    names the first field that is missing or of the wrong type."""
    if not isinstance(value, dict):
        raise FormatError("", f"expected an object, found {_found(value)}")
    try:
        recording = Recording.model_validate(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise FormatError(_path(first["loc"]), _problem(first)) from None
    if recording.match is not None:  # the rule that named the file (docs/design.md §14)
        try:
            MatchRule.from_json(recording.match, source="match")
        except ConfigError as exc:
            where, _, problem = str(exc).partition(": ")
            raise FormatError(where, problem) from None
    return recording


def request_from_json(value: Any) -> RecordedRequest:
    """A stored request (`request` of a file), checked as `recording_from_json` does."""
    try:
        return RecordedRequest.model_validate(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise FormatError(_path(("request", *first["loc"])), _problem(first)) from None


def new_recording(
    *,
    test_id: str | None,
    request: RecordedRequest,
    responses: list[RecordedResponse],
    id_mapping: dict[str, str] | None = None,
    match: dict[str, Any] | None = None,
) -> Recording:
    return Recording(
        match=match,
        format_version=FORMAT_VERSION,
        key_version=KEY_VERSION,
        test_id=test_id,
        request=request,
        response=responses[0],
        later_responses=responses[1:],
        id_normalization_mapping=dict(id_mapping or {}),
    )


def is_no_response(request: RecordedRequest, response: RecordedResponse) -> bool:
    """Whether `response` is an HTTP call's transport error that got no response at all
    (refused, DNS, TLS, a timeout before the status line): not an answer, so never written
    under `record_failures = "responses"` (docs/design.md, "Only answers are recorded").
    A call-layer target's exception is its answer, never this."""
    return response.status is None and response.is_exception and request.method != CALL_METHOD


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
        if response.frames is not None:
            _check_frames(response, i, path)
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


def _check_frames(response: RecordedResponse, index: int, path: Any) -> None:
    """A connection's frame that cannot be replayed is a `RecordingError` naming the file
    and the frame (`response.frames[3].data: invalid base64 data`), so only its test fails
    (docs/design.md §17)."""
    found = _frames_problem(response)
    if found is not None:
        where = "response" if index == 0 else f"later_responses[{index - 1}]"
        raise RecordingError(path, f"{where}.{found[0]}: {found[1]}; re-record it")


_FRAME_ENCODINGS = frozenset({BodyEncoding.TEXT, BodyEncoding.BASE64, BodyEncoding.JSON})


def _frame_problem(frame: Frame) -> tuple[str, str] | None:
    """Why a stored frame cannot be replayed, as (field relative to the frame, problem)."""
    encoding = frame.data_encoding
    if encoding is not None and encoding not in _FRAME_ENCODINGS:
        return ".data_encoding", f"expected 'text', 'base64' or absent, found {encoding.value!r}"
    if frame.type is FrameType.CLOSE:
        if frame.code is not None and not 1000 <= frame.code <= 4999:
            return ".code", f"a close code is 1000 to 4999, found {frame.code}"
        return None
    if frame.code is not None or frame.reason is not None:
        return ".code", f"only a close frame has a code and reason; this is a {frame.type} frame"
    if frame.after_sent is not None and frame.after_sent < 0:
        return ".after_sent", f"must be 0 or more, found {frame.after_sent}"
    if frame.after_sent is not None and frame.direction is FrameDirection.SENT:
        return ".after_sent", "only a received frame has after_sent"
    if frame.at_us is not None and frame.at_us < 0:
        return ".at_us", f"must be 0 or more, found {frame.at_us}"
    if encoding is BodyEncoding.BASE64:
        if not isinstance(frame.data, str):
            return ".data", f"base64 data must be a string, found {type(frame.data).__name__}"
        try:
            raw = base64.b64decode(frame.data, validate=True)
        except (binascii.Error, ValueError) as exc:
            return ".data", f"invalid base64 data ({exc})"
        if frame.type is FrameType.TEXT:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return ".data", "a text frame's base64 data is not UTF-8"
    elif encoding is BodyEncoding.TEXT and not isinstance(frame.data, str):
        return ".data", f"a text frame's data must be a string, found {type(frame.data).__name__}"
    elif frame.type is FrameType.BINARY and encoding is None:
        return ".data_encoding", "a binary frame's data must be base64 (data_encoding: 'base64')"
    return None


def _frames_problem(response: RecordedResponse) -> tuple[str, str] | None:
    """The first frame of a connection that cannot be replayed: (`frames[3].data`, why)."""
    frames = response.frames or []
    if frames and response.status != 101:
        return "frames", f"only a handshake answered with 101 has frames; status {response.status}"
    for index, frame in enumerate(frames):
        found = _frame_problem(frame)
        if found is not None:
            return f"frames[{index}]{found[0]}", f"{found[1]} ({frame.direction} {frame.type})"
    return None
