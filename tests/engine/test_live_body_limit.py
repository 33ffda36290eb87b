"""`LiveBody` keeps a live body within `max_body_bytes` while it arrives (docs/design.md,
"Bodies are limited as they arrive"): past the limit it drops what it kept, raises
`BodyTooLarge`, tells its test, and hands back no exchange to record."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from hashreplay import BodyTooLarge, Mode
from hashreplay.core.config import load_config
from hashreplay.engine.http import BodyLimit, IncomingRequest, LiveBody
from hashreplay.engine.session import Session

TEST = "tests/test_x.py::test_y"
SSE = [("content-type", "text/event-stream")]


def test_a_body_within_the_limit_is_kept_whole() -> None:
    told: list[BodyTooLarge] = []
    body = LiveBody(200, SSE, limit=BodyLimit(10, TEST, "http://h/x", told.append))
    body.feed(b"12345")
    body.feed(b"67890")
    exchange = body.exchange(None)
    assert exchange is not None
    assert exchange.chunks == [b"12345", b"67890"]
    assert told == []


def test_past_the_limit_nothing_is_kept_the_error_is_raised_and_told() -> None:
    told: list[BodyTooLarge] = []
    body = LiveBody(200, SSE, limit=BodyLimit(10, TEST, "http://h/x", told.append))
    body.feed(b"123456")
    with pytest.raises(
        BodyTooLarge, match=r"passed max_body_bytes \(10\) while it arrived"
    ) as info:
        body.feed(b"7890ab")
    assert told == [info.value]
    assert info.value.test_id == TEST
    assert info.value.size == 12
    assert body.chunks == []
    assert body.feed(b"more") == b"more"  # the client may read on; nothing is kept
    assert body.chunks == []
    assert body.exchange(info.value) is None


def test_decoded_bytes_are_what_counts() -> None:
    told: list[BodyTooLarge] = []
    raw = gzip.compress(b"x" * 5000)
    headers = [*SSE, ("content-encoding", "gzip")]
    body = LiveBody(200, headers, limit=BodyLimit(4096, TEST, "http://h/x", told.append))
    with pytest.raises(BodyTooLarge):
        body.feed(raw)
    assert len(raw) < 4096  # the wire bytes alone would pass
    assert len(told) == 1


def test_the_session_fails_the_test_even_if_the_error_is_swallowed(tmp_path: Path) -> None:
    session = Session(load_config(tmp_path, env={}, mode=Mode.RECORD.value, max_body_bytes=8))
    session.begin_test(TEST)
    prep = session.prepare(IncomingRequest("GET", "http://h/v1/x", [], b""), test_id=TEST)
    body = session.live_body(prep, 200, SSE)
    with pytest.raises(BodyTooLarge):
        body.feed(b"0123456789")
    (failure,) = session.end_test(TEST)
    assert "max_body_bytes (8)" in failure.report
    assert TEST in failure.report
    assert "[tool.hashreplay]" in failure.report
