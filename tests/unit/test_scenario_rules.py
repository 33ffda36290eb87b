"""The pure rules of scenarios: pace and unconsumed values, templates, fault arguments,
pacing delays, and when a stream counts as finished."""

from __future__ import annotations

import pytest

from hashreplay.core.errors import ConfigError
from hashreplay.core.format import RecordedResponse, Timing
from hashreplay.core.modes import Pace, Unconsumed
from hashreplay.core.streams import StreamFormat, stream_finished
from hashreplay.core.templates import TemplateError, fill, has_markers, parse_path
from hashreplay.engine.faults import ActiveFault, FaultSpec
from hashreplay.engine.http import BreakKind
from hashreplay.engine.scenarios import NoTiming, delays_for

REQUEST = {
    "method": "POST",
    "url": "http://x/v1/chat",
    "endpoint": "/v1/chat",
    "headers": {"x-trace": "t-1"},
    "body": {
        "messages": [{"role": "user", "content": "first"}, {"role": "user", "content": "last"}],
        "metadata": {"trace_id": "abc-123", "n": 3},
    },
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("instant", "instant"),
        ("RECORDED", "recorded"),
        ("fixed:50", "fixed:50"),
        ("fixed:0.5", "fixed:0.5"),
    ],
)
def test_pace_parses_its_three_forms(value: str, expected: str) -> None:
    assert str(Pace.parse(value)) == expected


