"""The shape comparison of a drift run (docs/design.md §15, "Drift"): status, field paths with
their JSON types (inside each stream event too), event types in order with repeats collapsed;
never the generated text, volatile values or how many deltas it took."""

from __future__ import annotations

from typing import Any

from hashreplay.core.format import RecordedResponse
from hashreplay.core.shape import compare, field_types, shape_of
from hashreplay.core.streams import StreamFormat


def body(payload: Any, status: int = 200) -> RecordedResponse:
    return RecordedResponse(status=status, body=payload)


def sse(*events: dict[str, Any]) -> RecordedResponse:
    return RecordedResponse(
        status=200, body=list(events), is_streaming=True, stream_format=StreamFormat.SSE
    )


def chat(text: str, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-1",
        "created": 1,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9},
        **extra,
    }


def differences(recorded: RecordedResponse, live: RecordedResponse) -> list[str]:
    return compare(shape_of(recorded), shape_of(live))


def test_field_paths_unite_the_items_of_arrays() -> None:
    found = field_types({"a": [{"b": 1}, {"b": None, "c": "x"}], "d": []})
    assert found == {
        "(body)": {"object"},
        "a": {"array"},
        "a[]": {"object"},
        "a[].b": {"number", "null"},
        "a[].c": {"string"},
        "d": {"array"},
    }


def test_other_text_ids_and_numbers_are_no_drift() -> None:
    recorded = body(chat("Paris is the capital."))
    live = body({**chat("It is Paris, of course, a long answer."), "id": "x", "created": 17.5})
    live.body["usage"]["completion_tokens"] = 412
    assert differences(recorded, live) == []


def test_a_field_added_removed_or_retyped_is_drift() -> None:
    recorded = body(chat("hi"))
    added = body(chat("hi", service_tier="default"))
    assert differences(recorded, added) == ["body: field added service_tier (string)"]
    assert differences(added, recorded) == ["body: field removed service_tier (string)"]
    retyped = body(chat("hi"))
    retyped.body["usage"]["prompt_tokens"] = "3"
    assert differences(recorded, retyped) == [
        "body: type of usage.prompt_tokens changed from number to string"
    ]


def test_the_status_comes_first() -> None:
    assert differences(body(chat("a")), body({"error": {}}, status=400)) == [
        "status changed from 200 to 400"
    ]


def delta(text: str) -> dict[str, Any]:
    return {
        "event": "content_block_delta",
        "data": {"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}},
    }


START = {"event": "message_start", "data": {"type": "message_start", "message": {"id": "m"}}}
STOP = {"event": "message_stop", "data": {"type": "message_stop"}}


def test_streams_compare_event_types_collapsed_not_how_many_deltas() -> None:
    recorded = sse(START, delta("a"), delta("b"), STOP)
    live = sse(START, *(delta(w) for w in ["a", "longer", "answer"]), STOP)
    assert differences(recorded, live) == []


def test_a_stream_event_added_is_drift() -> None:
    recorded = sse(START, delta("a"), STOP)
    ping = {"event": "ping", "data": {"type": "ping"}}
    assert differences(recorded, sse(START, ping, delta("a"), STOP)) == [
        "stream events changed from [message_start, content_block_delta, message_stop] to "
        "[message_start, ping, content_block_delta, message_stop]"
    ]


def test_fields_inside_stream_events_are_compared_per_event_type() -> None:
    recorded = sse(START, delta("a"), STOP)
    changed = delta("a")
    changed["data"]["delta"]["citations"] = []
    assert differences(recorded, sse(START, changed, STOP)) == [
        "event content_block_delta: field added delta.citations (array)"
    ]


def test_sse_without_event_names_uses_data_and_text() -> None:
    chunk = {"data": {"choices": [{"delta": {"content": "x"}}]}}
    recorded = sse(chunk, chunk, {"data": "[DONE]"})
    assert shape_of(recorded).events == ("data", "text")
    assert differences(recorded, sse(chunk, {"data": "[DONE]"})) == []
    assert differences(recorded, sse(chunk)) == [
        "stream events changed from [data, text] to [data]"
    ]


def test_a_body_that_became_a_stream_is_drift() -> None:
    assert differences(body(chat("a")), sse(START)) == ["body changed from json to stream:sse"]
