"""Redaction by key (docs/design.md §7): secret field names in multipart bodies and compound key names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.core.config import load_config
from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.redact import Redactor, is_compound_secret
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session

SECRET = SECRET_PLACEHOLDER
TEST = "tests/test_upload.py::test_it"


def multipart_body(fields: dict[str, str], boundary: str = "b0undary") -> tuple[bytes, str]:
    out = b""
    for name, value in fields.items():
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        ).encode()
    out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize("field", ["token", "api_key", "password", "client_secret", "apiToken"])
def test_multipart_secret_fields_are_not_written(tmp_path: Path, field: str) -> None:
    planted = "plain-credential-value-1234"
    content, content_type = multipart_body({"model": "whisper-1", field: planted})
    session = Session(load_config(tmp_path, env={}, mode="record"))
    session.begin_test(TEST)
    prep = session.prepare(
        IncomingRequest(
            "POST", "http://127.0.0.1:9/v1/upload", [("content-type", content_type)], content
        ),
        test_id=TEST,
    )
    path = session.record(prep, LiveExchange(200, [("content-type", "application/json")], [b"{}"]))
    written = path.read_text()
    assert planted not in written
    parts = json.loads(written)["request"]["body"]
    assert parts == [{"name": "model", "data": "whisper-1"}, {"name": field, "data": SECRET}]


def test_multipart_with_another_key_hashes_the_same(tmp_path: Path) -> None:
    session = Session(load_config(tmp_path, env={}, mode="record"))
    hashes = set()
    for key in ("first-key-aaaaaaaa", "second-key-bbbbbbbb"):
        content, content_type = multipart_body({"model": "m", "api_key": key})
        incoming = IncomingRequest(
            "POST", "http://h/v1/x", [("content-type", content_type)], content
        )
        hashes.add(session.prepare(incoming, test_id=TEST).hash)
    assert len(hashes) == 1


SECRET_NAMES = [
    "auth_token",
    "apiToken",
    "private_key",
    "credentials",
    "passwd",
    "secret_key",
    "session_token",
    "aws_secret_access_key",
    "x-amz-security-token",
    "X-Amz-Security-Token",
    "db_password",
    "clientSecret",
    "AWS_SESSION_TOKEN",
    "bearerToken",
    "github-token",
    "signingKey",
]
ORDINARY_NAMES = [
    "max_tokens",
    "prompt_tokens",
    "completion_tokens",
    "key_version",
    "tokens",
    "max_completion_tokens",
    "eos_token",
    "next_page_token",
    "progressToken",
    "cache_key",
    "idempotency_key",
    "keys",
    "token_count",
    "tokenizer",
    "model",
    "monkey",
    "keyboard",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_compound_secret_names_are_redacted(name: str) -> None:
    assert Redactor().value({name: "v", "keep": "k"}) == {name: SECRET, "keep": "k"}


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_are_kept(name: str) -> None:
    assert Redactor().value({name: 12}) == {name: 12}


# --- the property: any spelling of a secret name is redacted, any ordinary one kept -----------

_PREFIXES = ["", "x", "aws", "my", "openai", "db", "service", "github", "user"]
_SECRET_TAILS = [
    ["auth", "token"],
    ["api", "token"],
    ["session", "token"],
    ["security", "token"],
    ["access", "token"],
    ["private", "key"],
    ["secret", "key"],
    ["secret", "access", "key"],
    ["api", "key"],
    ["password"],
    ["passwd"],
    ["credentials"],
    ["client", "secret"],
]
_ORDINARY_TAILS = [
    ["max", "tokens"],
    ["prompt", "tokens"],
    ["tokens"],
    ["key", "version"],
    ["token", "count"],
    ["eos", "token"],
    ["next", "page", "token"],
    ["cache", "key"],
    ["sort", "key"],
    ["model"],
    ["temperature"],
    ["keys"],
]


def spell(words: list[str], style: str) -> str:
    if style == "snake":
        return "_".join(words)
    if style == "kebab":
        return "-".join(words)
    if style == "upper":
        return "_".join(words).upper()
    if style == "title-kebab":
        return "-".join(w.title() for w in words)
    return words[0] + "".join(w.title() for w in words[1:])  # camel


_STYLES = st.sampled_from(["snake", "kebab", "upper", "title-kebab", "camel"])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_PREFIXES), st.sampled_from(_SECRET_TAILS), _STYLES)
def test_property_every_spelling_of_a_secret_name_is_redacted(
    prefix: str, tail: list[str], style: str
) -> None:
    name = spell([w for w in [prefix, *tail] if w], style)
    body = {"outer": [{name: "planted-value"}]}
    assert "planted-value" not in json.dumps(Redactor().value(body)), name


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_PREFIXES), st.sampled_from(_ORDINARY_TAILS), _STYLES)
def test_property_ordinary_names_are_kept(prefix: str, tail: list[str], style: str) -> None:
    name = spell([w for w in [prefix, *tail] if w], style)
    assert not is_compound_secret(name), name
    assert Redactor().value({name: 7}) == {name: 7}, name
