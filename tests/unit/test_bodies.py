"""`hashreplay.core.bodies`: bodies to and from their stored form; forms and multipart parsed."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.core.bodies import BodyEncoding, decode_body, encode_body, encode_request_body
from hashreplay.core.hashing import request_hash
from hashreplay.core.normalise import normalise_request_body

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"


@pytest.mark.parametrize(
    ("content", "content_type", "body", "encoding"),
    [
        (b'{"a": 1, "b": [true, null]}', "application/json", {"a": 1, "b": [True, None]}, "json"),
        (b'{"a":1}', "application/json; charset=utf-8", {"a": 1}, "json"),
        (b'{"a":1}', "application/vnd.api+json", {"a": 1}, "json"),
        (b"[1,2]", None, [1, 2], "json"),
        (b"null", "application/json", None, "json"),
        (b"hello w\xc3\xb6rld", "text/plain", "hello wörld", "text"),
        (b"{not json", "application/json", "{not json", "text"),
        (b"<html></html>", "text/html", "<html></html>", "text"),
        (b"", "application/json", None, "empty"),
        (b"", None, None, "empty"),
        (PNG, "image/png", base64.b64encode(PNG).decode(), "base64"),
        (b"plain ascii", "application/octet-stream", "cGxhaW4gYXNjaWk=", "base64"),
        (b"\xff\xfe\x00\x01", None, "//4AAQ==", "base64"),
        (b"\xff\xfe\x00\x01", "text/plain", "//4AAQ==", "base64"),
    ],
)
def test_encode_body(content: bytes, content_type: str | None, body: Any, encoding: str) -> None:
    stored, got_encoding = encode_body(content, content_type)
    assert got_encoding is BodyEncoding(encoding)
    assert stored == body


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"hello w\xc3\xb6rld", "text/plain"),
        (b"{not json", "application/json"),
        (b"", "application/json"),
        (b"", None),
        (PNG, "image/png"),
        (b"plain ascii", "application/octet-stream"),
        (b"\xff\xfe\x00\x01", None),
    ],
)
def test_non_json_bodies_round_trip_byte_exact(content: bytes, content_type: str | None) -> None:
    assert decode_body(*encode_body(content, content_type)) == content


@pytest.mark.parametrize(
    "content",
    [
        b'{"a": 1, "b": [true, null], "c": "x\\u00e9"}',
        b"null",
        b"[]",
        b'{"big": 1180591620717411303425, "neg": -1180591620717411303425}',
        b'{"f": 0.1, "e": 1e-7}',
    ],
)
def test_json_bodies_round_trip_by_value(content: bytes) -> None:
    decoded = decode_body(*encode_body(content, "application/json"))
    assert json.loads(decoded) == json.loads(content)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=128), st.sampled_from([None, "text/plain", "application/octet-stream"]))
def test_binary_and_text_round_trip_property(content: bytes, content_type: str | None) -> None:
    stored, encoding = encode_body(content, content_type)
    if encoding is BodyEncoding.JSON:
        assert json.loads(decode_body(stored, encoding)) == json.loads(content)
    else:
        assert decode_body(stored, encoding) == content


def test_decode_none_text_is_empty() -> None:
    assert decode_body(None, BodyEncoding.TEXT) == b""
    assert decode_body(None, BodyEncoding.EMPTY) == b""


@pytest.mark.parametrize("encoding", [BodyEncoding.FORM, BodyEncoding.MULTIPART])
def test_decode_request_only_encodings_refused(encoding: BodyEncoding) -> None:
    with pytest.raises(ValueError, match=encoding.value):
        decode_body({"a": "b"}, encoding)


# --- request bodies ------------------------------------------------------------------------


def test_form_urlencoded_to_dict() -> None:
    body, encoding = encode_request_body(
        b"grant_type=client_credentials&scope=a+b&tag=x&tag=y&tag=z&empty=",
        "application/x-www-form-urlencoded",
    )
    assert encoding is BodyEncoding.FORM
    assert body == {
        "grant_type": "client_credentials",
        "scope": "a b",
        "tag": ["x", "y", "z"],
        "empty": "",
    }


def test_form_field_order_does_not_change_the_hash() -> None:
    a, _ = encode_request_body(b"a=1&b=2", "application/x-www-form-urlencoded")
    b, _ = encode_request_body(b"b=2&a=1", "application/x-www-form-urlencoded")
    assert request_hash("POST", "/t", a, "t") == request_hash("POST", "/t", b, "t")


def test_invalid_form_falls_back() -> None:
    body, encoding = encode_request_body(b"\xff\xfe", "application/x-www-form-urlencoded")
    assert encoding is BodyEncoding.BASE64
    assert body == "//4="


def test_request_json_body() -> None:
    assert encode_request_body(b'{"model": "m"}', "application/json") == (
        {"model": "m"},
        BodyEncoding.JSON,
    )
    assert encode_request_body(b"", None) == (None, BodyEncoding.EMPTY)


def multipart(boundary: str) -> tuple[bytes, str]:
    b = boundary.encode()
    content = (
        b"--" + b + b"\r\n"
        b'Content-Disposition: form-data; name="model"\r\n\r\n'
        b"whisper-1\r\n"
        b"--" + b + b"\r\n"
        b'Content-Disposition: form-data; name="file"; filename="a.png"\r\n'
        b"Content-Type: image/png\r\n\r\n" + PNG + b"\r\n"
        b"--" + b + b"\r\n"
        b'Content-Disposition: form-data; name="meta"\r\n'
        b"Content-Type: application/json\r\n\r\n"
        b'{"k": 1}\r\n'
        b"--" + b + b"--\r\n"
    )
    return content, f"multipart/form-data; boundary={boundary}"


def test_multipart_parsed_into_parts() -> None:
    body, encoding = encode_request_body(*multipart("abc123"))
    assert encoding is BodyEncoding.MULTIPART
    assert body == [
        {"name": "model", "data": "whisper-1"},
        {
            "name": "file",
            "filename": "a.png",
            "content_type": "image/png",
            "data": base64.b64encode(PNG).decode(),
            "data_encoding": "base64",
        },
        {"name": "meta", "content_type": "application/json", "data": {"k": 1}},
    ]


def test_multipart_random_boundaries_give_identical_parts_and_hash() -> None:
    a, enc_a = encode_request_body(*multipart("----boundaryAAAA1111"))
    b, enc_b = encode_request_body(*multipart("d3b07384d113edec49eaa6238ad5ff00"))
    assert enc_a is enc_b is BodyEncoding.MULTIPART
    assert a == b
    na, nb = normalise_request_body(a), normalise_request_body(b)
    assert request_hash("POST", "/v1/audio/transcriptions", na, "t") == request_hash(
        "POST", "/v1/audio/transcriptions", nb, "t"
    )


def test_multipart_quoted_boundary() -> None:
    content, _ = multipart("xyz")
    body, encoding = encode_request_body(content, 'multipart/form-data; boundary="xyz"')
    assert encoding is BodyEncoding.MULTIPART
    assert body == encode_request_body(*multipart("xyz"))[0]


def test_multipart_without_boundary_falls_back() -> None:
    content, _ = multipart("xyz")
    _, encoding = encode_request_body(content, "multipart/form-data")
    assert encoding is not BodyEncoding.MULTIPART
