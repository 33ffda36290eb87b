"""`hashreplay.core.streams`: SSE events, NDJSON lines and raw chunks as ordered records."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.redact import Redactor
from hashreplay.core.secret_values import SecretValues
from hashreplay.core.split_secrets import redact_across
from hashreplay.core.streams import (
    StreamFormat,
    data_values,
    decode_chunk,
    encode_chunk,
    opens_server_push,
    parse_ndjson,
    parse_sse,
    parse_stream,
    render_ndjson_line,
    render_sse_event,
    render_stream,
    stream_finished,
    stream_format_for,
    with_data_values,
)

OPENAI_STREAM = (
    b'data: {"id":"chatcmpl-1","choices":[{"delta":{"content":"He"}}]}\n\n'
    b'data: {"id":"chatcmpl-1","choices":[{"delta":{"content":"llo"}}]}\n\n'
    b"data: [DONE]\n\n"
)

RICH_STREAM = (
    b": keep-alive\n\n"
    b"event: message_start\n"
    b"id: 42\n"
    b"retry: 3000\n"
    b'data: {"type":"message_start"}\n\n'
    b"event: note\n"
    b"data: line one\n"
    b"data: line two\n\n"
    b": comment one\n"
    b":comment two\n"
    b"data: text\n\n"
    b"event: ping\n\n"
    b"data: [DONE]\n\n"
)


def render_all(events: list[dict[str, Any]]) -> bytes:
    return b"".join(render_sse_event(e) for e in events)


# --- SSE -----------------------------------------------------------------------------------


def test_parse_openai_stream() -> None:
    assert parse_sse(OPENAI_STREAM) == [
        {"data": {"id": "chatcmpl-1", "choices": [{"delta": {"content": "He"}}]}},
        {"data": {"id": "chatcmpl-1", "choices": [{"delta": {"content": "llo"}}]}},
        {"data": "[DONE]"},
    ]


def test_parse_keeps_event_id_retry_comments_multiline_data() -> None:
    assert parse_sse(RICH_STREAM) == [
        {"comments": [" keep-alive"]},
        {"event": "message_start", "id": "42", "retry": "3000", "data": {"type": "message_start"}},
        {"event": "note", "data": "line one\nline two"},
        {"comments": [" comment one", "comment two"], "data": "text"},
        {"event": "ping"},
        {"data": "[DONE]"},
    ]


@pytest.mark.parametrize("stream", [OPENAI_STREAM, RICH_STREAM], ids=["openai", "rich"])
def test_sse_round_trip(stream: bytes) -> None:
    events = parse_sse(stream)
    rendered = render_all(events)
    assert parse_sse(rendered) == events
    assert render_all(parse_sse(rendered)) == rendered


def test_sse_render_is_byte_exact_for_canonical_input() -> None:
    assert render_all(parse_sse(OPENAI_STREAM)) == OPENAI_STREAM
    assert render_all(parse_sse(RICH_STREAM)) == RICH_STREAM


def test_sse_one_chunk_per_event() -> None:
    chunks = render_stream(StreamFormat.SSE, parse_sse(OPENAI_STREAM))
    assert len(chunks) == 3
    assert all(c.endswith(b"\n\n") for c in chunks)
    assert chunks[-1] == b"data: [DONE]\n\n"


def test_sse_crlf_line_endings() -> None:
    crlf = OPENAI_STREAM.replace(b"\n", b"\r\n")
    assert parse_sse(crlf) == parse_sse(OPENAI_STREAM)


def test_sse_unknown_fields_kept() -> None:
    events = parse_sse(b"data: x\nfoo: bar\n\n")
    assert events == [{"fields": [["foo", "bar"]], "data": "x"}]
    assert parse_sse(render_all(events)) == events


def test_sse_json_looking_invalid_data_kept_as_text() -> None:
    assert parse_sse(b"data: {not json\n\n") == [{"data": "{not json"}]
    assert parse_sse(b'data: "quoted"\n\n') == [{"data": '"quoted"'}]
    assert parse_sse(b"data: 42\n\n") == [{"data": "42"}]


@pytest.mark.parametrize(
    "tail",
    [b'data: {"id":"chatcmpl-1","choi', b'data: {"id":"chatcmpl-1"}\n', b"event: x\ndata: y"],
    ids=["cut-mid-line", "cut-after-line", "cut-mid-event"],
)
def test_trailing_partial_event_flagged(tail: bytes) -> None:
    events = parse_sse(OPENAI_STREAM[:-15] + b"\n\n" + tail)
    assert events[-1]["partial"] is True
    assert all("partial" not in e for e in events[:-1])
    # Replaying reproduces a stream that is still broken at the end.
    rendered = render_all(events)
    assert not rendered.endswith(b"\n\n")
    assert parse_sse(rendered) == events


def test_complete_stream_not_partial() -> None:
    assert all("partial" not in e for e in parse_sse(RICH_STREAM))


def test_sse_data_values_and_back() -> None:
    events = parse_sse(RICH_STREAM)
    values = data_values(StreamFormat.SSE, events)
    assert values == [None, {"type": "message_start"}, "line one\nline two", "text", None, "[DONE]"]
    replaced = with_data_values(StreamFormat.SSE, events, ["A", "B", "C", "D", "E", "F"])
    assert [e.get("data") for e in replaced] == [None, "B", "C", "D", None, "F"]
    assert replaced[1]["event"] == "message_start"
    assert events[1]["data"] == {"type": "message_start"}  # not mutated


sse_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
    max_size=20,
)
sse_events = st.fixed_dictionaries(
    {},
    optional={
        "event": sse_text.filter(lambda s: s == s.strip() and s),
        "id": sse_text.filter(lambda s: s == s.strip() and s),
        "data": st.lists(sse_text, min_size=1, max_size=3).map("\n".join)
        | st.dictionaries(st.text(max_size=5), st.integers(0, 10), max_size=3),
        "comments": st.lists(sse_text, min_size=1, max_size=2),
    },
).filter(bool)


@settings(max_examples=150, deadline=None)
@given(st.lists(sse_events, min_size=1, max_size=5))
def test_sse_round_trip_property(events: list[dict[str, Any]]) -> None:
    parsed = parse_sse(render_all(events))
    assert len(parsed) == len(events)
    for got, want in zip(parsed, events, strict=True):
        assert got.get("event") == want.get("event")
        assert got.get("id") == want.get("id")
        assert got.get("comments") == want.get("comments")
        if isinstance(want.get("data"), dict):
            assert got["data"] == want["data"]
        elif "data" in want:
            assert got["data"] in (want["data"], _json_or_none(want["data"]))


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


# --- NDJSON --------------------------------------------------------------------------------

OLLAMA_STREAM = (
    b'{"model":"llama3.2","message":{"content":"He"},"done":false}\n'
    b'{"model":"llama3.2","message":{"content":"llo"},"done":false}\n'
    b'{"model":"llama3.2","done":true,"total_duration":5}\n'
)


def test_parse_ndjson_lines() -> None:
    assert parse_ndjson(OLLAMA_STREAM) == [
        {"model": "llama3.2", "message": {"content": "He"}, "done": False},
        {"model": "llama3.2", "message": {"content": "llo"}, "done": False},
        {"model": "llama3.2", "done": True, "total_duration": 5},
    ]


def test_ndjson_round_trip_byte_exact() -> None:
    chunks = render_stream(StreamFormat.NDJSON, parse_ndjson(OLLAMA_STREAM))
    assert len(chunks) == 3
    assert b"".join(chunks) == OLLAMA_STREAM


def test_ndjson_blank_lines_skipped_and_text_kept() -> None:
    assert parse_ndjson(b'{"a":1}\n\n  \nnot json\n[1,2]\n') == [{"a": 1}, "not json", [1, 2]]
    assert render_ndjson_line("not json") == b"not json\n"


def test_ndjson_line_separator_inside_json_string() -> None:
    # U+2028 and U+0085 may appear unescaped inside JSON strings; only "\n" ends a line.
    stream = '{"content":"a\u2028b"}\n{"content":"c\u0085d"}\n'.encode()
    assert parse_ndjson(stream) == [{"content": "a\u2028b"}, {"content": "c\u0085d"}]
    assert b"".join(render_stream(StreamFormat.NDJSON, parse_ndjson(stream))) == stream


def test_ndjson_json_string_line_round_trips() -> None:
    stream = b'"hello"\n{"a":1}\n'
    rendered = b"".join(render_stream(StreamFormat.NDJSON, parse_ndjson(stream)))
    assert [json.loads(line) for line in rendered.splitlines()] == ["hello", {"a": 1}]


def test_ndjson_data_values_and_back() -> None:
    items = parse_ndjson(OLLAMA_STREAM)
    assert data_values(StreamFormat.NDJSON, items) == items
    assert with_data_values(StreamFormat.NDJSON, items, [1, 2, 3]) == [1, 2, 3]


# --- raw chunks ----------------------------------------------------------------------------


def test_raw_chunks_utf8_and_binary() -> None:
    chunks = [b"hello ", "wörld".encode(), b"\xff\xfe\x00binary", b"", "é".encode()[:1]]
    stored = parse_stream(StreamFormat.CHUNKS, chunks)
    assert stored[0] == "hello "
    assert stored[1] == "wörld"
    assert stored[2] == {"base64": "//4AYmluYXJ5"}
    assert isinstance(stored[3], dict)  # half of a multi-byte character
    assert render_stream(StreamFormat.CHUNKS, stored) == [c for c in chunks if c]
    assert data_values(StreamFormat.CHUNKS, stored) == []


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64))
def test_chunk_round_trip_property(chunk: bytes) -> None:
    assert decode_chunk(encode_chunk(chunk)) == chunk


def test_parse_stream_dispatch() -> None:
    assert parse_stream(StreamFormat.SSE, [OPENAI_STREAM[:10], OPENAI_STREAM[10:]]) == parse_sse(
        OPENAI_STREAM
    )
    assert parse_stream(StreamFormat.NDJSON, [OLLAMA_STREAM[:7], OLLAMA_STREAM[7:]]) == (
        parse_ndjson(OLLAMA_STREAM)
    )


# --- format by content type ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "chunked", "expected"),
    [
        ("text/event-stream", False, StreamFormat.SSE),
        ("text/event-stream; charset=utf-8", True, StreamFormat.SSE),
        ("Text/Event-Stream", False, StreamFormat.SSE),
        ("application/x-ndjson", False, StreamFormat.NDJSON),
        ("application/x-ndjson; charset=utf-8", True, StreamFormat.NDJSON),
        ("application/ndjson", False, StreamFormat.NDJSON),
        ("application/jsonl", False, StreamFormat.NDJSON),
        ("text/plain", True, StreamFormat.CHUNKS),
        ("audio/mpeg", True, StreamFormat.CHUNKS),
        ("text/plain", False, None),
        ("application/json", True, None),
        ("application/json; charset=utf-8", True, None),
        ("application/problem+json", True, None),
        (None, True, None),
        (None, False, None),
        ("", True, None),
    ],
)
def test_stream_format_for(
    content_type: str | None, chunked: bool, expected: StreamFormat | None
) -> None:
    assert stream_format_for(content_type, chunked=chunked) is expected


def test_binary_event_streams_are_raw_chunks_however_they_arrived() -> None:
    media = "application/vnd.amazon.eventstream"
    assert stream_format_for(media, chunked=False) is StreamFormat.CHUNKS
    assert stream_format_for(media, chunked=True) is StreamFormat.CHUNKS
    frame = b"\x00\x00\x00\x10\x00\x00\x00\x00\xff\xfe\x80\x81\x01\x02\x03\x04"
    assert render_stream(StreamFormat.CHUNKS, parse_stream(StreamFormat.CHUNKS, [frame])) == [frame]


# --- secrets split between pieces --------------------------------------------------------------


KEY = "sk-proj-" + "Ab1" * 8


def _deltas(*texts: str) -> list[Any]:
    return [{"data": {"choices": [{"delta": {"content": t}}]}} for t in texts]


def _texts(events: list[Any]) -> list[str]:
    return [e["data"]["choices"][0]["delta"]["content"] for e in events]


@pytest.mark.parametrize("cut", [1, 5, 10, 20, len(KEY) - 1])
def test_a_shaped_key_split_between_sse_events_is_cut_from_each(cut: int) -> None:
    events = _deltas("key: " + KEY[:cut], KEY[cut:] + " ok", "more")
    out = redact_across(StreamFormat.SSE, events, Redactor().spans, SECRET_PLACEHOLDER)
    assert _texts(out) == ["key: " + SECRET_PLACEHOLDER, " ok", "more"]
    assert _texts(events)[0] == "key: " + KEY[:cut]  # the input is not modified


def test_a_value_split_over_three_raw_chunks_leaves_empty_pieces_in_place() -> None:
    secrets = SecretValues(["acme-7f3k9q2w8e4r"])
    chunks = ["a acme-7f", "3k9q", "2w8e4r b", {"base64": "AA=="}, "c"]
    out = redact_across(StreamFormat.CHUNKS, chunks, secrets.spans, SECRET_PLACEHOLDER)
    assert out == ["a " + SECRET_PLACEHOLDER, "", " b", {"base64": "AA=="}, "c"]


def test_binary_chunks_end_a_run_and_other_fields_are_separate_runs() -> None:
    secrets = SecretValues(["acme-7f3k9q2w8e4r"])
    chunks = ["acme-7f3k", {"base64": "AA=="}, "9q2w8e4r"]
    assert redact_across(StreamFormat.CHUNKS, chunks, secrets.spans, SECRET_PLACEHOLDER) == chunks
    events = [{"data": {"a": "acme-7f3k", "b": "x"}}, {"data": {"a": "y", "b": "9q2w8e4r"}}]
    out = redact_across(StreamFormat.SSE, events, secrets.spans, SECRET_PLACEHOLDER)
    assert out == events  # `a` then `b` is not one text


def test_ndjson_lines_and_whole_secrets_inside_one_piece() -> None:
    lines = [{"message": {"content": "x " + KEY[:9]}}, {"message": {"content": KEY[9:]}}]
    out = redact_across(StreamFormat.NDJSON, lines, Redactor().spans, SECRET_PLACEHOLDER)
    assert [line["message"]["content"] for line in out] == ["x " + SECRET_PLACEHOLDER, ""]
    single = _deltas("nothing here", "at all")
    assert redact_across(StreamFormat.SSE, single, Redactor().spans, SECRET_PLACEHOLDER) is single


@pytest.mark.parametrize(
    "last",
    [b"data: [1, 2]\n\n", b'data: {"type": ["message_stop"]}\n\n', b'data: {"type": {}}\n\n'],
)
def test_a_stream_whose_last_data_is_not_a_string_is_not_finished(last: bytes) -> None:
    # a client closing such a stream early is recorded as abandoned, never a crash
    assert stream_finished(StreamFormat.SSE, [b'data: {"n": 1}\n\n', last]) is False


def test_an_mcp_answer_ends_its_sse_stream() -> None:
    """An MCP server's SSE answer ends with the JSON-RPC response: a client that closes
    right after it read all of it; progress notifications before it do not end it."""
    progress = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
    answer = b'event: message\ndata: {"jsonrpc":"2.0","id":3,"result":{}}\n\n'
    error = b'event: message\ndata: {"jsonrpc":"2.0","id":3,"error":{"code":-1}}\n\n'
    assert stream_finished(StreamFormat.SSE, [progress, answer]) is True
    assert stream_finished(StreamFormat.SSE, [progress, error]) is True
    assert stream_finished(StreamFormat.SSE, [answer, progress]) is False
    assert stream_finished(StreamFormat.SSE, [b'data: {"id":3,"result":{}}\n\n']) is False


def test_a_session_get_for_events_opens_a_server_push_stream() -> None:
    accept = "application/json, text/event-stream"
    assert opens_server_push("GET", accept, "rec-0123456789ab") is True
    assert opens_server_push("get", "Text/Event-Stream", "abc") is True
    assert opens_server_push("GET", accept, None) is False  # no session: an ordinary stream
    assert opens_server_push("POST", accept, "abc") is False
    assert opens_server_push("GET", "application/json", "abc") is False
    assert opens_server_push("GET", None, "abc") is False
