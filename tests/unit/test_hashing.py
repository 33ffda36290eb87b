"""`hashreplay.core.hashing` and the names built on it: the request hash and model-list
naming (docs/design.md §3, contract).

The golden hashes below guard the contract: if one changes, every existing recording is
orphaned, so the change needs a KEY_VERSION bump and a `hashreplay rehash`.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.core import normalise as normalise_module
from hashreplay.core.constants import KEY_VERSION
from hashreplay.core.hashing import canonical_json, request_hash
from hashreplay.core.model_lists import is_model_list, model_ids
from hashreplay.core.names import model_list_filename
from hashreplay.core.normalise import RequestRules, normalise_request_body
from hashreplay.core.redact import Redactor
from hashreplay.core.urls import endpoint_of

CHAT_BODY = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0,
}
TEST_ID = "tests/test_chat.py::test_hello"
CHAT_ENDPOINT = "/v1/chat/completions"

GOLDEN_CHAT = "86bb57d7885ac1a29a49aad32bd3fdb9"
GOLDEN_CHAT_SHARED = "bdf53634a63de37dbe13e4c1bd26930d"
GOLDEN_CHAT_TENANT = "c15422b16cbe38dbb37f5623218fe8cc"
GOLDEN_GET_MODELS = "f17ca5514b4f96802476dce117ef4ea0"
GOLDEN_CHAT_CANONICAL = (
    b'{"body":{"messages":[{"content":"hi","role":"user"}],"model":"gpt-4o-mini",'
    b'"temperature":0},"endpoint":"/v1/chat/completions","method":"POST",'
    b'"test_id":"tests/test_chat.py::test_hello"}'
)


# --- golden hashes (contract) --------------------------------------------------------------


def test_key_version_matches_golden_hashes() -> None:
    # If this fails, the golden hashes below were computed under other rules: update both.
    assert KEY_VERSION == 2


def test_golden_chat_hash() -> None:
    assert request_hash("POST", CHAT_ENDPOINT, CHAT_BODY, TEST_ID) == GOLDEN_CHAT


def test_golden_chat_shared_hash() -> None:
    got = request_hash("POST", CHAT_ENDPOINT, CHAT_BODY, TEST_ID, shared=True)
    assert got == GOLDEN_CHAT_SHARED


def test_golden_chat_with_match_header_hash() -> None:
    got = request_hash("POST", CHAT_ENDPOINT, CHAT_BODY, TEST_ID, headers={"x-tenant": "a"})
    assert got == GOLDEN_CHAT_TENANT


def test_golden_get_without_body_hash() -> None:
    assert request_hash("GET", "/v1/models", None, None) == GOLDEN_GET_MODELS


def test_golden_canonical_bytes() -> None:
    payload = {"method": "POST", "endpoint": CHAT_ENDPOINT, "body": CHAT_BODY, "test_id": TEST_ID}
    assert canonical_json(payload) == GOLDEN_CHAT_CANONICAL
    # The hash is xxh3_128 of exactly these bytes.
    assert xxhash.xxh3_128_hexdigest(GOLDEN_CHAT_CANONICAL) == GOLDEN_CHAT


def test_hash_is_32_lowercase_hex() -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", request_hash("POST", "/x", {"a": 1}, "t"))


def test_method_is_case_insensitive() -> None:
    assert request_hash("post", CHAT_ENDPOINT, CHAT_BODY, TEST_ID) == GOLDEN_CHAT


def test_empty_match_headers_do_not_change_the_hash() -> None:
    assert request_hash("POST", CHAT_ENDPOINT, CHAT_BODY, TEST_ID, headers={}) == GOLDEN_CHAT


@pytest.mark.parametrize(
    "change",
    [
        {"method": "PUT"},
        {"endpoint": "/v1/completions"},
        {"body": {**CHAT_BODY, "temperature": 1}},
        {"test_id": "tests/test_chat.py::test_other"},
        {"test_id": None},
        {"headers": {"x-tenant": "b"}},
    ],
)
def test_every_part_changes_the_hash(change: dict[str, Any]) -> None:
    args: dict[str, Any] = {
        "method": "POST",
        "endpoint": CHAT_ENDPOINT,
        "body": CHAT_BODY,
        "test_id": TEST_ID,
    }
    base = request_hash(**args)
    assert request_hash(**{**args, **change}) != base


# --- client-generated ids (key_version 2) -------------------------------------------------


def tool_turn(call: str, message: str, trace: str, text: str = "weather?") -> dict[str, Any]:
    """A follow-up turn whose ids the client made up: a tool call id, a message id, a trace."""
    return {
        "model": "gpt-4o-mini",
        "metadata": {"message_id": message, "trace": trace},
        "messages": [
            {"role": "user", "content": text},
            {"role": "assistant", "tool_calls": [{"id": call, "type": "function"}]},
            {"role": "tool", "tool_call_id": call, "content": "sunny"},
        ],
    }


CLIENT_IDS_BODY = tool_turn(
    "call_0123456789abcdef0123456789abcdef",
    "msg_8d0ee7e4-7a8e-4c1a-9b7e-3f1b2c3d4e5f",
    "6F9619FF-8B86-D011-B42D-00C04FC964FF",
)
GOLDEN_CLIENT_IDS = "4fb5295cf0b8eaefa25c54cc8aa392bc"


def keyed(body: Any) -> str:
    return request_hash("POST", CHAT_ENDPOINT, normalise_request_body(body), TEST_ID)


def test_golden_hash_of_a_body_with_client_ids() -> None:
    assert normalise_request_body(CLIENT_IDS_BODY) == tool_turn(
        "call_<id:1>", "msg_<id:2>", "<id:3>"
    )
    assert keyed(CLIENT_IDS_BODY) == GOLDEN_CLIENT_IDS


def test_fresh_client_ids_per_run_hash_the_same() -> None:
    fresh = tool_turn(
        "call_" + "f" * 32, "msg_00000000-0000-4000-8000-00000000000a", "abcdef01" * 4
    )
    assert keyed(fresh) == keyed(CLIENT_IDS_BODY) == GOLDEN_CLIENT_IDS


def test_real_content_still_changes_the_hash_of_a_body_with_client_ids() -> None:
    other_text = tool_turn(
        "call_0123456789abcdef0123456789abcdef",
        "msg_8d0ee7e4-7a8e-4c1a-9b7e-3f1b2c3d4e5f",
        "6F9619FF-8B86-D011-B42D-00C04FC964FF",
        text="weather in Paris?",
    )
    assert keyed(other_text) != GOLDEN_CLIENT_IDS


def test_which_ids_are_the_same_still_counts() -> None:
    # the tool result answers another call than the assistant made: not the same request
    body = tool_turn("call_" + "a" * 32, "msg_" + "b" * 32, "c" * 32)
    crossed = {**body, "messages": [*body["messages"][:2], {**body["messages"][2]}]}
    crossed["messages"][2]["tool_call_id"] = "call_" + "d" * 32
    assert keyed(crossed) != keyed(body)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("call_0123456789abcdef0123456789abcdef", "call_<id:1>"),
        ("toolu_0123456789ABCDEF0123456789ABCDEF", "toolu_<id:1>"),
        ("run-8d0ee7e4-7a8e-4c1a-9b7e-3f1b2c3d4e5f", "run-<id:1>"),
        (
            "session 8d0ee7e47a8e4c1a9b7e3f1b2c3d4e5f, twice: 8D0EE7E4-7A8E-4C1A-9B7E-3F1B2C3D4E5F",
            "session <id:1>, twice: <id:1>",
        ),
        # not ids: all digits, longer hex (a sha1), hex glued to more word characters
        ("1" * 32, "1" * 32),
        ("a" * 40, "a" * 40),
        ("x" + "a" * 32, "x" + "a" * 32),
        ("call_" + "a" * 31, "call_" + "a" * 31),
    ],
)
def test_what_counts_as_a_client_id(text: str, normalised: str) -> None:
    assert normalise_request_body({"v": text}) == {"v": normalised}


def test_client_ids_are_numbered_whatever_the_key_order() -> None:
    # a stored body has sorted keys; `hashreplay rehash` must number as the live request did
    forward = {"a": "msg_" + "1a" * 16, "b": "call_" + "2b" * 16}
    backward = {"b": "call_" + "2b" * 16, "a": "msg_" + "1a" * 16}
    assert normalise_request_body(forward) == normalise_request_body(backward)


def test_client_id_normalisation_is_idempotent() -> None:
    once = normalise_request_body(CLIENT_IDS_BODY)
    assert normalise_request_body(once) == once


class _EveryText(normalise_module._ClientIds):
    """The numbering pass with no gate: every text goes through the id pattern."""

    def value(self, value: Any) -> Any:
        if type(value) is str:
            return self.text(value)
        return super().value(value)


def _every_text_looked_at(body: Any, redactor: Redactor | None = None) -> Any:
    """The body as it would be if every text were looked at for ids, whatever the gates
    (length, memo, "an id was seen") said: the walk, then the numbering pass always."""
    walk = normalise_module._RequestNormaliser(RequestRules(), None, redactor)
    return _EveryText().value(walk.value(body, ()))


UUID = "8d0ee7e4-7a8e-4c1a-9b7e-3f1b2c3d4e5f"
HEX32 = "0123456789abcdef0123456789abcdef"
GATE_CORPUS: list[Any] = [
    CHAT_BODY,
    CLIENT_IDS_BODY,
    {"messages": [{"role": "system", "content": "You are terse. " * 40}], "n": 1.000001},
    {"v": "call_" + HEX32},
    {"v": UUID},
    {"v": UUID.upper()},
    {"v": "msg_" + UUID},
    {"v": "run-" + UUID.replace("-", "")},
    {"v": HEX32.upper()},
    {"v": "1" * 32},  # all digits: not an id
    {"v": "a" * 40},  # a sha1: not an id
    {"v": "x" + HEX32},  # glued to a word: not an id
    {"v": "call_" + HEX32[:31]},  # one digit short
    {"v": f"{'see ' * 20}{UUID} and {UUID.upper()} again"},  # long text: the memo
    {"v": f"short {UUID}"},  # under 64 characters: no memo
    {"ids": [[["call_" + HEX32]], [{"deep": [UUID, 1, None, True, 2.5]}]]},
    {"b": "call_" + "2b" * 16, "a": ["msg_" + "1a" * 16, {"c": UUID}]},
    {"api_key": "call_" + HEX32, "v": "call_" + "e" * 32},  # a secret key's value
    {"v": "x" * 31, "w": "y" * 32, "u": "é" * 40 + HEX32},
    {"v": "shipment 0012345 of deadbee, cafe " * 3},  # hex runs of 7: no id, no pattern
    {"v": "ünïcödé café — " + UUID, "w": "日本語のテキスト " + HEX32},  # after multibyte text
    ["call_" + HEX32, UUID],
    "call_" + HEX32,
    {},
    [],
]


@pytest.mark.parametrize("body", GATE_CORPUS)
@pytest.mark.parametrize("redacted", [False, True], ids=["plain", "redacted"])
def test_the_client_id_gate_never_changes_a_key(body: Any, redacted: bool) -> None:
    # the walk looks at a text for ids only when it is long enough; the numbering pass
    # runs only when one was seen: the key must be what looking at everything gives
    redactor = Redactor() if redacted else None
    gated = normalise_request_body(body, redactor=redactor)
    full = _every_text_looked_at(body, redactor)
    assert gated == full
    key = request_hash("POST", CHAT_ENDPOINT, gated, TEST_ID)
    assert key == request_hash("POST", CHAT_ENDPOINT, full, TEST_ID)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.sampled_from(["hi", "call_" + HEX32, UUID, UUID.upper(), HEX32, "z" * 33, 1, None])
        | st.text(alphabet="0123456789abcdefABCDEF-_x ", max_size=80),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.sampled_from("abcdef"), children, max_size=4)
        ),
    )
)
def test_the_client_id_gate_never_changes_a_key_of_any_body(body: Any) -> None:
    assert normalise_request_body(body) == _every_text_looked_at(body)


# --- properties ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=25,
)


def shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@settings(max_examples=150, deadline=None)
@given(json_values, st.randoms(use_true_random=False))
def test_hash_independent_of_key_order(body: Any, rng: random.Random) -> None:
    reordered = shuffled(body, rng)
    assert request_hash("POST", "/v1/x", body, "t::t") == request_hash(
        "POST", "/v1/x", reordered, "t::t"
    )


@settings(max_examples=100, deadline=None)
@given(json_values, st.text(min_size=1), st.text(min_size=1))
def test_test_id_changes_hash_unless_shared(body: Any, id_a: str, id_b: str) -> None:
    if id_a == id_b:
        id_b = id_a + "x"
    assert request_hash("POST", "/e", body, id_a) != request_hash("POST", "/e", body, id_b)
    assert request_hash("POST", "/e", body, id_a, shared=True) == request_hash(
        "POST", "/e", body, id_b, shared=True
    )


def test_shared_hash_equals_hash_of_any_test_id() -> None:
    assert request_hash("GET", "/v1/models", None, "a", shared=True) == request_hash(
        "GET", "/v1/models", None, None, shared=True
    )


# --- endpoint_of ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8000/v1/chat/completions",
        "https://llm.example.com/v1/chat/completions",
        "https://proxy.internal:8443/v1/chat/completions",
        "http://127.0.0.1/v1/chat/completions",
    ],
)
def test_endpoint_is_path_only(url: str) -> None:
    assert endpoint_of(url) == "/v1/chat/completions"


def test_endpoint_ignores_host_and_port_for_hashing() -> None:
    a = endpoint_of("http://localhost:8000/v1/embeddings")
    b = endpoint_of("https://api.example.com:443/v1/embeddings")
    assert request_hash("POST", a, {"x": 1}, "t") == request_hash("POST", b, {"x": 1}, "t")


def test_endpoint_empty_path_is_slash() -> None:
    assert endpoint_of("http://localhost:8000") == "/"


def test_endpoint_query_sorted() -> None:
    assert endpoint_of("http://h/v1/x?b=2&a=1&c=3") == "/v1/x?a=1&b=2&c=3"
    assert endpoint_of("http://h/v1/x?a=1&b=2") == endpoint_of("http://other/v1/x?b=2&a=1")


def test_endpoint_credentials_removed_with_redactor() -> None:
    redactor = Redactor()
    url = (
        "https://gemini.example.com/v1beta/models/gemini:generateContent?key=AIzaSyD-SECRET&alt=sse"
    )
    assert endpoint_of(url, redactor.is_query_secret) == (
        "/v1beta/models/gemini:generateContent?alt=sse"
    )
    assert endpoint_of(
        "http://h/v1/x?api_key=s1&b=2&Access-Token=s2", redactor.is_query_secret
    ) == ("/v1/x?b=2")
    assert endpoint_of("http://h/v1/x?key=only", redactor.is_query_secret) == "/v1/x"


def test_endpoint_same_for_different_keys() -> None:
    is_secret = Redactor().is_query_secret
    assert endpoint_of("http://h/p?key=one", is_secret) == endpoint_of(
        "http://h/p?key=two", is_secret
    )
    assert endpoint_of("http://h/p?key=one", is_secret) == endpoint_of("http://h/p", is_secret)


def test_endpoint_keeps_credentials_without_predicate() -> None:
    assert endpoint_of("http://h/p?key=abc") == "/p?key=abc"


# --- model lists ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "endpoint"),
    [
        ("GET", "/v1/models"),
        ("get", "/v1/models"),
        ("GET", "/v1/v1/models"),
        ("GET", "/api/tags"),
        ("GET", "/api/ps"),
        ("GET", "/v1beta/models"),
        ("GET", "/v1/models/"),
        ("GET", "/v1/models?limit=20"),
        ("GET", "/openai/v1/models"),
    ],
)
def test_is_model_list_true(method: str, endpoint: str) -> None:
    assert is_model_list(method, endpoint)


@pytest.mark.parametrize(
    ("method", "endpoint"),
    [
        ("POST", "/v1/models"),
        ("GET", "/v1/models/gpt-4"),
        ("GET", "/v1/chat/completions"),
        ("GET", "/v1/mymodels"),
        ("DELETE", "/api/tags"),
        ("GET", "/api/tags/x"),
        ("GET", "/api/show"),
    ],
)
def test_is_model_list_false(method: str, endpoint: str) -> None:
    assert not is_model_list(method, endpoint)


def test_model_list_filename_format() -> None:
    name = model_list_filename(GOLDEN_GET_MODELS, ["gpt-4o", "o3-mini"])
    assert re.fullmatch(rf"models-{GOLDEN_GET_MODELS}-[0-9a-f]{{8}}\.json", name)


def test_model_list_filename_independent_of_id_order() -> None:
    a = model_list_filename("h", ["a", "b", "c"])
    assert model_list_filename("h", ["c", "a", "b"]) == a
    assert model_list_filename("h", ["a", "b"]) != a
    assert model_list_filename("h2", ["a", "b", "c"]) != a


def test_model_ids_openai_shape() -> None:
    body = {
        "object": "list",
        "data": [
            {"id": "o3-mini", "object": "model"},
            {"id": "gpt-4o", "object": "model"},
            {"object": "model"},
        ],
    }
    assert model_ids(body) == ["gpt-4o", "o3-mini"]


def test_model_ids_ollama_shape() -> None:
    body = {
        "models": [
            {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 1},
            {"name": "qwen2.5:0.5b", "model": "qwen2.5:0.5b"},
        ]
    }
    assert model_ids(body) == ["llama3.2:latest", "qwen2.5:0.5b"]


@pytest.mark.parametrize("body", [None, [], "x", {"data": "nope"}, {"other": [{"id": "a"}]}])
def test_model_ids_of_other_shapes_is_empty(body: Any) -> None:
    assert model_ids(body) == []
