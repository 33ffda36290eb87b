"""The conversation view of a recording (`core/transcript.py`)."""

from __future__ import annotations

from typing import Any

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.format import (
    Ended,
    EndState,
    RecordedException,
    RecordedRequest,
    RecordedResponse,
    new_recording,
)
from hashreplay.core.store import dumps
from hashreplay.core.transcript import CORRUPT_MARK, textconv, transcript


def _recording(body: Any, *responses: RecordedResponse, endpoint: str = "/v1/chat/completions"):
    request = RecordedRequest(
        method="POST", url="http://localhost" + endpoint, endpoint=endpoint, body=body
    )
    return new_recording(
        test_id="tests/test_x.py::test_y", request=request, responses=list(responses)
    )


def test_a_multi_line_message_stays_under_its_speaker() -> None:
    body = {
        "model": "m",
        "temperature": 0.2,
        "messages": [{"role": "user", "content": "one\ntwo\n\nfour"}],
    }
    text = transcript(_recording(body, RecordedResponse(status=200, body={"choices": []})))
    lines = text.splitlines()
    assert lines[:4] == [
        "POST /v1/chat/completions",
        "test: tests/test_x.py::test_y",
        "temperature: 0.2",
        "",
    ]
    assert lines[4:8] == ["user: one", "  two", "", "  four"]
    assert text.endswith("end: complete\n")


def test_failures_say_how_the_response_ended() -> None:
    broken = RecordedResponse(
        status=200,
        body=[{"data": "{}"}, {"data": "{}"}],
        is_streaming=True,
        stream_format="sse",
        is_exception=True,
        exception=RecordedException(type="httpx.ReadError", message="peer closed"),
    )
    never = RecordedResponse(
        status=None,
        is_exception=True,
        exception=RecordedException(type="httpx.ConnectError", message="refused"),
    )
    text = transcript(_recording({"messages": []}, broken, never))
    assert "response 1/2: 200 (stream: sse, 2 events)" in text
    assert "end: error after 2 chunks (httpx.ReadError: peer closed)" in text
    assert "response 2/2: -" in text
    assert "end: failed before a response (httpx.ConnectError: refused)" in text


def test_a_stream_the_client_stopped_reading_says_so() -> None:
    # `git diff` of a recording must not show an abandoned stream as a complete answer
    abandoned = RecordedResponse(
        status=200,
        body=[{"data": "{}"}],
        is_streaming=True,
        stream_format="sse",
        ended=Ended(state=EndState.ABANDONED, after_chunks=1),
    )
    text = transcript(_recording({"messages": []}, abandoned))
    assert text.endswith("end: abandoned by the client after 1 chunks\n")
    assert "end: complete" not in text


def test_embeddings_and_model_lists_are_short_but_changes_still_show() -> None:
    vector = [0.1 * i for i in range(1536)]
    answer = RecordedResponse(status=200, body={"data": [{"embedding": vector, "index": 0}]})
    text = transcript(
        _recording({"model": "e", "input": "cats"}, answer, endpoint="/v1/embeddings")
    )
    assert "input: cats" in text
    assert "<1536 numbers, xxh3 " in text
    changed = transcript(
        _recording(
            {"model": "e", "input": "cats"},
            RecordedResponse(
                status=200, body={"data": [{"embedding": [*vector[:-1], 9.0], "index": 0}]}
            ),
            endpoint="/v1/embeddings",
        )
    )
    assert changed != text

    models = RecordedResponse(
        status=200, body={"object": "list", "data": [{"id": "b"}, {"id": "a"}]}
    )
    listing = transcript(_recording(None, models, endpoint="/v1/models"))
    assert "models: a, b" in listing


def test_binary_and_text_bodies() -> None:
    request = RecordedRequest(
        method="POST", url="u", endpoint="/upload", body="AAAA", body_encoding=BodyEncoding.BASE64
    )
    recording = new_recording(
        test_id=None,
        request=request,
        responses=[RecordedResponse(status=201, body="created", body_encoding=BodyEncoding.TEXT)],
    )
    text = transcript(recording)
    assert "body: (binary, 3 bytes, xxh3 " in text
    assert "body: created" in text
    assert "test: (none: shared, or made outside a test)" in text


def test_textconv_keeps_what_is_not_a_recording_byte_for_byte() -> None:
    for content in (b"", b"\xff\xfe binary", b"[1, 2]", b'{"name": "x"}'):
        assert textconv(content) == content
    recording = _recording({"prompt": "hi"}, RecordedResponse(status=200, body={"response": "yo"}))
    good = dumps(recording.model_dump(mode="json"))
    assert textconv(good).decode().splitlines()[-3:] == [
        "response: 200",
        "assistant: yo",
        "end: complete",
    ]
    broken = good.replace(b'"status": 200', b'"status": "two hundred"')
    out = textconv(broken)
    assert out.startswith(CORRUPT_MARK.encode())
    assert out.endswith(broken)


def test_an_mcp_session_reads_as_calls_and_answers() -> None:
    """A JSON-RPC request reads `→ method name {arguments}` (`_meta` left out), and each
    message of the answer `← …`: notifications, a tool's text, a failed tool, a tool list,
    a JSON-RPC error."""
    call = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": "crawl", "arguments": {"pages": 3}, "_meta": {"progressToken": 4}},
    }
    events = [
        {"event": "message", "data": {"jsonrpc": "2.0", "method": "notifications/progress",
                                      "params": {"progress": 1, "total": 3}}},
        {"event": "message", "data": {"jsonrpc": "2.0", "id": 4, "result": {
            "content": [{"type": "text", "text": "crawled 3 pages"}], "isError": False}}},
    ]  # fmt: skip
    streamed = RecordedResponse(status=200, body=events, is_streaming=True, stream_format="sse")
    failed = RecordedResponse(
        status=200,
        body={"jsonrpc": "2.0", "id": 4, "result": {"content": [{"type": "text", "text": "no"}],
                                                    "isError": True}},
    )  # fmt: skip
    listed = RecordedResponse(
        status=200, body={"jsonrpc": "2.0", "id": 4, "result": {"tools": [{"name": "search"}]}}
    )
    refused = RecordedResponse(
        status=200,
        body={"jsonrpc": "2.0", "id": 4, "error": {"code": -32602, "message": "bad pages"}},
    )
    text = transcript(_recording(call, streamed, failed, listed, refused, endpoint="/mcp"))
    lines = text.splitlines()
    assert '→ tools/call crawl {"pages":3}' in lines
    assert "progressToken" not in text and "jsonrpc" not in text
    assert '← notifications/progress {"progress":1,"total":3}' in lines
    assert "← result: crawled 3 pages" in lines
    assert "← tool error: no" in lines
    assert "← result: tools search" in lines
    assert "← error -32602: bad pages" in lines
    plain = transcript(
        _recording({"jsonrpc": "2.0", "method": "tools/list"}, listed, endpoint="/mcp")
    )
    assert "→ tools/list" in plain.splitlines()