@pytest.mark.parametrize("value", ["fast", "fixed:", "fixed:-3", "fixed:abc", 12, None])
def test_a_pace_that_does_not_parse_names_its_source_and_the_forms(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        Pace.parse(value, source="HASHREPLAY_PACE")
    assert str(info.value).startswith("HASHREPLAY_PACE: ")
    assert '"fixed:<ms>"' in str(info.value)


def test_unconsumed_values() -> None:
    assert Unconsumed.parse("FAIL") is Unconsumed.FAIL
    with pytest.raises(ConfigError, match='"warn", "fail", "ignore"'):
        Unconsumed.parse("loud", source="@pytest.mark.hashreplay unconsumed")


def test_template_paths_fill_strings_and_keep_json_types() -> None:
    body = {
        "text": "you said {{request:body.messages[-1].content}} ({{request:headers.x-trace}})",
        "id": "{{request:body.metadata.trace_id}}",
        "n": "{{request:body.metadata.n}}",
        "where": "{{request:endpoint}}",
        "list": ["{{request:body.messages[0]}}"],
    }
    assert fill(body, REQUEST) == {
        "text": "you said last (t-1)",
        "id": "abc-123",
        "n": 3,
        "where": "/v1/chat",
        "list": [{"role": "user", "content": "first"}],
    }


def test_template_escapes_and_plain_braces() -> None:
    assert (
        fill("{{{{request:body.x}} and {{ plain }}", REQUEST)
        == "{{request:body.x}} and {{ plain }}"
    )
    assert has_markers({"a": ["{{request:url}}"]})
    assert not has_markers({"a": "plain"})


@pytest.mark.parametrize("path", ["bodyx", "nothing.at.all", "body..x", "body[x]", "body.a[1"])
def test_a_template_path_with_bad_syntax_names_the_valid_forms(path: str) -> None:
    with pytest.raises(TemplateError) as info:
        parse_path(path)
    assert info.value.syntax
    assert "{{request:body.messages[-1].content}}" in str(info.value)


@pytest.mark.parametrize("path", ["body.metadata.missing", "body.messages[5]", "headers.x-nope"])
def test_a_template_path_that_resolves_to_nothing_names_the_path(path: str) -> None:
    with pytest.raises(TemplateError) as info:
        fill({"a": f"{{{{request:{path}}}}}"}, REQUEST)
    assert not info.value.syntax
    assert repr(path) in str(info.value)


def test_fault_arguments_are_validated_with_the_valid_forms() -> None:
    cases = [
        ({"error": "explode"}, "unknown fault kind error='explode'"),
        ({"status": 429, "error": "read_timeout"}, "exactly one of status, error, hang or close"),
        ({}, "exactly one of status, error, hang or close"),
        ({"status": 42}, "is not an HTTP status"),
        ({"status": 429, "times": 0}, "times=0 must be an integer >= 1"),
        ({"status": 429, "after_chunks": 2}, "after_chunks needs error"),
        ({"status": 429, "colour": "red"}, "unknown argument 'colour'"),
        ({"hang": "yes"}, "hang='yes' must be True or False"),
    ]
    for kwargs, problem in cases:
        with pytest.raises(ConfigError) as info:
            FaultSpec.parse(kwargs)
        message = str(info.value)
        assert message.startswith("hashreplay_fault: "), message
        assert problem in message
        assert 'error="read_timeout"|"connect_error"|"disconnect"' in message


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        # each names the keyword and the value given, in the marker's terms
        ({"status": 0}, "status 0 is not an HTTP status"),
        ({"status": "500"}, "status '500' is not an HTTP status"),
        ({"status": True}, "status True is not an HTTP status"),
        ({"error": ""}, "unknown fault kind error=''"),
        ({"error": "abandoned"}, "unknown fault kind error='abandoned'"),
        ({"error": "disconnect", "call": 1.5}, "call=1.5 must be an integer >= 1"),
        ({"error": "disconnect", "after_chunks": -1}, "after_chunks=-1 must be an integer >= 0"),
        ({"status": 500, "endpoint": 3}, "endpoint 3 must be a path (suffix) string"),
        ({"status": 500, "headers": ["x"]}, "headers must be a dict of strings"),
        ({"status": 500, "body": 3}, "body must be a dict, a list or a str, got int"),
        # a fault that replaces no response has no headers or body to give
        ({"error": "disconnect", "body": "x"}, "headers and body go with status=..."),
        ({"hang": True, "headers": {"x-a": "1"}}, "headers and body go with status=..."),
        ({"status": 500, "sttaus": 1, "times": 0}, "unknown argument 'sttaus'"),
    ],
)
def test_each_bad_fault_keyword_is_named_with_its_value(
    kwargs: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        FaultSpec.parse(kwargs, source="@pytest.mark.hashreplay_fault")
    assert str(info.value).startswith(f"@pytest.mark.hashreplay_fault: {problem}; valid forms: ")


def test_a_fault_keeps_what_was_given() -> None:
    spec = FaultSpec.parse(
        {"status": 503, "headers": {"Retry-After": "1"}, "body": {"e": 1}, "times": 2}
    )
    assert (spec.status, spec.headers, spec.body, spec.times) == (
        503,
        (("retry-after", "1"),),
        {"e": 1},
        2,
    )
    broken = FaultSpec.parse({"error": "read_timeout", "after_chunks": 0, "call": 3})
    assert broken.error is BreakKind.READ_TIMEOUT
    assert broken.breaks_recorded
    assert broken.describe() == "hashreplay_fault(error='read_timeout', after_chunks=0, call=3)"


def test_fault_counting_times_call_and_endpoint() -> None:
    limited = ActiveFault(FaultSpec.parse({"status": 429, "times": 2, "endpoint": "/chat"}))
    assert [limited.take(p) for p in ["/v1/chat", "/v1/other", "/v1/chat", "/v1/chat"]] == [
        True,
        False,
        True,
        False,
    ]
    second = ActiveFault(FaultSpec.parse({"error": "disconnect", "call": 2}))
    assert [second.take("/a") for _ in range(3)] == [False, True, False]


def test_fixed_and_recorded_delays() -> None:
    timed = RecordedResponse(
        status=200, timing=Timing(head_us=100_000, chunks_us=[200_000, 500_000])
    )
    assert delays_for(timed, Pace.parse("instant"), 2) == ()
    assert delays_for(timed, Pace.parse("fixed:40"), 2) == (0.0, 0.04, 0.04)
    assert delays_for(timed, Pace.parse("recorded"), 2) == pytest.approx((0.1, 0.1, 0.3))
    # more replayed chunks than recorded ones: the recorded total is kept
    assert sum(delays_for(timed, Pace.parse("recorded"), 5)) == pytest.approx(0.5)
    with pytest.raises(NoTiming):
        delays_for(RecordedResponse(status=200), Pace.parse("recorded"), 1)


def test_a_stream_is_finished_only_by_its_own_last_event() -> None:
    done = [b'data: {"a": 1}\n\n', b"data: [DONE]\n\n"]
    assert stream_finished(StreamFormat.SSE, done)
    assert stream_finished(
        StreamFormat.SSE, [b'event: message_stop\ndata: {"type": "message_stop"}\n\n']
    )
    assert not stream_finished(StreamFormat.SSE, done[:1])
    assert stream_finished(StreamFormat.NDJSON, [b'{"done": false}\n', b'{"done": true}\n'])
    assert not stream_finished(StreamFormat.NDJSON, [b'{"done": false}\n'])
    assert not stream_finished(StreamFormat.CHUNKS, [b"abc"])


def test_templates_fill_stream_events_and_ndjson_lines_alike() -> None:
    events = [
        {"event": "delta", "data": {"text": "hi {{request:body.metadata.trace_id}}"}},
        {"data": "plain text {{request:method}}"},
        {"data": "[DONE]"},
    ]
    assert fill(events, REQUEST) == [
        {"event": "delta", "data": {"text": "hi abc-123"}},
        {"data": "plain text POST"},
        {"data": "[DONE]"},
    ]
    assert fill([{"response": "{{request:body.metadata.n}}", "done": True}], REQUEST) == [
        {"response": 3, "done": True}
    ]


def test_a_response_knows_whether_its_body_holds_markers() -> None:
    plain = RecordedResponse(status=200, body={"a": "b"})
    assert not plain.has_templates()
    assert plain.replace(body={"a": "{{request:url}}"}).has_templates()
    assert not plain.has_templates()


# --- live text is never a template; templates never frame a stream ----------------------------


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hashreplay.core.streams import render_stream  # noqa: E402
from hashreplay.core.templates import escape, fill_stream  # noqa: E402

STREAM_REQUEST = {
    "body": {"model": "m-1", "note": "two\nlines", "cr": "a\rb", "n": 3},
    "method": "POST",
}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="{}request:body.model x\n", max_size=40))
def test_escaped_live_text_fills_back_to_exactly_itself(text: str) -> None:
    stored = escape({"content": text, "list": [text], "n": 1})
    assert fill(stored, STREAM_REQUEST) == {"content": text, "list": [text], "n": 1}
    assert escape(text).count("{{request:") == 0 or "{{{{request:" in escape(text)


