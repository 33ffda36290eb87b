"""`hashreplay.core.format`: the file format's pydantic models, checked field by field (§4).

Every shape a file can take wrongly is named by its dotted path, the way a reader of the
file finds it; unknown fields survive a read and a write at every level.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.errors import RecordingError
from hashreplay.core.format import (
    Ended,
    EndState,
    FormatError,
    RecordedException,
    RecordedRequest,
    RecordedResponse,
    Recording,
    Timing,
    new_recording,
    recording_from_json,
)
from hashreplay.core.store import dumps, parse_recording
from hashreplay.core.streams import StreamFormat


def full_recording() -> Recording:
    """Every field of the format set, twice over (two responses)."""
    request = RecordedRequest(
        method="POST",
        url="http://127.0.0.1:9/v1/chat/completions",
        endpoint="/v1/chat/completions",
        headers={"content-type": "application/json"},
        body={"model": "m", "stream": True},
        model="m",
        conversation="support",
    )
    stream = RecordedResponse(
        status=200,
        headers={"content-type": "text/event-stream"},
        body=[{"data": {"x": 1}}, {"data": "[DONE]"}],
        is_streaming=True,
        stream_format=StreamFormat.SSE,
        ended=Ended(state=EndState.ABANDONED, after_chunks=1),
        timing=Timing(head_us=120, chunks_us=[130, 150]),
    )
    failure = RecordedResponse(
        status=None,
        is_exception=True,
        exception=RecordedException(type="httpx.ReadTimeout", message="timed out", args=["t"]),
    )
    return new_recording(
        test_id="tests/test_x.py::test_y",
        request=request,
        responses=[stream, failure],
        id_mapping={"chatcmpl-1": "response.body.id"},
    )


def full_data() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(dumps(full_recording().model_dump(mode="json")))
    return data


def test_every_field_survives_json_and_back() -> None:
    recording = full_recording()
    back = recording_from_json(orjson.loads(dumps(recording.model_dump(mode="json"))))
    assert back == recording
    assert back.response.ended == Ended(state=EndState.ABANDONED, after_chunks=1)
    assert back.response.end_state is EndState.ABANDONED
    assert back.later_responses[0].end_state is EndState.ERROR
    assert back.response.stream_format is StreamFormat.SSE
    assert back.request.body_encoding is BodyEncoding.JSON


def test_optional_fields_are_absent_when_unset() -> None:
    data = full_data()
    later = data["later_responses"][0]
    assert not {"stream_format", "ended", "timing"} & set(later)
    plain = new_recording(
        test_id=None,
        request=RecordedRequest(method="GET", url="http://h/v1/models", endpoint="/v1/models"),
        responses=[RecordedResponse(status=200)],
    )
    written = orjson.loads(dumps(plain.model_dump(mode="json")))
    assert "later_responses" not in written
    assert "conversation" not in written["request"]
    assert written["request"]["model"] is None  # always written, as before


@pytest.mark.parametrize(
    "where",
    [
        (),
        ("request",),
        ("response",),
        ("response", "ended"),
        ("response", "timing"),
        ("later_responses", 0),
        ("later_responses", 0, "exception"),
    ],
)
def test_unknown_fields_are_kept_at_every_level(where: tuple[str | int, ...]) -> None:
    data = full_data()
    node: Any = data
    for step in where:
        node = node[step]
    node["added_by_hand"] = {"note": [1, 2]}
    back = recording_from_json(orjson.loads(dumps(data)))
    assert orjson.loads(dumps(back.model_dump(mode="json"))) == data


def _set(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node: Any = data
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value

    return change


def _drop(*path: str | int) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node: Any = data
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_drop("key_version"), "key_version: field required"),
        (_drop("test_id"), "test_id: field required"),
        (_set("test_id", value=3), "test_id: expected a string, found an integer"),
        (_set("request", value=[]), "request: expected an object, found an array"),
        (_drop("request", "url"), "request.url: field required"),
        (_set("request", "method", value=None), "request.method: expected a string, found null"),
        (
            _set("request", "headers", "x-count", value=3),
            "request.headers.x-count: expected a string, found an integer",
        ),
        (
            _set("request", "body_encoding", value="yaml"),
            "request.body_encoding: expected one of 'json', 'text', 'base64', 'form', "
            "'multipart', 'empty', found 'yaml'",
        ),
        (_drop("response", "status"), "response.status: field required"),
        (
            _set("response", "status", value="200"),
            "response.status: expected an integer, found '200'",
        ),
        (_set("response", "status", value=True), "response.status: expected an integer"),
        (
            _set("response", "is_streaming", value="yes"),
            "response.is_streaming: expected true or false, found 'yes'",
        ),
        (
            _set("response", "stream_format", value="websocket"),
            "response.stream_format: expected one of 'sse', 'ndjson', 'chunks', 'values'",
        ),
        (
            _set("response", "ended", "state", value="done"),
            "response.ended.state: expected one of 'complete', 'error', 'abandoned', found 'done'",
        ),
        (
            _set("response", "ended", "after_chunks", value=1.5),
            "response.ended.after_chunks: expected an integer, found a number",
        ),
        (_drop("response", "timing", "head_us"), "response.timing.head_us: field required"),
        (
            _set("response", "timing", "chunks_us", 1, value="150"),
            r"response.timing.chunks_us\[1\]: expected an integer, found '150'",
        ),
        (
            _set("later_responses", value={}),
            "later_responses: expected an array, found an object",
        ),
        (_drop("later_responses", 0, "status"), r"later_responses\[0\].status: field required"),
        (
            _drop("later_responses", 0, "exception", "message"),
            r"later_responses\[0\].exception.message: field required",
        ),
        (
            _set("later_responses", 0, "exception", "args", value="t"),
            r"later_responses\[0\].exception.args: expected an array, found 't'",
        ),
        (
            _set("id_normalization_mapping", "chatcmpl-1", value=None),
            "id_normalization_mapping.chatcmpl-1: expected a string, found null",
        ),
    ],
)
def test_a_wrong_field_is_named_by_its_path(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    data = full_data()
    change(data)
    with pytest.raises(FormatError, match=f"^{message}"):
        recording_from_json(data)
    path = tmp_path / "tests" / "recordings" / "0123.json"
    with pytest.raises(RecordingError, match=f"invalid recording: {message}") as info:
        parse_recording(dumps(data), path)
    assert info.value.path == path


def test_a_very_long_wrong_value_is_described_not_quoted() -> None:
    data = full_data()
    data["response"]["status"] = "x" * 500
    with pytest.raises(FormatError) as info:
        recording_from_json(data)
    assert str(info.value) == "response.status: expected an integer, found a string"
    assert info.value.where == "response.status"


def test_replace_copies_shallowly_and_refuses_unknown_fields() -> None:
    response = full_recording().response
    changed = response.replace(body=["x"], status=201)
    assert (changed.body, changed.status) == (["x"], 201)
    assert (response.body, response.status) != (["x"], 201)
    assert changed.timing is response.timing
    with pytest.raises(TypeError, match="RecordedResponse has no field colour"):
        response.replace(colour="red")


def test_equality_and_repr_go_by_field() -> None:
    first, second = full_recording(), full_recording()
    assert first == second
    assert first.response != first.later_responses[0]
    assert first.request != first.request.replace(url="http://other/")
    assert first.response != {"status": 200}
    shown = repr(first.later_responses[0].exception)
    assert shown == "RecordedException(type='httpx.ReadTimeout', message='timed out', args=['t'])"
    with pytest.raises(TypeError):
        hash(first)


def test_enum_fields_take_their_values() -> None:
    response = RecordedResponse(status=200, body_encoding="text", stream_format="ndjson")
    assert response.body_encoding is BodyEncoding.TEXT
    assert response.stream_format is StreamFormat.NDJSON
    with pytest.raises(ValidationError, match=r"body_encoding\n  Input should be 'json'"):
        RecordedResponse(status=200, body_encoding="nope")
