"""LiveBody: how every front end keeps a live response body for its recording."""

from __future__ import annotations

import gzip

import pytest

from hashreplay.engine.http import LiveBody

JSON = [("content-type", "application/json")]


def test_gzip_is_decoded_and_its_header_dropped() -> None:
    packed = gzip.compress(b'{"a": 1}')
    body = LiveBody(200, [*JSON, ("content-encoding", "gzip"), ("content-length", "20")])
    out = body.feed(packed[:10]) + body.feed(packed[10:]) + body.tail()
    assert out == b'{"a": 1}'
    assert body.decodes
    exchange = body.exchange(None)
    assert exchange is not None
    assert b"".join(exchange.chunks) == b'{"a": 1}'
    assert ("content-encoding", "gzip") not in exchange.headers
    assert exchange.chunked is False
    assert body.exchange(None) is None  # taken once


def test_an_undecodable_coding_is_kept_as_it_came() -> None:
    body = LiveBody(200, [*JSON, ("content-encoding", "zz-unknown")])
    assert body.feed(b"\x01\x02") == b"\x01\x02"
    assert not body.decodes
    exchange = body.exchange(None)
    assert exchange is not None
    assert ("content-encoding", "zz-unknown") in exchange.headers
    assert exchange.chunked is True


def test_identity_is_not_a_decoding() -> None:
    body = LiveBody(200, [*JSON, ("content-encoding", "identity")])
    assert body.feed(b"x") == b"x"
    assert not body.decodes


def test_corrupt_and_truncated_bodies_are_value_errors() -> None:
    body = LiveBody(200, [*JSON, ("content-encoding", "gzip")])
    with pytest.raises(ValueError, match="cannot decode the response's content-encoding"):
        body.feed(b"not gzip at all")
    truncated = LiveBody(200, [*JSON, ("content-encoding", "gzip")])
    truncated.feed(gzip.compress(b"x" * 1000)[:-8])
    assert truncated.tail() == b""  # zlib keeps quiet about a missing trailer
    deflated = LiveBody(200, [*JSON, ("content-encoding", "br")])
    if deflated.decoder is not None:  # brotli is in the dev extra
        with pytest.raises(ValueError):
            deflated.feed(b"\xff\xff\xff\xff")


def test_keep_false_passes_bytes_without_keeping_them() -> None:
    body = LiveBody(200, JSON, keep=False)
    assert body.feed(b"abc") == b"abc"
    exchange = body.exchange(None)
    assert exchange is not None and exchange.chunks == []
