"""The recording file format (docs/design.md §4, contract) as checked classes.

A file holds one request (as normalised and hashed, so its name can always be recomputed)
and the ordered responses that identical requests of one test received: `response` is the
first, `later_responses` the rest (absent when there is only one).

The classes are plain, and `from_json` checks a file's JSON field by field. They were
pydantic models: building them cost ~15 ms at every start-up, and validating a file ~10 µs
of every replayed call, for six small, fixed shapes (docs/benchmarks.md §13). A field of the
wrong type is named the way a reader of the file finds it: `response.ended.state: expected
one of 'complete', 'error', 'abandoned', found 'done'`.

Unknown fields are kept (`extra`) and written back, so a file made by a newer minor version
of hashreplay, or annotated by hand, is never silently stripped.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Any, ClassVar, TypeVar

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import CALL_METHOD, FORMAT_VERSION, KEY_VERSION
from hashreplay.core.streams import StreamFormat
from hashreplay.core.templates import has_markers

_R = TypeVar("_R", bound="_Record")
_E = TypeVar("_E", bound=Enum)


class FormatError(ValueError):
    """A recording's JSON does not have the shape of the format: `where` (a dotted path,
    e.g. `response.status`) and what is wrong there."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


class _Record:
    """Fields in `__slots__`, unknown JSON fields in `extra`; compared and shown by field.

    `from_json` sets the slots itself rather than calling `__init__`: its values are checked
    already, and skipping the keyword call and the enum lookups again is ~1 µs a class on
    the replay path."""

    __slots__ = ("extra",)
    #: the format's own fields, in the order they are shown
    fields: ClassVar[tuple[str, ...]] = ()
    known: ClassVar[frozenset[str]] = frozenset()
    extra: dict[str, Any]

    def _values(self) -> Iterator[tuple[str, Any]]:
        for name in self.fields:
            yield name, getattr(self, name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Record)
        return all(getattr(self, n) == getattr(other, n) for n in self.fields) and (
            self.extra == other.extra
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the models were

    def __repr__(self) -> str:
        shown = [f"{name}={value!r}" for name, value in self._values()]
        shown += [f"{name}={value!r}" for name, value in self.extra.items()]
        return f"{type(self).__name__}({', '.join(shown)})"

    def replace(self: _R, **changes: Any) -> _R:
        """A shallow copy with `changes` (field names) in place; unchecked, as the values
        come from code, not from a file."""
        copy = object.__new__(type(self))
        for name in self.fields:
            object.__setattr__(copy, name, changes.pop(name, getattr(self, name)))
        if changes:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(changes)}")
        copy.extra = self.extra
        return copy


# --- checking JSON, field by field --------------------------------------------------------


_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}
_MISSING: Any = object()

# Each check takes the object, the key and the object's own path; the path of the field is
# only put together when it is wrong (the checks run on every replayed call).


