"""`hashreplay.core.redact.Redactor`: secrets by key and by value shape (docs/design.md §7, contract)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.redact import Redactor
from hashreplay.core.urls import endpoint_of

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
    how = draw(st.sampled_from(["value", "in_text", "glued", "secret_key", "bearer", "query"]))
    if how == "glued":  # no word boundary before the key: `/_sk-…`, `é_sk-…`, `ésk-…`
        glue = draw(st.sampled_from(["_", "/_", "é_", "é", "(", "-", "__", ".", "ß_"]))
        leaf = f"{draw(filler)}{glue}{secret}{draw(filler)}"
        key = draw(plain_keys)
    elif how == "value":
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


# --- more names and shapes: signatures, JWTs, lists of secrets, DSNs, OAuth codes ----------


@pytest.mark.parametrize(
    "key",
    ["signature", "X-Amz-Signature", "x_amz_signature", "jwt", "userJwt", "bearer", "secrets",
     "client_secrets", "thoughtSignature", "db_passwords"],
)  # fmt: skip
def test_more_secret_key_names(key: str) -> None:
    assert Redactor().value({key: "value-1234", "n": 1}) == {key: SECRET, "n": 1}


def test_a_list_under_secrets_loses_every_element() -> None:
    out = Redactor().value({"secrets": ["alpha-secret", "beta-secret"], "names": ["a", "b"]})
    assert out == {"secrets": SECRET, "names": ["a", "b"]}
    assert b"alpha-secret" not in orjson.dumps(out) and b"beta-secret" not in orjson.dumps(out)


@pytest.mark.parametrize(
    "key",
    ["max_tokens", "key_version", "tokens", "prompt_tokens", "signature_count", "code",
     "progressToken"],
)  # fmt: skip
def test_counts_versions_and_codes_stay(key: str) -> None:
    assert Redactor().value({key: 7}) == {key: 7}
    assert Redactor().value({key: "E42"}) == {key: "E42"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgres://bob:hunter2pass@db:5432/app", f"postgres://bob:{SECRET}@db:5432/app"),
        (
            "connect redis://:s3cret@cache:6379 failed",
            f"connect redis://:{SECRET}@cache:6379 failed",
        ),
        ("amqp+ssl://u:p%40ss@mq/vhost", f"amqp+ssl://u:{SECRET}@mq/vhost"),
        ("see https://example.com:8080/a@b", "see https://example.com:8080/a@b"),
        ("mailto user@example.com", "mailto user@example.com"),
    ],
)
def test_dsn_passwords_anywhere_in_text(text: str, expected: str) -> None:
    redactor = Redactor()
    assert redactor.text(text) == expected
    assert redactor.value({"note": text}) == {"note": expected}
    assert redactor.text(expected) == expected  # idempotent


def test_oauth_code_in_a_token_request_form_or_json() -> None:
    redactor = Redactor()
    form = {
        "grant_type": "authorization_code",
        "code": "SplxlOBeZQQYbYS6WxSbIA",
        "code_verifier": "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
        "redirect_uri": "https://client.example.com/cb",
    }
    assert redactor.value(form) == {
        "grant_type": "authorization_code",
        "code": SECRET,
        "code_verifier": SECRET,
        "redirect_uri": "https://client.example.com/cb",
    }
    # without a grant, `code` is an error code or a language's source, and stays
    assert redactor.value({"error": {"code": "invalid_api_key"}}) == {
        "error": {"code": "invalid_api_key"}
    }


def test_oauth_code_in_a_form_request_body_leaves_the_hash() -> None:
    from hashreplay.core.bodies import encode_request_body
    from hashreplay.core.normalise import normalise_request_body

    redactor = Redactor()
    bodies = []
    for code in ("first-code-123456", "second-code-654321"):
        raw, _ = encode_request_body(
            f"grant_type=authorization_code&code={code}&client_id=app".encode(),
            "application/x-www-form-urlencoded",
        )
        bodies.append(normalise_request_body(raw, None, None, redactor))
    assert (
        bodies[0]
        == bodies[1]
        == {
            "grant_type": "authorization_code",
            "code": SECRET,
            "client_id": "app",
        }
    )


@pytest.mark.parametrize(
    "text",
    [
        "https://generativelanguage.example/v1/x?key=AIza" + "b" * 80,
        "error: invalid key=" + "A" * 300 + "== (check it)",
        "api_key=" + "k" * 40 + "." + "t" * 200,
        "see ?api_key=" + "x" * 50 + "%2F" + "y" * 400,
        "token: " + "Zz9" * 100,
        "AIza" + "c" * 120,
    ],
)
def test_an_over_long_key_value_is_removed_to_its_last_character(text: str) -> None:
    out = Redactor().text(text)
    assert SECRET in out
    for tail in ("b" * 10, "A" * 10, "t" * 10, "y" * 10, "Zz9" * 4, "c" * 10):
        assert tail not in out, out
    assert Redactor().text(out) == out


@pytest.mark.parametrize(
    "text",
    ["sort(key=len)", "max_tokens=1234567890123456789", "time: 2024-01-01T00:00:00.000Z",
     "https://example.com/a/b/c/d/e/f/g/h", "key: short"],
)  # fmt: skip
def test_ordinary_assignments_in_text_stay(text: str) -> None:
    assert Redactor().text(text) == text


def test_no_secret_shape_matches_a_text_shorter_than_the_length_the_scan_skips() -> None:
    # the scan skips texts shorter than SHAPE_MIN_LENGTH: no shape may match one
    import importlib

    from hashreplay.core.redact import SECRET_SHAPES, SHAPE_MIN_LENGTH

    try:  # the regex parser: re._parser since Python 3.11, sre_parse before
        parser = importlib.import_module("re._parser")
    except ImportError:
        parser = importlib.import_module("sre_parse")
    shortest = min(parser.parse(shape).getwidth()[0] for shape in SECRET_SHAPES)
    assert shortest == SHAPE_MIN_LENGTH


words = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=1
)


@settings(max_examples=200, deadline=None)
@given(words, st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_", min_size=16, max_size=40))
def test_a_shape_inside_a_word_is_not_a_key(before: str, tail: str) -> None:
    # a letter or digit right before `sk-`, `Bearer`, `ghp_`…: a word (`task-…`, `desk-…`)
    for text in (f"{before}sk-{tail}", f"{before}Bearer {tail}", f"{before}ghp_{tail}"):
        assert Redactor().text(text) == text


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens", "key_version", "task"])
def test_ordinary_keys_with_shaped_neighbours_stay(key: str) -> None:
    body = {key: 5, "note": "task-management-overview-document", "ask": "desk-abcdefghijklmnop"}
    assert Redactor().value(body) == body
