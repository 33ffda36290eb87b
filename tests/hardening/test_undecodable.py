"""Undecodable bodies: an undecodable body in a recording is a RecordingError naming the file,
counted as a miss of that test even when the code under test catches it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from hashreplay import Mode, RecordingError, test_context
from hashreplay.core.config import load_config
from hashreplay.core.store import parse_recording
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session
from tests.conftest import Recorder

TEST = "tests/test_blob.py::test_download"
URL = "http://127.0.0.1:9/v1/files/abc/content"


def record_binary(root: Path) -> Path:
    session = Session(load_config(root, env={}, mode="record"))
    session.begin_test(TEST)
    prep = session.prepare(IncomingRequest("GET", URL, [], b""), test_id=TEST)
    exchange = LiveExchange(200, [("content-type", "application/octet-stream")], [b"\x00\xff\x10"])
    return session.record(prep, exchange)


def tamper(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


BREAKAGES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "bad base64": (
        lambda d: d["response"].update(body="!!not base64!!"),
        "response.body: invalid base64 data",
    ),
    "form as a response": (
        lambda d: d["response"].update(body_encoding="form", body={"a": "b"}),
        "response.body: a response body cannot have body_encoding 'form'",
    ),
    "broken multipart request": (
        lambda d: d["request"].update(body_encoding="multipart", body="--xx"),
        "request.body: a multipart body must be a list of parts",
    ),
    "bad base64 chunk": (
        lambda d: d["response"].update(
            is_streaming=True, stream_format="chunks", body=["ok", {"base64": "%%%"}]
        ),
        "response.body[1].base64: invalid base64 data",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_reading_names_the_file_and_the_field(tmp_path: Path, case: str) -> None:
    path = record_binary(tmp_path)
    change, problem = BREAKAGES[case]
    tamper(path, change)
    with pytest.raises(RecordingError) as info:
        parse_recording(path.read_bytes(), path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)
    assert str(info.value).endswith("re-record it")


def test_an_undecodable_body_is_a_miss_even_when_the_test_catches_it(
    tmp_path: Path, recorder: Recorder
) -> None:
    path = record_binary(tmp_path)
    tamper(path, lambda d: d["response"].update(body="!!not base64!!"))
    session = recorder.start(Mode.REPLAY)
    session.begin_test(TEST)
    # the code under test swallows every error
    with test_context(TEST), contextlib.suppress(Exception):
        httpx.get(URL)
    [miss] = session.end_test(TEST)
    assert str(path.relative_to(tmp_path)) in miss.report or str(path) in miss.report
    assert "invalid base64 data" in miss.report