def _at(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _wrong(value: Any, where: str, expected: str) -> FormatError:
    if value is _MISSING:
        return FormatError(where, "field required")
    if isinstance(value, str) and len(value) <= 40:
        found = repr(value)
    else:
        found = _JSON_TYPES.get(type(value), type(value).__name__)
    return FormatError(where, f"expected {expected}, found {found}")


def _object(value: Any, where: str) -> dict[str, Any]:
    if type(value) is dict:
        return value
    raise _wrong(value, where, "an object")


def _str(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key, _MISSING)
    if type(value) is str:
        return value
    raise _wrong(value, _at(where, key), "a string")


def _optional_str(data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None or type(value) is str:
        return value
    raise _wrong(value, _at(where, key), "a string")


def _int(data: dict[str, Any], key: str, where: str, default: Any = _MISSING) -> int:
    value = data.get(key, default)
    if type(value) is int:
        return value
    raise _wrong(value, _at(where, key), "an integer")


def _bool(data: dict[str, Any], key: str, where: str) -> bool:
    value = data.get(key, False)
    if type(value) is bool:
        return value
    raise _wrong(value, _at(where, key), "true or false")


def _list(data: dict[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key, _MISSING)
    if type(value) is list:
        return value
    if value is _MISSING:
        return []
    raise _wrong(value, _at(where, key), "an array")


def _str_map(data: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value = data.get(key, _MISSING)
    if type(value) is dict:
        for name, item in value.items():
            if type(item) is not str:
                raise _wrong(item, f"{_at(where, key)}.{name}", "a string")
        return value
    if value is _MISSING:
        return {}
    raise _wrong(value, _at(where, key), "an object")


def _members(cls: type[_E]) -> dict[str, _E]:
    return {member.value: member for member in cls}


_BODY_ENCODINGS = _members(BodyEncoding)
_STREAM_FORMATS = _members(StreamFormat)


def _enum(members: dict[str, _E], value: Any, where: str) -> _E:
    """The member of this value (a member of a str enum is a str: it finds itself)."""
    member = members.get(value) if isinstance(value, str) else None
    if member is not None:
        return member
    allowed = ", ".join(repr(name) for name in members)
    raise _wrong(value, where, f"one of {allowed}")


def _body_encoding(data: dict[str, Any], where: str) -> BodyEncoding:
    value = data.get("body_encoding", BodyEncoding.JSON)
    return _enum(_BODY_ENCODINGS, value, _at(where, "body_encoding"))


def _rest(data: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The fields of `data` that the format does not know (kept and written back)."""
    if known.issuperset(data):
        return {}
    return {key: value for key, value in data.items() if key not in known}


def _json(data: dict[str, Any], extra: dict[str, Any], optional: tuple[str, ...]) -> None:
    """Drop the `optional` fields that are None from `data`; add the unknown ones."""
    for name in optional:
        if data[name] is None:
            del data[name]
    if extra:
        data.update(extra)


# --- the format ----------------------------------------------------------------------------


class RecordedRequest(_Record):
    fields = (
        "method",
        "url",
        "endpoint",
        "headers",
        "body",
        "body_encoding",
        "model",
        "conversation",
    )
    __slots__ = fields
    known = frozenset(fields)

    def __init__(
        self,
        *,
        method: str,
        url: str,
        endpoint: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        body_encoding: BodyEncoding | str = BodyEncoding.JSON,
        model: str | None = None,
        conversation: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.method = method
        self.url = url
        self.endpoint = endpoint
        self.headers: dict[str, str] = {} if headers is None else headers
        self.body = body
        self.body_encoding = _enum(_BODY_ENCODINGS, body_encoding, "body_encoding")
        self.model = model
        #: The conversation the request was made in (`hashreplay.conversation`, the
        #: `X-HashReplay-Conversation` header); part of the hash. Absent: none.
        self.conversation = conversation
        self.extra = {} if extra is None else extra

    @classmethod
    def from_json(cls, value: Any, where: str = "request") -> RecordedRequest:
        data = _object(value, where)
        self = object.__new__(cls)
        self.method = _str(data, "method", where)
        self.url = _str(data, "url", where)
        self.endpoint = _str(data, "endpoint", where)
        self.headers = _str_map(data, "headers", where)
        self.body = data.get("body")
        self.body_encoding = _body_encoding(data, where)
        self.model = _optional_str(data, "model", where)
        self.conversation = _optional_str(data, "conversation", where)
        self.extra = _rest(data, cls.known)
        return self

    def to_json_dict(self) -> dict[str, Any]:
        data = {
            "method": self.method,
            "url": self.url,
            "endpoint": self.endpoint,
            "headers": dict(self.headers),
            "body": self.body,
            "body_encoding": self.body_encoding.value,
            "model": self.model,
            "conversation": self.conversation,
        }
        _json(data, self.extra, ("conversation",))
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


_END_STATES = _members(EndState)


class Ended(_Record):
    fields = ("state", "after_chunks")
    __slots__ = fields
    known = frozenset(fields)

    def __init__(
        self, *, state: EndState | str, after_chunks: int = 0, extra: dict[str, Any] | None = None
    ) -> None:
        self.state = _enum(_END_STATES, state, "state")
        #: body chunks (stream events, lines or chunks; 1 for a whole body) delivered before
        self.after_chunks = after_chunks
        self.extra = {} if extra is None else extra

    @classmethod
    def from_json(cls, value: Any, where: str) -> Ended:
        data = _object(value, where)
        state = data.get("state", _MISSING)
        self = object.__new__(cls)
        self.state = _enum(_END_STATES, state, _at(where, "state"))
        self.after_chunks = _int(data, "after_chunks", where, 0)
        self.extra = _rest(data, cls.known)
        return self

    def to_json_dict(self) -> dict[str, Any]:
        data = {"state": self.state.value, "after_chunks": self.after_chunks}
        _json(data, self.extra, ())
        return data


class Timing(_Record):
    """When the response head and each chunk arrived, in µs from the request's start."""

    fields = ("head_us", "chunks_us")
    __slots__ = fields
    known = frozenset(fields)

    def __init__(
        self,
        *,
        head_us: int,
        chunks_us: list[int] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.head_us = head_us
        self.chunks_us: list[int] = [] if chunks_us is None else chunks_us
        self.extra = {} if extra is None else extra

    @classmethod
    def from_json(cls, value: Any, where: str) -> Timing:
        data = _object(value, where)
        chunks = _list(data, "chunks_us", where)
        for i, us in enumerate(chunks):
            if type(us) is not int:
                raise _wrong(us, _at(_at(where, "chunks_us"), i), "an integer")
        self = object.__new__(cls)
        self.head_us = _int(data, "head_us", where)
        self.chunks_us = chunks
        self.extra = _rest(data, cls.known)
        return self

    def to_json_dict(self) -> dict[str, Any]:
        data = {"head_us": self.head_us, "chunks_us": list(self.chunks_us)}
        _json(data, self.extra, ())
        return data


class RecordedException(_Record):
    fields = ("type", "message", "args")
    __slots__ = fields
    known = frozenset(fields)

    def __init__(
        self,
        *,
        type: str,  # the field's name in the format
        message: str,
        args: list[Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        #: Qualified name of the exception class, e.g. `httpx.ReadTimeout`.
        self.type = type
        self.message = message
        self.args: list[Any] = [] if args is None else args
        self.extra = {} if extra is None else extra

    @classmethod
    def from_json(cls, value: Any, where: str) -> RecordedException:
        data = _object(value, where)
        self = object.__new__(cls)
        self.type = _str(data, "type", where)
        self.message = _str(data, "message", where)
        self.args = _list(data, "args", where)
        self.extra = _rest(data, cls.known)
        return self

    def to_json_dict(self) -> dict[str, Any]:
        data = {"type": self.type, "message": self.message, "args": list(self.args)}
        _json(data, self.extra, ())
        return data


class RecordedResponse(_Record):
    fields = (
        "status",
        "headers",
        "body",
        "body_encoding",
        "is_streaming",
        "stream_format",
        "is_exception",
        "exception",
        "ended",
        "timing",
    )
    __slots__ = fields
    known = frozenset(fields)

    def __init__(
        self,
        *,
        status: int | None,
        headers: dict[str, str] | None = None,
        body: Any = None,
        body_encoding: BodyEncoding | str = BodyEncoding.JSON,
        is_streaming: bool = False,
        stream_format: StreamFormat | str | None = None,
        is_exception: bool = False,
        exception: RecordedException | None = None,
        ended: Ended | None = None,
        timing: Timing | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        #: HTTP status; None when the exchange failed before a response arrived.
        self.status = status
        self.headers: dict[str, str] = {} if headers is None else headers
        #: JSON value, text or base64 (see `body_encoding`); for streams the ordered events,
        #: lines or chunks (see `stream_format`).
        self.body = body
        self.body_encoding = _enum(_BODY_ENCODINGS, body_encoding, "body_encoding")
        self.is_streaming = is_streaming
        self.stream_format = (
            None
            if stream_format is None
            else _enum(_STREAM_FORMATS, stream_format, "stream_format")
        )
        self.is_exception = is_exception
        self.exception = exception
        #: How it ended; absent: complete (or an error, when `is_exception`).
        self.ended = ended
        #: Offsets of the head and chunks (only with `record_timing`); absent: not recorded.
        self.timing = timing
        self.extra = {} if extra is None else extra

    @classmethod
    def from_json(cls, value: Any, where: str = "response") -> RecordedResponse:
        data = _object(value, where)
        get = data.get
        status = get("status", _MISSING)
        if status is not None and type(status) is not int:
            raise _wrong(status, _at(where, "status"), "an integer")
        stream_format = get("stream_format")
        exception = get("exception")
        ended = get("ended")
        timing = get("timing")
        self = object.__new__(cls)
        self.status = status
        self.headers = _str_map(data, "headers", where)
        self.body = get("body")
        self.body_encoding = _body_encoding(data, where)
        self.is_streaming = _bool(data, "is_streaming", where)
        self.stream_format = (
            None
            if stream_format is None
            else _enum(_STREAM_FORMATS, stream_format, _at(where, "stream_format"))
        )
        self.is_exception = _bool(data, "is_exception", where)
        self.exception = (
            None
            if exception is None
            else RecordedException.from_json(exception, _at(where, "exception"))
        )
        self.ended = None if ended is None else Ended.from_json(ended, _at(where, "ended"))
        self.timing = None if timing is None else Timing.from_json(timing, _at(where, "timing"))
        self.extra = _rest(data, cls.known)
        return self

    def has_templates(self) -> bool:
        """Whether the body may hold `{{request:…}}` markers (or an escape to undo)."""
        return has_markers(self.body)

    @property
    def end_state(self) -> EndState:
        if self.ended is not None:
            return self.ended.state
        return EndState.ERROR if self.is_exception else EndState.COMPLETE

    def to_json_dict(self) -> dict[str, Any]:
        exception, ended, timing = self.exception, self.ended, self.timing
        data = {
            "status": self.status,
            "headers": dict(self.headers),
            "body": self.body,
            "body_encoding": self.body_encoding.value,
            "is_streaming": self.is_streaming,
            "stream_format": None if self.stream_format is None else self.stream_format.value,
            "is_exception": self.is_exception,
            "exception": None if exception is None else exception.to_json_dict(),
            "ended": None if ended is None else ended.to_json_dict(),
            "timing": None if timing is None else timing.to_json_dict(),
        }
        _json(data, self.extra, ("stream_format", "exception", "ended", "timing"))
        return data


class Recording(_Record):
    fields = (
        "format_version",
        "key_version",
        "test_id",
        "request",
        "response",
        "later_responses",
        "id_normalization_mapping",
    )
    __slots__ = fields
    known = frozenset(fields)

    def __init__(
        self,
        *,
        format_version: int,
        key_version: int,
        test_id: str | None,
        request: RecordedRequest,
        response: RecordedResponse,
        later_responses: list[RecordedResponse] | None = None,
        id_normalization_mapping: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.format_version = format_version
        self.key_version = key_version
        self.test_id = test_id
        self.request = request
        self.response = response
        self.later_responses: list[RecordedResponse] = (
            [] if later_responses is None else later_responses
        )
        #: Stable facts only: which stable id replaced the value of which field.
        self.id_normalization_mapping: dict[str, str] = (
            {} if id_normalization_mapping is None else id_normalization_mapping
        )
        self.extra = {} if extra is None else extra

    @classmethod
    def from_json(cls, value: Any) -> Recording:
        """The recording in `value` (a file's parsed JSON), each field checked; a
        FormatError names the first field that is missing or of the wrong type."""
        data = _object(value, "")
        if "test_id" not in data:
            raise _wrong(_MISSING, "test_id", "a string or null")
        self = object.__new__(cls)
        self.format_version = _int(data, "format_version", "")
        self.key_version = _int(data, "key_version", "")
        self.test_id = _optional_str(data, "test_id", "")
        self.request = RecordedRequest.from_json(data.get("request", _MISSING))
        self.response = RecordedResponse.from_json(data.get("response", _MISSING))
        self.later_responses = [
            RecordedResponse.from_json(item, f"later_responses[{i}]")
            for i, item in enumerate(_list(data, "later_responses", ""))
        ]
        self.id_normalization_mapping = _str_map(data, "id_normalization_mapping", "")
        self.extra = _rest(data, cls.known)
        return self

    @property
    def responses(self) -> list[RecordedResponse]:
        return [self.response, *self.later_responses]

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format_version": self.format_version,
            "key_version": self.key_version,
            "test_id": self.test_id,
            "request": self.request.to_json_dict(),
            "response": self.response.to_json_dict(),
            "later_responses": [r.to_json_dict() for r in self.later_responses] or None,
            "id_normalization_mapping": dict(self.id_normalization_mapping),
        }
        _json(data, self.extra, ("later_responses",))
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


def is_no_response(request: RecordedRequest, response: RecordedResponse) -> bool:
    """Whether `response` is an HTTP call's transport error that got no response at all
    (refused, DNS, TLS, a timeout before the status line): not an answer, so never written
    under `record_failures = "responses"` (docs/design.md, "Only answers are recorded").
    A call-layer target's exception is its answer, never this."""
    return response.status is None and response.is_exception and request.method != CALL_METHOD