def test_escape_leaves_text_without_braces_and_keys_alone() -> None:
    value = {"{{key}}": "plain", "n": None}
    assert escape(value) == value
    assert escape("a {{request:body.model}}") == "a {{{{request:body.model}}"


def test_a_template_in_sse_json_data_is_json_escaped() -> None:
    events = [{"data": {"text": "{{request:body.note}}"}}, {"data": "[DONE]"}]
    filled = fill_stream("sse", events, STREAM_REQUEST)
    assert filled[0]["data"] == {"text": "two\nlines"}
    rendered = render_stream(StreamFormat.SSE, filled)
    assert rendered[0] == b'data: {"text":"two\\nlines"}\n\n'


def test_a_line_break_in_sse_data_text_stays_one_event() -> None:
    (filled,) = fill_stream("sse", [{"data": "say {{request:body.note}}"}], STREAM_REQUEST)
    (rendered,) = render_stream(StreamFormat.SSE, [filled])
    assert rendered == b"data: say two\ndata: lines\n\n"  # SSE's own multi-line data


@pytest.mark.parametrize(
    ("fmt", "items", "where", "template"),
    [
        ("sse", [{"data": "ok"}, {"event": "{{request:body.note}}", "data": {}}],
         "stream event 1, field 'event'", "{{request:body.note}}"),
        ("sse", [{"id": "x-{{request:body.note}}", "data": "d"}], "stream event 0, field 'id'",
         "{{request:body.note}}"),
        ("sse", [{"comments": ["c {{request:body.note}}"], "data": "d"}],
         "stream event 0, field 'comments'", "{{request:body.note}}"),
        ("sse", [{"data": "x {{request:body.cr}}"}], "stream event 0, field 'data'",
         "{{request:body.cr}}"),
        ("ndjson", [{"done": False}, "text {{request:body.note}}"], "stream event 1 (a line)",
         "{{request:body.note}}"),
    ],
)  # fmt: skip
def test_a_template_cannot_put_framing_into_a_stream(
    fmt: str, items: list[object], where: str, template: str
) -> None:
    with pytest.raises(TemplateError) as caught:
        fill_stream(fmt, items, STREAM_REQUEST)
    assert f"template {template} in {where} is refused" in str(caught.value)
    assert "would break the stream's framing" in str(caught.value)
    assert caught.value.syntax is False  # a failure of this test, not an unreadable file


def test_ndjson_json_lines_and_raw_chunks_fill_as_before() -> None:
    assert fill_stream("ndjson", [{"t": "{{request:body.note}}"}], STREAM_REQUEST) == [
        {"t": "two\nlines"}
    ]
    assert fill_stream("chunks", ["{{request:body.model}}"], STREAM_REQUEST) == ["m-1"]
