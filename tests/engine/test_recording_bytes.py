"""Serialising a recording on the writer thread (docs/design.md §4): the same bytes as
serialising it on the caller's thread, the test's next request hashed with the ids of a
response still queued, and a body over `max_body_bytes` still failing the call at once."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hashreplay.core.config import load_config
from hashreplay.core.errors import BodyTooLarge
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.replay import Record, Replay
from hashreplay.engine.session import Session

TEST = "tests/suite/test_chat.py::test_conversation"
OTHER = "tests/suite/test_chat.py::test_other"
URL = "http://127.0.0.1:9/v1/chat/completions"
KEY = "sk-test-0123456789abcdefghij"
HEADERS = [("content-type", "application/json"), ("authorization", f"Bearer {KEY}")]
JSON = [("content-type", "application/json")]
SSE = [("content-type", "text/event-stream")]


def request(*messages: str, previous: str | None = None) -> IncomingRequest:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": m} for m in messages],
    }
    if previous is not None:
        body["previous_response_id"] = previous
    return IncomingRequest("POST", URL, HEADERS, json.dumps(body).encode())


def answer(response_id: str, text: str) -> LiveExchange:
    body = {
        "id": response_id,
        "created": 1_700_000_123,
        "choices": [{"message": {"content": text}}],
    }
    return LiveExchange(200, JSON, [json.dumps(body).encode()])


def streamed(response_id: str) -> LiveExchange:
    events = [
        f'data: {{"id": "{response_id}", "created": 1700000001, "delta": "{word}"}}\n\n'.encode()
        for word in ("one", "two", f"echo {KEY}")
    ]
    return LiveExchange(200, SSE, [*events, b"data: [DONE]\n\n"], chunked=True)


def models(*names: str) -> LiveExchange:
    body = {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
    return LiveExchange(200, JSON, [json.dumps(body).encode()])


def conversation(session: Session) -> list[Path]:
    """A test's calls: ids the next request sends back, a sequence of identical requests,
    a stream that echoes the key, a shared model list; then a second test."""
    paths: list[Path] = []
    calls = [
        (TEST, request("hi"), answer("chatcmpl-AAAA1111BBBB", "hello")),
        (TEST, request("hi", previous="chatcmpl-AAAA1111BBBB"), answer("chatcmpl-CCCC2222", "x")),
        (TEST, request("again"), answer("chatcmpl-DDDD3333", "one")),
        (TEST, request("again"), answer("chatcmpl-EEEE4444", "two")),
        (TEST, request("stream"), streamed("chatcmpl-FFFF5555")),
        (TEST, IncomingRequest("GET", "http://127.0.0.1:9/v1/models", HEADERS, b""), models("a")),
        (OTHER, request("again"), answer("chatcmpl-GGGG6666", "three")),
    ]
    for test_id, incoming, outcome in calls:
        if session.owners.get(test_id) is None:
            session.begin_test(test_id)
        decision = session.decide(incoming, test_id=test_id)
        assert isinstance(decision, Record), decision
        paths.append(session.record(decision.prep, outcome))
    return paths


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*.json"))
        if ".hashreplay" not in p.parts
    }


def test_files_serialised_on_the_writer_thread_are_byte_identical(tmp_path: Path) -> None:
    at_once = Session(load_config(tmp_path / "a", env={}, mode="record"))
    behind = Session(load_config(tmp_path / "b", env={}, mode="record"), write_behind=True)
    paths_a = conversation(at_once)
    paths_b = conversation(behind)
    behind.close()
    assert [p.relative_to(tmp_path / "a") for p in paths_a] == [
        p.relative_to(tmp_path / "b") for p in paths_b
    ]
    written = files(tmp_path / "a")
    assert len(written) == 6  # the two "again" calls share a file per test
    assert files(tmp_path / "b") == written
    second = json.loads((tmp_path / "a" / paths_a[1].relative_to(tmp_path / "a")).read_text())
    assert "chatcmpl-AAAA1111BBBB" not in json.dumps(second["request"])  # hashed with its stable id
    assert KEY.encode() not in b"".join(written.values())


def test_the_stage_runs_on_the_writer_thread_not_the_callers(tmp_path: Path) -> None:
    s = Session(load_config(tmp_path, env={}, mode="record"), write_behind=True)
    s.begin_test(TEST)
    decision = s.decide(request("hi"), test_id=TEST)
    assert isinstance(decision, Record)
    _path, content = s.recorder.stage(decision.prep, answer("chatcmpl-AAAA1111BBBB", "hello"))
    assert callable(content)  # handed over unserialised
    assert s.stats.recorded == 1
    assert s.owners.owner(TEST).ids() == {
        "chatcmpl-AAAA1111BBBB": json.loads(content())["response"]["body"]["id"]
    }
    s.close()


def test_a_replay_right_after_a_record_reads_the_queued_stage(tmp_path: Path) -> None:
    s = Session(load_config(tmp_path, env={}, mode="record-if-missing"), write_behind=True)
    s.begin_test(TEST)
    decision = s.decide(request("hi"), test_id=TEST)
    assert isinstance(decision, Record)
    path = s.record(decision.prep, answer("chatcmpl-AAAA1111BBBB", "hello"))
    s.begin_test(TEST)  # the test again: a fresh state reads the file through the view
    again = s.decide(request("hi"), test_id=TEST)
    assert isinstance(again, Replay) and again.path == path
    s.close()
    assert path.exists()


@pytest.mark.parametrize("write_behind", [False, True])
def test_a_body_over_the_limit_fails_the_call_at_once(tmp_path: Path, write_behind: bool) -> None:
    s = Session(
        load_config(tmp_path, env={}, mode="record", max_body_bytes=200), write_behind=write_behind
    )
    s.begin_test(TEST)
    decision = s.decide(request("hi"), test_id=TEST)
    assert isinstance(decision, Record)
    with pytest.raises(BodyTooLarge) as info:
        s.record(decision.prep, answer("chatcmpl-AAAA1111BBBB", "x" * 300))
    assert "the response body of http://localhost/v1/chat/completions" in str(info.value)
    assert s.owners.owner(TEST).recorded_count(decision.prep.hash) == 0  # the sequence unchanged
    assert s.stats.recorded == 0
    s.close()
    assert files(tmp_path) == {}


def test_a_body_near_the_limit_is_serialised_on_the_callers_thread(tmp_path: Path) -> None:
    s = Session(load_config(tmp_path, env={}, mode="record", max_body_bytes=400), write_behind=True)
    s.begin_test(TEST)
    decision = s.decide(request("hi"), test_id=TEST)
    assert isinstance(decision, Record)
    # over half the limit: a credential value scrubbed for the placeholder could push it over
    _path, content = s.recorder.stage(decision.prep, answer("chatcmpl-AAAA1111BBBB", "x" * 250))
    assert isinstance(content, bytes)
    s.close()


def test_a_write_behind_rerecord_keeps_the_day_of_a_file_there_before_listing_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Record mode looks up what a file held before (its day) only under the names its
    directory listed on first use: one listing, no failed `open` for a new recording."""

    def record(session: Session, test_id: str) -> Path:
        session.begin_test(test_id)
        decision = session.decide(request("hi"), test_id=test_id)
        assert isinstance(decision, Record)
        path = session.record(decision.prep, answer("chatcmpl-AAAA1111BBBB", "hello"))
        session.end_test(test_id)
        assert path is not None
        return path

    monkeypatch.setenv("HASHREPLAY_TODAY", "2026-01-02")
    first = Session(load_config(tmp_path, env={}, mode="record"), write_behind=True)
    kept = record(first, TEST)
    first.close()
    monkeypatch.setenv("HASHREPLAY_TODAY", "2026-03-04")
    listed: list[Path] = []
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        listed.append(Path(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    again = Session(load_config(tmp_path, env={}, mode="record"), write_behind=True)
    assert record(again, TEST) == kept
    new = record(again, OTHER)
    again.close()
    assert json.loads(kept.read_text())["response"]["recorded_on"] == "2026-01-02"
    assert json.loads(new.read_text())["response"]["recorded_on"] == "2026-03-04"
    assert listed.count(kept.parent) == 1
