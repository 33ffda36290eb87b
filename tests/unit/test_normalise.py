"""`hashreplay.core.normalise`: request normaliser (§3) and response normaliser (§5)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.core.constants import FIXED_EPOCH
from hashreplay.core.normalise import (
    KEPT_RESPONSE_HEADERS,
    RequestRules,
    filter_headers,
    new_id_registry,
    normalise_number,
    normalise_request_body,
    normalise_text,
)
from hashreplay.core.normalise_response import normalise_response_values

HASH = "0123456789abcdef0123456789abcdef"
STABLE = "rec-0123456789ab"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


# --- request normaliser --------------------------------------------------------------------


def test_int_and_float_normalise_equal() -> None:
    a = normalise_request_body({"temperature": 1, "n": [2, 3]})
    b = normalise_request_body({"temperature": 1.0, "n": [2.0, 3.0]})
    assert a == b
    assert type(a["temperature"]) is type(b["temperature"]) is int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, 1),
        (2.0000001, 2),
        (-2.0000001, -2),
        (0.1234567, 0.12346),
        (0.123454, 0.12345),
        (3.14159265, 3.14159),
        (1e-9, 0),
        (0.5, 0.5),
    ],
)
def test_floats_rounded_to_five_decimals(value: float, expected: float) -> None:
    result = normalise_number(value)
    assert result == expected
    assert type(result) is type(expected)
    assert normalise_request_body({"x": value}) == {"x": expected}


def test_float_and_its_rounding_hash_the_same() -> None:
    assert normalise_request_body([0.30000000000000004]) == normalise_request_body([0.3])


@pytest.mark.parametrize("value", [True, False])
def test_bools_are_not_numbers(value: bool) -> None:
    result = normalise_request_body({"stream": value, "items": [value]})
    assert result["stream"] is value
    assert result["items"][0] is value
    assert orjson.dumps(normalise_request_body(True)) != orjson.dumps(normalise_request_body(1))


def test_none_kept() -> None:
    assert normalise_request_body({"stop": None}) == {"stop": None}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.123456789", "0.12346"),
        ("1.2345", "1.23450"),
        ("1.234", "1.234"),
        ("12", "12"),
        ("-3.999999", "-4.00000"),
        ("pi is 3.14159265 and e is 2.71828182", "pi is 3.14159 and e is 2.71828"),
        ("version 1.2.3", "version 1.2.3"),
        ("at 10.00001s", "at 10.00001s"),
        ("123456789012345678901234567890.123456", "123456789012345678901234567890.12346"),
    ],
)
def test_decimals_in_text_rendered_with_five_digits(text: str, expected: str) -> None:
    assert normalise_text(text) == expected
    assert normalise_request_body({"prompt": text}) == {"prompt": expected}


def test_text_nfc() -> None:
    decomposed = "caf" + "e\u0301"
    assert normalise_request_body({"q": decomposed}) == {"q": "caf\u00e9"}
    assert normalise_request_body({"e\u0301": 1}) == {"\u00e9": 1}


def test_ignore_body_keys_by_name_at_any_depth() -> None:
    rules = RequestRules(ignore_body_keys=("request_id",))
    body = {
        "request_id": "a",
        "messages": [{"role": "user", "request_id": "b", "content": "hi"}],
        "metadata": {"inner": {"request_id": "c", "keep": 1}},
    }
    assert normalise_request_body(body, rules) == {
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"inner": {"keep": 1}},
    }


def test_ignore_body_keys_by_dotted_path_from_root_only() -> None:
    rules = RequestRules(ignore_body_keys=("metadata.trace_id",))
    body = {
        "trace_id": "top",
        "metadata": {"trace_id": "drop", "user": "u"},
        "other": {"metadata": {"trace_id": "deeper"}},
    }
    assert normalise_request_body(body, rules) == {
        "trace_id": "top",
        "metadata": {"user": "u"},
        "other": {"metadata": {"trace_id": "deeper"}},
    }


def test_ignored_body_keys_make_volatile_requests_equal() -> None:
    rules = RequestRules(ignore_body_keys=("seed", "metadata.ts"))
    a = {"model": "m", "seed": 1, "metadata": {"ts": 100, "u": "x"}}
    b = {"model": "m", "seed": 2, "metadata": {"ts": 200, "u": "x"}}
    assert normalise_request_body(a, rules) == normalise_request_body(b, rules)


def test_id_map_replaces_whole_and_embedded_ids() -> None:
    id_map = {"resp_ABC123": "rec-0123456789ab", "call_XYZ": "rec-0123456789ab-1"}
    body = {
        "previous_response_id": "resp_ABC123",
        "input": [
            {"type": "function_call_output", "call_id": "call_XYZ", "output": "ok"},
            {"role": "user", "content": "about resp_ABC123 and call_XYZ"},
        ],
    }
    assert normalise_request_body(body, id_map=id_map) == {
        "previous_response_id": "rec-0123456789ab",
        "input": [
            {"type": "function_call_output", "call_id": "rec-0123456789ab-1", "output": "ok"},
            {"role": "user", "content": "about rec-0123456789ab and rec-0123456789ab-1"},
        ],
    }


def test_request_normaliser_does_not_mutate_input() -> None:
    body = {"a": [1.0, "1.23456789"], "request_id": "x"}
    before = copy.deepcopy(body)
    normalise_request_body(body, RequestRules(ignore_body_keys=("request_id",)))
    assert body == before


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_request_normaliser_is_idempotent(value: Any) -> None:
    once = normalise_request_body(value)
    assert normalise_request_body(once) == once


@settings(max_examples=100, deadline=None)
@given(json_values, st.sampled_from(["a", "b", "a.b"]))
def test_request_normaliser_with_rules_is_idempotent(value: Any, ignored: str) -> None:
    rules = RequestRules(ignore_body_keys=(ignored,))
    once = normalise_request_body(value, rules)
    assert normalise_request_body(once, rules) == once


# --- response normaliser -------------------------------------------------------------------


def chat_completion(ident: str = "chatcmpl-abc123", created: int = 1712345678) -> dict[str, Any]:
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_Q1w2E3", "type": "function", "function": {"name": "f"}}
                    ],
                },
            }
        ],
    }


def test_top_level_id_and_second_distinct_id() -> None:
    registry = new_id_registry(HASH)
    [out] = normalise_response_values([chat_completion()], registry)
    assert out["id"] == STABLE
    assert out["choices"][0]["message"]["tool_calls"][0]["id"] == f"{STABLE}-1"
    assert out["created"] == 0
    assert out["choices"][0]["message"]["content"] is None
    assert out["model"] == "gpt-4o-mini"


def test_same_original_in_stream_chunks_gets_same_stable_id() -> None:
    chunks = [
        {"id": "chatcmpl-S1", "created": 17, "choices": [{"delta": {"content": "He"}}]},
        {"id": "chatcmpl-S1", "created": 17, "choices": [{"delta": {"content": "llo"}}]},
        {"id": "chatcmpl-S1", "created": 17, "choices": [], "usage": {"total_tokens": 3}},
    ]
    registry = new_id_registry(HASH)
    out = normalise_response_values(chunks, registry)
    assert [c["id"] for c in out] == [STABLE] * 3
    assert [c["created"] for c in out] == [0, 0, 0]
    assert [c["choices"] for c in out] == [c["choices"] for c in chunks]
    assert registry.facts == {STABLE: "response.body[0].id"}


def test_references_to_original_id_are_mapped() -> None:
    events = [
        {"type": "response.created", "response": {"id": "resp_9f8e7d", "created_at": 1712}},
        {"type": "response.output_item.added", "item": {"id": "msg_77aa"}},
        {"type": "response.output_text.delta", "item_id": "msg_77aa", "delta": "Hi"},
        {"type": "response.completed", "note": "done resp_9f8e7d"},
    ]
    registry = new_id_registry(HASH)
    out = normalise_response_values(events, registry)
    assert out[0]["response"] == {"id": STABLE, "created_at": 0}
    assert out[1]["item"]["id"] == f"{STABLE}-1"
    assert out[2]["item_id"] == f"{STABLE}-1"
    assert out[3]["note"] == f"done {STABLE}"


def test_reference_before_definition_is_mapped() -> None:
    values = [{"item_id": "msg_later"}, {"id": "msg_later"}]
    out = normalise_response_values(values, new_id_registry(HASH))
    assert out == [{"item_id": STABLE}, {"id": STABLE}]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("created", 1712345678, 0),
        ("created_at", "2025-01-02T03:04:05.123456789Z", FIXED_EPOCH),
        ("created_at", 1712345678, 0),
        ("created_at", 1712345678.25, 0),
        ("completed_at", 1712345679, 0),
        ("total_duration", 123456789, 0),
        ("load_duration", 5, 0),
        ("prompt_eval_duration", 7, 0),
        ("eval_duration", 9, 0),
        ("obfuscation", "aZ9x", ""),
    ],
)
def test_volatile_values_fixed(key: str, value: Any, expected: Any) -> None:
    [out] = normalise_response_values([{key: value, "keep": value}], new_id_registry(HASH))
    assert out == {key: expected, "keep": value}


def test_ollama_response_durations_and_created_at() -> None:
    body = {
        "model": "llama3.2",
        "created_at": "2024-07-01T12:00:00.1234Z",
        "message": {"role": "assistant", "content": "hi"},
        "done": True,
        "total_duration": 4883583458,
        "load_duration": 1334875,
        "prompt_eval_count": 26,
        "prompt_eval_duration": 342546000,
        "eval_count": 282,
        "eval_duration": 4535599000,
    }
    [out] = normalise_response_values([body], new_id_registry(HASH))
    assert out == {
        **body,
        "created_at": FIXED_EPOCH,
        "total_duration": 0,
        "load_duration": 0,
        "prompt_eval_duration": 0,
        "eval_duration": 0,
    }


@pytest.mark.parametrize(
    "key", ["id", "created", "created_at", "total_duration", "obfuscation", "call_id"]
)
def test_null_values_untouched(key: str) -> None:
    registry = new_id_registry(HASH)
    [out] = normalise_response_values([{key: None}], registry)
    assert out == {key: None}
    assert registry.facts == {}


def test_model_lists_keep_ids_and_times() -> None:
    body = {
        "object": "list",
        "data": [
            {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"},
            {"id": "o3-mini", "object": "model", "created": 1737146383, "owned_by": "system"},
        ],
    }
    registry = new_id_registry(HASH)
    [out] = normalise_response_values(
        [copy.deepcopy(body)], registry, rewrite_ids=False, rewrite_times=False
    )
    assert out == body
    assert registry.facts == {}
    assert registry.stable == {}


def test_response_normaliser_is_idempotent() -> None:
    values = [
        chat_completion(),
        {"id": "chatcmpl-abc123", "created_at": "2025-01-01T00:00:00Z", "ref": "call_Q1w2E3"},
        {"total_duration": 5, "obfuscation": "zz", "created_at": 3},
    ]
    registry = new_id_registry(HASH)
    once = normalise_response_values(values, registry)
    again_registry = new_id_registry(HASH, registry.facts)
    twice = normalise_response_values(copy.deepcopy(once), again_registry)
    assert twice == once
    assert again_registry.facts == registry.facts


def test_facts_hold_stable_ids_and_paths_never_originals() -> None:
    registry = new_id_registry(HASH)
    normalise_response_values([chat_completion("chatcmpl-ORIGINAL", 99)], registry)
    assert registry.facts == {
        STABLE: "response.body.id",
        f"{STABLE}-1": "response.body.choices[0].message.tool_calls[0].id",
    }
    dumped = repr(registry.facts)
    assert "chatcmpl-ORIGINAL" not in dumped
    assert "call_Q1w2E3" not in dumped
    # The originals live only in memory, to map follow-up requests.
    assert registry.stable == {"chatcmpl-ORIGINAL": STABLE, "call_Q1w2E3": f"{STABLE}-1"}


def test_re_recording_gives_identical_output() -> None:
    first = normalise_response_values([chat_completion("chatcmpl-1", 1)], new_id_registry(HASH))
    second = normalise_response_values([chat_completion("chatcmpl-2", 2)], new_id_registry(HASH))
    assert first == second


def test_response_normaliser_does_not_mutate_input() -> None:
    body = chat_completion()
    before = copy.deepcopy(body)
    normalise_response_values([body], new_id_registry(HASH))
    assert body == before


# --- headers -------------------------------------------------------------------------------


def test_filter_headers_keeps_only_allowlist() -> None:
    headers = [
        ("Content-Type", "application/json"),
        ("Date", "Mon, 01 Jan 2024 00:00:00 GMT"),
        ("x-request-id", "req_123"),
        ("Set-Cookie", "a=b"),
        ("Retry-After", "2"),
        ("openai-processing-ms", "120"),
        ("x-ratelimit-remaining-requests", "99"),
        ("X-Should-Retry", "false"),
        ("retry-after-ms", "1500"),
    ]
    assert filter_headers(headers, KEPT_RESPONSE_HEADERS) == {
        "content-type": "application/json",
        "retry-after": "2",
        "x-should-retry": "false",
        "retry-after-ms": "1500",
    }


def test_filter_headers_case_insensitive_and_extra_keep() -> None:
    headers = [("CONTENT-TYPE", "text/plain"), ("X-Custom", "1"), ("x-custom", "2")]
    keep = KEPT_RESPONSE_HEADERS | {"x-custom"}
    assert filter_headers(headers, keep) == {"content-type": "text/plain", "x-custom": "1, 2"}


def test_filter_headers_transform_applied() -> None:
    out = filter_headers([("Content-Type", "a")], {"content-type"}, lambda n, v: f"{n}={v}")
    assert out == {"content-type": "content-type=a"}


def test_short_ids_are_mapped_only_as_whole_values() -> None:
    from hashreplay.core.normalise import map_ids

    id_map = {"1": "rec-aaaaaaaaaaaa", "chatcmpl-abcdef123": "rec-bbbbbbbbbbbb"}
    assert map_ids("1", id_map) == "rec-aaaaaaaaaaaa"
    assert map_ids("version 1.2", id_map) == "version 1.2"
    assert map_ids("see chatcmpl-abcdef123 above", id_map) == "see rec-bbbbbbbbbbbb above"


def test_a_session_id_handed_out_in_a_header_becomes_stable() -> None:
    """`mcp-session-id` (an `ID_HEADERS` header) is kept with a stable value registered as a
    fact of the exchange's headers; a later answer repeating it (the test's known ids) gets
    the same stable value; body text quoting it is mapped too; a stable one stays."""
    from hashreplay.core.format import RecordedResponse
    from hashreplay.core.normalise_response import normalise_response

    live = "0f3c9a1e5b7d4c2a8e6f1b3d5a7c9e0f"
    first = RecordedResponse(
        status=200,
        headers={"content-type": "application/json", "mcp-session-id": live},
        body={"jsonrpc": "2.0", "id": 1, "result": {"note": f"session {live}"}},
    )
    registry = new_id_registry(HASH)
    out = normalise_response(first, registry)
    assert out.headers == {"content-type": "application/json", "mcp-session-id": STABLE}
    assert out.body["result"]["note"] == f"session {STABLE}"
    assert out.body["id"] == 1  # the client's JSON-RPC id stays as it numbered it
    assert registry.facts == {STABLE: "response.headers.mcp-session-id"}

    later = new_id_registry("f" * 32)
    again = normalise_response(first, later, known_ids=registry.stable)
    assert again.headers["mcp-session-id"] == STABLE and later.facts == {}
    assert normalise_response(out, new_id_registry("e" * 32)).headers == out.headers
