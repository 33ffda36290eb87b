"""How an MCP session is shown (core/mcp_transcript.py: textconv, show) and compared by a drift
run (core/shape.py: frames by direction, method and fields)."""

from __future__ import annotations

from typing import Any

from hashreplay.core.format import (
    Ended,
    EndState,
    Frame,
    FrameDirection,
    FrameType,
    RecordedRequest,
    RecordedResponse,
    new_recording,
)
from hashreplay.core.mcp_transcript import message_line, session_lines
from hashreplay.core.shape import compare, shape_of

S, R = FrameDirection.SENT, FrameDirection.RECEIVED


def frame(direction: FrameDirection, data: Any, after: int | None = None) -> Frame:
    return Frame(direction=direction, type=FrameType.TEXT, data=data, after_sent=after)


CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "search", "arguments": {"q": "cats"}, "_meta": {"progressToken": 2}},
}
ANSWER = {
    "jsonrpc": "2.0",
    "id": 2,
    "result": {"content": [{"type": "text", "text": "x"}], "structuredContent": {"hits": ["a"]}},
}


def session(*frames: Frame, ended: Ended | None = None) -> RecordedResponse:
    return RecordedResponse(status=101, frames=list(frames), ended=ended)


def test_messages_as_calls() -> None:
    assert message_line(CALL) == 'tools/call search {"q":"cats"}'
    assert message_line(ANSWER) == 'result {"hits":["a"]}'
    text_only = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [{"type": "text", "text": "hello"}]},
    }
    assert message_line(text_only) == "result hello"
    failed = {"jsonrpc": "2.0", "id": 4, "error": {"code": -32099, "message": "nope"}}
    assert message_line(failed) == "error -32099: nope"
    assert message_line({"jsonrpc": "2.0", "method": "notifications/initialized"}) == (
        "notifications/initialized"
    )
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    assert message_line(progress) == 'notifications/progress {"progress":1}'


def test_a_recording_as_a_conversation() -> None:
    request = RecordedRequest(
        method="MCP",
        url="mcp+stdio:python",
        endpoint="python",
        body={"command": "python", "args": ["server.py"]},
    )
    cut = session(frame(S, CALL), ended=Ended(state=EndState.ERROR, after_chunks=1))
    recording = new_recording(
        test_id="t.py::test_x",
        request=request,
        responses=[session(frame(S, CALL), frame(R, ANSWER, 1)), cut],
    )
    lines = session_lines(recording)
    assert lines[:2] == ["MCP python server.py", "test: t.py::test_x"]
    assert lines[2:7] == [
        "",
        "session 1/2:",
        '→ tools/call search {"q":"cats"}',
        '← result {"hits":["a"]}',
        "end: closed by the client",
    ]
    assert lines[-1] == "end: the server's output ended (it exited) after 1 messages"


def test_frames_shape_names_answers_by_their_request() -> None:
    recorded = session(frame(S, CALL), frame(R, ANSWER, 1))
    same = session(frame(S, {**CALL, "id": 9}), frame(R, {**ANSWER, "id": 9}, 1))
    assert compare(shape_of(recorded), shape_of(same)) == []
    more = dict(
        ANSWER, result={**ANSWER["result"], "structuredContent": {"hits": ["a"], "score": 1}}
    )
    changed = session(frame(S, CALL), frame(R, more, 1))
    assert compare(shape_of(recorded), shape_of(changed)) == [
        "frame received result of tools/call search: field added structuredContent.score (number)"
    ]
    assert shape_of(recorded).events == (
        "sent tools/call search",
        "received result of tools/call search",
    )
