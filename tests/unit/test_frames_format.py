"""A WebSocket connection in the recording format (docs/design.md §17, docs/recordings.md
"WebSocket connections"): a malformed frame list is an error naming the field and frame;
`check_bodies` finds frame data that cannot be replayed; the stored form of payloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.errors import ConfigError, RecordingError
from hashreplay.core.format import (
    FormatError,
    Frame,
    FrameDirection,
    FrameType,
    check_bodies,
    recording_from_json,
)
from hashreplay.core.frames import (
    comparable,
    frame_difference,
    frame_paths,
    payload_of,
    stored_data,
)
from hashreplay.core.matching import MatchRule


def connection(*frames: dict[str, Any], status: int = 101) -> dict[str, Any]:
    return {
        "format_version": 1,
        "key_version": 1,
        "test_id": "t.py::test_x",
        "request": {"method": "GET", "url": "wss://h/v1/realtime", "endpoint": "/v1/realtime"},
        "response": {"status": status, "frames": list(frames)},
    }


def good() -> list[dict[str, Any]]:
    return [
        {"direction": "received", "type": "text", "data": {"type": "hello"}, "after_sent": 0},
        {"direction": "sent", "type": "binary", "data": "AAE=", "data_encoding": "base64"},
        {"direction": "received", "type": "close", "code": 1000, "reason": "", "after_sent": 1},
    ]


def test_a_good_connection_reads_and_checks() -> None:
    recording = recording_from_json(connection(*good()))
    assert recording.response.frames is not None
    assert [f.type for f in recording.response.frames] == list(FrameType)
    check_bodies(recording, Path("r.json"))
    dumped = recording.model_dump(mode="json")["response"]["frames"]
    assert dumped == good()  # unset fields stay out of the file


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (
            {"direction": "sent", "type": "video"},
            "response.frames[3].type: expected one of 'text', 'binary', 'close', found 'video'",
        ),
        (
            {"direction": "up", "type": "text"},
            "response.frames[3].direction: expected one of 'sent', 'received', found 'up'",
        ),
        ({"type": "text"}, "response.frames[3].direction: field required"),
        (
            {"direction": "sent", "type": "text", "after_sent": "2"},
            "response.frames[3].after_sent: expected an integer",
        ),
    ],
)
def test_a_malformed_frame_names_its_field(frame: dict[str, Any], message: str) -> None:
    with pytest.raises(FormatError) as raised:
        recording_from_json(connection(*good(), frame))
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (
            {"direction": "received", "type": "binary", "data": "@@@", "data_encoding": "base64"},
            "response.frames[3].data: invalid base64 data",
        ),
        (
            {"direction": "received", "type": "binary", "data": {"a": 1}},
            "response.frames[3].data_encoding: a binary frame's data must be base64",
        ),
        (
            {"direction": "received", "type": "text", "data": 5, "data_encoding": "text"},
            "response.frames[3].data: a text frame's data must be a string",
        ),
        (
            {"direction": "received", "type": "close", "code": 99},
            "response.frames[3].code: a close code is 1000 to 4999",
        ),
        (
            {"direction": "received", "type": "text", "data": "x", "data_encoding": "multipart"},
            "response.frames[3].data_encoding",
        ),
        (
            {"direction": "sent", "type": "text", "data": {}, "after_sent": 1},
            "response.frames[3].after_sent: only a received frame",
        ),
    ],
)
def test_check_bodies_names_the_file_and_frame_it_cannot_replay(
    frame: dict[str, Any], message: str
) -> None:
    recording = recording_from_json(connection(*good(), frame))
    with pytest.raises(RecordingError) as raised:
        check_bodies(recording, Path("tests/recordings/conn.json"))
    assert "tests/recordings/conn.json" in str(raised.value)
    assert message in str(raised.value)
    assert "re-record it" in str(raised.value)


def test_frames_on_a_status_that_is_not_101_are_refused() -> None:
    recording = recording_from_json(connection(*good(), status=200))
    with pytest.raises(
        RecordingError, match=r"response\.frames: only a handshake answered with 101"
    ):
        check_bodies(recording, Path("r.json"))


def test_payloads_keep_their_stored_form() -> None:
    assert stored_data(FrameType.TEXT, '{"a": 1}') == ({"a": 1}, None)
    assert stored_data(FrameType.TEXT, "[1, 2]") == ([1, 2], None)
    assert stored_data(FrameType.TEXT, '"a string"') == ('"a string"', BodyEncoding.TEXT)
    assert stored_data(FrameType.TEXT, "{broken") == ("{broken", BodyEncoding.TEXT)
    assert stored_data(FrameType.BINARY, b"\x00\xff") == ("AP8=", BodyEncoding.BASE64)
    assert stored_data(FrameType.CLOSE, None) == (None, None)
    for kind, payload in [(FrameType.TEXT, "plain"), (FrameType.BINARY, b"\x00\xff")]:
        data, encoding = stored_data(kind, payload)
        frame = Frame(
            direction=FrameDirection.RECEIVED, type=kind, data=data, data_encoding=encoding
        )
        assert payload_of(frame) == payload
    json_frame = Frame(direction=FrameDirection.RECEIVED, type=FrameType.TEXT, data={"a": [1]})
    assert payload_of(json_frame) == '{"a":[1]}'


def sent(data: Any) -> Frame:
    return Frame(direction=FrameDirection.SENT, type=FrameType.TEXT, data=data)


def test_the_first_difference_of_a_sent_frame_is_named_by_frame_and_field() -> None:
    recorded = sent({"type": "session.update", "session": {"instructions": "a", "voice": "x"}})
    now = sent({"type": "session.update", "session": {"instructions": "b", "voice": "x"}})
    diff = frame_difference(recorded, now, 3)
    assert diff is not None and diff.path == "frames[3].session.instructions"
    assert frame_difference(recorded, recorded, 3) is None
    binary = Frame(
        direction=FrameDirection.SENT,
        type=FrameType.BINARY,
        data="AA==",
        data_encoding=BodyEncoding.BASE64,
    )
    kind = frame_difference(recorded, binary, 3)
    assert kind is not None and kind.path == "frames[3].type"


def test_ignore_paths_over_frames() -> None:
    paths = frame_paths(["frames[3].session.instructions", "frames[*].event_id", "body.model"])
    assert len(paths) == 2
    data = {"session": {"instructions": "a", "voice": "v"}, "event_id": "e1"}
    assert comparable(data, 3, paths) == {"session": {"voice": "v"}}
    assert comparable(data, 2, paths) == {"session": {"instructions": "a", "voice": "v"}}
    recorded = sent({"session": {"instructions": "a"}})
    assert frame_difference(recorded, sent({"session": {"instructions": "b"}}), 3, paths) is None
    assert (
        frame_difference(recorded, sent({"session": {"instructions": "b"}}), 4, paths) is not None
    )


def test_a_frames_ignore_path_must_name_a_frame() -> None:
    assert MatchRule.parse(["frames[2].x"]).ignore == ("frames[2].x",)
    with pytest.raises(ConfigError, match="must name a frame first"):
        MatchRule.parse(["frames.session"])
