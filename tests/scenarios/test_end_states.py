"""How a response ended (docs/design.md §12): a stream the client abandoned is
stored as abandoned, replays its chunks and then an error (never a clean end), `verify`
reports it and record-if-missing records it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hashreplay import Mode, test_context
from hashreplay.cli import main
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream

TEST_ID = "tests/test_app.py::test_story"
BODY = {
    "model": "gpt-fake-1",
    "messages": [{"role": "user", "content": "one two three four five six seven"}],
    "stream": True,
}


def read_stream(url: str, *, chunks: int | None) -> list[bytes]:
    """Read `chunks` chunks of the stream (None: all of it), then close it."""
    got: list[bytes] = []
    with (
        test_context(TEST_ID),
        httpx2.Client() as c,
        c.stream("POST", f"{url}/v1/chat/completions", json=BODY) as r,
    ):
        for chunk in r.iter_raw():
            got.append(chunk)
            if chunks is not None and len(got) == chunks:
                break
    return got


def stored(recorder: Recorder) -> dict[str, Any]:
    (path,) = recorder.files()
    data: dict[str, Any] = json.loads(path.read_text())["response"]
    return data


def verify(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", "--root", str(root)])
    return code, capsys.readouterr().out


def test_an_abandoned_stream_is_stored_replayed_reported_and_recorded_again(
    upstream: FakeUpstream, recorder: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder.start(Mode.RECORD)
    read_stream(upstream.url, chunks=2)
    response = stored(recorder)
    assert response["ended"]["state"] == "abandoned"
    assert response["ended"]["after_chunks"] == len(response["body"]) >= 1
    kept = len(response["body"])

    code, out = verify(recorder.root, capsys)
    assert code == 1
    assert "is incomplete: the client stopped reading after" in out

    recorder.start(Mode.REPLAY)
    upstream.stop()
    # the same client behaviour replays as it was recorded
    assert len(read_stream(upstream.url, chunks=kept)) == kept
    recorder.start(Mode.REPLAY)  # the test again, from its first call
    # reading further is an error that says what to do, never a clean end of stream
    with pytest.raises(httpx2.ReadError, match="client stopped reading when it was recorded"):
        read_stream(upstream.url, chunks=None)

    upstream.start()
    recorder.start(Mode.RECORD_IF_MISSING)
    full = read_stream(upstream.url, chunks=None)
    response = stored(recorder)
    assert "ended" not in response
    assert b"[DONE]" in b"".join(full)
    assert verify(recorder.root, capsys)[0] == 0


def test_a_stream_read_to_its_last_event_is_complete_even_if_closed_early(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD)
    with (
        test_context(TEST_ID),
        httpx2.Client() as c,
        c.stream("POST", f"{upstream.url}/v1/chat/completions", json=BODY) as r,
    ):
        for line in r.iter_lines():
            if line == "data: [DONE]":
                break  # like an SDK that stops at the API's last event
    assert "ended" not in stored(recorder)


def test_a_cut_off_whole_body_never_replays_as_complete(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    """What the proxy stores for a client that left during a whole body:
    the bytes that arrived, marked abandoned. Replay hands them over, then fails."""
    body = {**BODY, "stream": False}
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID), httpx2.Client() as c:
        c.post(f"{upstream.url}/v1/chat/completions", json=body)
    (path,) = recorder.files()
    data = json.loads(path.read_text())
    whole = json.dumps(data["response"]["body"])
    data["response"].update(
        body=whole[:20], body_encoding="text", ended={"state": "abandoned", "after_chunks": 1}
    )
    path.write_text(json.dumps(data))

    recorder.start(Mode.REPLAY)
    with test_context(TEST_ID), httpx2.Client() as c, pytest.raises(httpx2.ReadError) as info:
        c.post(f"{upstream.url}/v1/chat/completions", json=body)
    assert str(path) in str(info.value)


def test_an_upstream_error_after_chunks_is_stored_as_an_error_end(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    from tests.fakes.upstream import Scripted

    upstream.script("POST", "/v1/chat/completions", Scripted(disconnect_after_chunks=2))
    recorder.start(Mode.RECORD)
    with pytest.raises(httpx2.HTTPError):
        read_stream(upstream.url, chunks=None)
    response = stored(recorder)
    assert response["ended"] == {"state": "error", "after_chunks": len(response["body"])}
    assert response["is_exception"] is True
