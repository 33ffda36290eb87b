"""The real openai SDK (on httpx2) recorded against the fake upstream, replayed offline."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from hashreplay import Mode, test_context
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

TEST_ID = "tests/integration/test_app.py::test_chat"
KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"


def client(url: str, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, **kwargs)


def aclient(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)


def conversation(c: openai.OpenAI) -> dict[str, Any]:
    """Every kind of call the issue names; returns what the application would see."""
    chat = c.chat.completions.create(
        model="gpt-fake-1", messages=[{"role": "user", "content": "hello there"}]
    )
    stream = c.chat.completions.create(
        model="gpt-fake-1",
        messages=[{"role": "user", "content": "stream me a story"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [ch.choices[0].delta.content for ch in stream if ch.choices]
    emb = c.embeddings.create(model="emb-fake", input=["a", "b"])
    resp = c.responses.create(model="gpt-fake-1", input="first turn")
    follow = c.responses.create(
        model="gpt-fake-1", input="second turn", previous_response_id=resp.id
    )
    with c.responses.stream(model="gpt-fake-1", input="streamed turn") as rs:
        streamed = "".join(e.delta for e in rs if e.type == "response.output_text.delta")
    return {
        "chat": chat.choices[0].message.content,
        "chat_usage": chat.usage.total_tokens if chat.usage else None,
        "chunks": chunks,
        "embeddings": [d.embedding for d in emb.data],
        "responses": [resp.output_text, follow.output_text],
        "streamed": streamed,
    }


def test_record_then_replay_offline(
    upstream: FakeUpstream, recorder: Recorder, connect_guard_factory: Any
) -> None:
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        live = conversation(client(upstream.url))
    live_calls = len(upstream.calls)
    upstream.stop()
    files = recorder.files()
    assert len(files) == 6
    assert all(f.parent == recorder.root / "tests/integration/recordings" for f in files)

    session = recorder.start(Mode.REPLAY)
    with connect_guard_factory() as guard, test_context(TEST_ID):
        replayed = conversation(client(upstream.url))
    assert guard.attempts == []
    assert replayed == live
    assert session.stats.replayed == 6
    assert session.stats.missed == 0
    assert live_calls == 6


def test_chunks_replay_one_for_one(upstream: FakeUpstream, recorder: Recorder) -> None:
    recorder.start(Mode.RECORD)
    messages = [{"role": "user", "content": "count the chunks please"}]
    with test_context(TEST_ID):
        live = list(
            client(upstream.url).chat.completions.create(
                model="gpt-fake-1", messages=messages, stream=True
            )
        )
    recorder.start(Mode.REPLAY)
    with test_context(TEST_ID):
        replayed = list(
            client(upstream.url).chat.completions.create(
                model="gpt-fake-1", messages=messages, stream=True
            )
        )
    strip = {"id", "created", "obfuscation", "system_fingerprint"}
    assert [c.model_dump(exclude=strip) for c in replayed] == [
        c.model_dump(exclude=strip) for c in live
    ]
    assert {c.id for c in replayed} == {f"rec-{recorder.files()[0].stem[:12]}"}


def test_async_client_records_and_replays(upstream: FakeUpstream, recorder: Recorder) -> None:
    async def run() -> tuple[str | None, list[str | None]]:
        c = aclient(upstream.url)
        chat = await c.chat.completions.create(
            model="gpt-fake-1", messages=[{"role": "user", "content": "async hi"}]
        )
        stream = await c.chat.completions.create(
            model="gpt-fake-1", messages=[{"role": "user", "content": "async stream"}], stream=True
        )
        parts = [ch.choices[0].delta.content async for ch in stream if ch.choices]
        await c.close()
        return chat.choices[0].message.content, parts

    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        live = asyncio.run(run())
    upstream.stop()
    recorder.start(Mode.REPLAY)
    with ConnectGuard() as guard, test_context(TEST_ID):
        replayed = asyncio.run(run())
    assert replayed == live
    assert live[0] == "echo: async hi"
    assert guard.attempts == []


def test_concurrent_tasks_keep_their_test_ids(upstream: FakeUpstream, recorder: Recorder) -> None:
    """Two asyncio tasks of two tests, interleaved, store under their own test ids."""

    async def one(test_id: str) -> str | None:
        with test_context(test_id):
            c = aclient(upstream.url)
            r = await c.chat.completions.create(
                model="gpt-fake-1", messages=[{"role": "user", "content": "same"}]
            )
            await c.close()
            return r.choices[0].message.content

    async def both() -> list[str | None]:
        return list(
            await asyncio.gather(one("tests/a/test_x.py::t1"), one("tests/b/test_y.py::t2"))
        )

    recorder.start(Mode.RECORD)
    asyncio.run(both())
    ids = sorted(json.loads(p.read_text())["test_id"] for p in recorder.files())
    assert ids == ["tests/a/test_x.py::t1", "tests/b/test_y.py::t2"]
    assert (recorder.root / "tests/a/recordings").is_dir()
    assert (recorder.root / "tests/b/recordings").is_dir()


def test_rerecord_is_byte_identical(upstream: FakeUpstream, recorder: Recorder) -> None:
    """Fresh ids, timestamps and noise headers on every call still give the same bytes."""
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        conversation(client(upstream.url))
    first = {p: p.read_bytes() for p in recorder.files()}
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        conversation(client(upstream.url))
    second = {p: p.read_bytes() for p in recorder.files()}
    assert second == first
    text = b"".join(first.values())
    for noise in (b"x-request-id", b"set-cookie", b"openai-processing-ms", b"chatcmpl-", b"resp_"):
        assert noise not in text
    assert KEY.encode() not in text


def test_record_if_missing_only_calls_upstream_for_new_requests(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD_IF_MISSING)
    messages = [{"role": "user", "content": "once"}]
    with test_context(TEST_ID):
        client(upstream.url).chat.completions.create(model="gpt-fake-1", messages=messages)
        client(upstream.url).chat.completions.create(model="gpt-fake-1", messages=messages)
    assert len(upstream.calls) == 2  # identical calls in one test: both recorded, in order
    stored = json.loads(recorder.files()[0].read_text())
    assert len(stored["later_responses"]) == 1

    session = recorder.start(Mode.RECORD_IF_MISSING)
    with test_context(TEST_ID):
        client(upstream.url).chat.completions.create(model="gpt-fake-1", messages=messages)
        client(upstream.url).chat.completions.create(model="gpt-fake-1", messages=messages)
    assert len(upstream.calls) == 2
    assert session.stats.replayed == 2


def test_miss_fails_fast_without_sdk_retries(upstream: FakeUpstream, recorder: Recorder) -> None:
    session = recorder.start(Mode.REPLAY)
    c = openai.OpenAI(base_url=f"{upstream.url}/v1", api_key=KEY, max_retries=2)
    with test_context(TEST_ID), pytest.raises(openai.NotFoundError) as info:
        c.chat.completions.create(
            model="gpt-fake-1", messages=[{"role": "user", "content": "never recorded"}]
        )
    assert "hashreplay: no recording for POST" in str(info.value)
    assert upstream.calls == []
    misses = session.take_misses(TEST_ID)
    assert len(misses) == 1
    assert f"INFERENCE_MODE=record-if-missing pytest {TEST_ID}" in misses[0].report


@pytest.fixture
def connect_guard_factory() -> type[ConnectGuard]:
    return ConnectGuard
