"""`hashreplay.core.redact.Redactor`: secrets by key and by value shape (docs/design.md §7, contract)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.key import endpoint_of
from hashreplay.core.redact import Redactor

SECRET = SECRET_PLACEHOLDER
DESIGN_KEYS = [
    "authorization",
    "proxy-authorization",
    "api_key",
    "api-key",
    "x-api-key",
    "x-goog-api-key",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "cookie",
    "set-cookie",
    "secret",
    "client_secret",
    "password",
    "session_key",
]


def variants(key: str) -> list[str]:
    swapped = key.replace("-", "#").replace("_", "-").replace("#", "_")
    return sorted({key, key.upper(), key.title(), swapped, swapped.upper()})


@pytest.mark.parametrize(
    "key", [v for k in DESIGN_KEYS for v in variants(k)], ids=lambda k: f"key={k}"
)
def test_secret_keys_in_nested_dicts_and_lists(key: str) -> None:
    redactor = Redactor()
    body = {
        key: "s3cr3t-value",
        "outer": {"inner": [{key: "s3cr3t-value", "keep": "v"}, {"list": [{key: 42}]}]},
        "plain": "v",
    }
    assert redactor.value(body) == {
        key: SECRET,
        "outer": {"inner": [{key: SECRET, "keep": "v"}, {"list": [{key: SECRET}]}]},
        "plain": "v",
    }


def test_secret_key_with_structured_value_is_removed_whole() -> None:
    out = Redactor().value({"Authorization": {"scheme": "basic", "v": "x"}})
    assert out == {"Authorization": SECRET}


def test_extra_keys() -> None:
    redactor = Redactor(extra_keys=["X-Internal-Auth", "license"])
    body = {"x_internal_auth": "a", "X-INTERNAL-AUTH": "b", "nested": [{"License": "c"}]}
    assert redactor.value(body) == {
        "x_internal_auth": SECRET,
        "X-INTERNAL-AUTH": SECRET,
        "nested": [{"License": SECRET}],
    }
    assert Redactor().value(body) == body


@pytest.mark.parametrize(
    "secret",
    [
        "Bearer abcdefghijklmnop1234",
        "bearer eyJhbGciOi.abc-def_ghi",
        "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234567890",
        "sk-abcdefghijklmnopqrstuvwxyz123456",
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz-0123456789_abcdefg",
        "AIza" + "SyD4xQ9m1Pz7Lk3JvN8bW2cR5tY6uI0oE1a",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P",
        "gsk_abcdefghijklmnopqrstuvwxyz",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "hf_abcdefghijklmnopqrstuvwxyzABCDEF",
        "AKIAABCDEFGHIJKLMNOP",
    ],
)
def test_secret_shapes_in_free_text(secret: str) -> None:
    redactor = Redactor()
    text = f"failed with {secret} (see logs)"
    out = redactor.text(text)
    assert secret not in out
    assert out == f"failed with {SECRET} (see logs)"
    assert redactor.value({"message": text, "list": [secret]}) == {
        "message": out,
        "list": [SECRET],
    }


def test_google_key_needs_39_chars() -> None:
    key = "AIza" + "x" * 35
    assert len(key) == 39
    assert Redactor().text(key) == SECRET


@pytest.mark.parametrize(
    "text",
    [
        "sk-short",
        "task-1234567890abcdefghij",
        "a Bearer of news",
        "Hello world",
        "the token was invalid",
        "desk-abcdefghijklmnopqrstuvwxyz",
    ],
)
def test_ordinary_text_not_redacted(text: str) -> None:
    assert Redactor().text(text) == text


def test_query_credentials_in_text() -> None:
    redactor = Redactor()
    text = "GET https://h/v1?key=AbC123&alt=sse&api_key=zz9&limit=5 failed"
    assert redactor.text(text) == (
        f"GET https://h/v1?key={SECRET}&alt=sse&api_key={SECRET}&limit=5 failed"
    )


def test_url_query_credentials_replaced_others_kept() -> None:
    redactor = Redactor()
    out = redactor.url("https://h/v1beta/models/g:generateContent?key=AbC123&alt=sse")
    assert "AbC123" not in out
    assert out == f"https://h/v1beta/models/g:generateContent?key={SECRET}&alt=sse"


def test_url_api_key_in_second_param() -> None:
    out = Redactor().url("https://h/v1/x?limit=5&api_key=zz9")
    assert out == f"https://h/v1/x?limit=5&api_key={SECRET}"


def test_url_userinfo_password() -> None:
    out = Redactor().url("https://user:hunter2@db.example.com:5432/v1/x")
    assert "hunter2" not in out
    # The redacted URL is still a URL (it is stored and parsed again, e.g. by a rehash).
    parts = urlsplit(out)
    assert (parts.scheme, parts.path) == ("https", "/v1/x")
    assert (parts.username, parts.hostname, parts.port) == ("user", "db.example.com", 5432)
    assert unquote(parts.password or "") == SECRET
    assert endpoint_of(out) == "/v1/x"


def test_url_user_without_password_kept() -> None:
    url = "https://user@h/v1/x"
    assert Redactor().url(url) == url


def test_url_without_secrets_unchanged() -> None:
    url = "https://llm.example.com/v1/chat/completions?limit=5&order=asc"
    assert Redactor().url(url) == url


def test_headers() -> None:
    redactor = Redactor()
    headers = [
        ("Authorization", "Bearer sk-abcdefghijklmnopqrstuvwx"),
        ("x-api-key", "anything"),
        ("X-Goog-Api-Key", "AIza-whatever"),
        ("Cookie", "session=1"),
        ("Content-Type", "application/json"),
        ("X-Debug", "token Bearer abcdefghijklmnop"),
    ]
    assert [(name, redactor.header(name, value)) for name, value in headers] == [
        ("Authorization", SECRET),
        ("x-api-key", SECRET),
        ("X-Goog-Api-Key", SECRET),
        ("Cookie", SECRET),
        ("Content-Type", "application/json"),
        ("X-Debug", f"token {SECRET}"),
    ]


@pytest.mark.parametrize("logprob_key", ["logprob", "logprobs"])
def test_logprob_tokens_not_redacted(logprob_key: str) -> None:
    body = {
        "choices": [
            {
                "logprobs": {
                    "content": [
                        {"token": " Hello", logprob_key: -0.1, "bytes": [32, 72]},
                        {"token": "!", logprob_key: -2.5, "top_logprobs": []},
                    ]
                }
            }
        ]
    }
    assert Redactor().value(body) == body


def test_token_without_logprob_is_redacted() -> None:
    assert Redactor().value({"token": " Hello"}) == {"token": SECRET}


@pytest.mark.parametrize("key", ["api_key", "Authorization", "password", "token"])
def test_null_under_secret_key_stays_null(key: str) -> None:
    assert Redactor().value({key: None, "n": [{key: None}]}) == {key: None, "n": [{key: None}]}


def test_value_does_not_mutate_input() -> None:
    body = {"api_key": "x", "m": ["Bearer abcdefghijklmnop"]}
    Redactor().value(body)
    assert body == {"api_key": "x", "m": ["Bearer abcdefghijklmnop"]}


def test_non_string_values_kept() -> None:
    body = {"n": 1, "f": 1.5, "b": True, "z": None, "l": [1, 2]}
    assert Redactor().value(body) == body


# --- idempotence ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {"api_key": "x", "msg": "Bearer abcdefghijklmnop"},
        "see https://h/v1?key=AbC123&alt=sse",
        "https://h/v1?api_key=zz9",
        {"url": "https://h/v1?key=abc", "log": "GET /v1?token=abc&x=1 -> 401"},
        "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234567890",
    ],
)
def test_value_redaction_is_idempotent(value: Any) -> None:
    redactor = Redactor()
    once = redactor.value(value)
    assert redactor.value(once) == once


@pytest.mark.parametrize(
    "url",
    [
        "https://h/v1?key=AbC123&alt=sse",
        "https://user:pw@h/v1?api_key=zz9",
        "https://h/v1?limit=1",
    ],
)
def test_url_redaction_is_idempotent(url: str) -> None:
    redactor = Redactor()
    once = redactor.url(url)
    assert redactor.url(once) == once
    assert redactor.text(once) == once


# --- property: a secret never survives ------------------------------------------------------

secret_values = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    min_size=24,
    max_size=48,
).map(lambda s: "sk-" + s)
plain_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(
    lambda k: not Redactor().is_secret_key(k)
)
filler = st.text(max_size=12)
json_trees = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(plain_keys, children, max_size=4)
    ),
    max_leaves=15,
)


@st.composite
def with_secret(draw: st.DrawFn) -> tuple[Any, str]:
    secret = draw(secret_values)
    how = draw(st.sampled_from(["value", "in_text", "secret_key", "bearer", "query"]))
    if how == "value":
        leaf: Any = secret
        key = draw(plain_keys)
    elif how == "in_text":
        leaf = f"{draw(filler)} {secret} {draw(filler)}"
        key = draw(plain_keys)
    elif how == "bearer":
        leaf = f"{draw(filler)} Bearer {secret}"
        key = draw(plain_keys)
    elif how == "query":
        leaf = f"{draw(filler)} https://h/v1?api_key={secret}&x=1"
        key = draw(plain_keys)
    else:
        leaf = secret
        key = draw(st.sampled_from(DESIGN_KEYS))
    tree = draw(json_trees)
    # Walk down a random path of the tree and put {key: leaf} there.
    node: Any = {"root": tree}
    container, slot = node, "root"
    while True:
        child = container[slot]
        if isinstance(child, dict) and child and draw(st.booleans()):
            slot = draw(st.sampled_from(sorted(child)))
            container = child
        elif isinstance(child, list) and child and draw(st.booleans()):
            slot = draw(st.integers(0, len(child) - 1))
            container = child
        else:
            break
    container[slot] = {key: leaf, "other": container[slot]}
    return node, secret


@settings(max_examples=200, deadline=None)
@given(with_secret())
def test_secret_never_survives_redaction(case: tuple[Any, str]) -> None:
    obj, secret = case
    redactor = Redactor()
    out = redactor.value(obj)
    assert secret.encode() not in orjson.dumps(out)


@settings(max_examples=100, deadline=None)
@given(with_secret())
def test_redaction_of_secrets_is_idempotent(case: tuple[Any, str]) -> None:
    obj, _ = case
    redactor = Redactor()
    once = redactor.value(obj)
    assert redactor.value(once) == once


@settings(max_examples=150, deadline=None)
@given(json_trees)
def test_redaction_without_secrets_changes_nothing_and_is_idempotent(tree: Any) -> None:
    redactor = Redactor()
    once = redactor.value(tree)
    assert redactor.value(once) == once
