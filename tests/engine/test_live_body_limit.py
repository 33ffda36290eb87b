"""`LiveBody` keeps a live body within `max_body_bytes` while it arrives (docs/design.md,
"Bodies are limited as they arrive"): past the limit it drops what it kept, raises
`BodyTooLarge`, tells its test, and hands back no exchange to record."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from pathlib import Path

import httpx
import pytest

from hashreplay import BodyTooLarge, Mode, test_context
from hashreplay.core.config import load_config
from hashreplay.engine.http import BodyLimit, IncomingRequest, LiveBody
from hashreplay.engine.session import Session
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream, Scripted

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


#: a compressed chunk that inflates to 64 MiB (about 64 KiB on the wire)
BOMB = 64 * 1024 * 1024


def _bomb(coding: str) -> bytes:
    zeros = b"\0" * BOMB
    if coding == "gzip":
        return gzip.compress(zeros, compresslevel=9)
    if coding == "deflate":
        return zlib.compress(zeros, 9)
    brotli = pytest.importorskip("brotli")
    return bytes(brotli.compress(zeros, quality=5))


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br"])
def test_a_compressed_bomb_chunk_fails_at_the_limit_without_inflating_whole(
    recorder: Recorder, upstream: FakeUpstream, coding: str
) -> None:
    """One small live chunk that inflates hugely is inflated piece by piece against
    `max_body_bytes`: memory stays near the limit, far under the bomb's size."""
    frame = _bomb(coding)
    upstream.script(
        "POST",
        "/v1/chat/completions",
        Scripted(
            frames=[frame],
            headers={"content-type": "text/event-stream", "content-encoding": coding},
        ),
    )
    limit = 1024 * 1024
    recorder.start(Mode.RECORD, max_body_bytes=limit)
    tracemalloc.start()
    try:
        with (
            test_context(TEST),
            httpx.Client() as client,
            client.stream("POST", f"{upstream.url}/v1/chat/completions", json={}) as r,
            pytest.raises(BodyTooLarge, match=r"passed max_body_bytes \(1048576\)"),
        ):
            for _ in r.iter_raw():  # the wire's bytes: only the recorder inflates them
                pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(frame) < limit  # the wire bytes alone would pass
    assert peak < 8 * 1024 * 1024, peak  # vs 64 MiB inflated whole
    assert recorder.files() == []
