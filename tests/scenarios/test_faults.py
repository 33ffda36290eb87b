"""Faults and hangs with the real openai SDK (sync and async) and a raw
httpx stream: each fault kind, a 429 the SDK retries before the recorded 200, a hang the
test cancels once `wait_hanging` returns. Faults answer before any recorded response is
consumed and are never recorded."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import openai
import pytest

from hashreplay import Mode, test_context
from hashreplay.engine.faults import FaultSpec, HangTimeout
from hashreplay.engine.session import Session
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.scenarios.hang_spy import HangWait, hang_waits

__all__ = ["hang_waits"]  # the fixture, used by name

TEST_ID = "tests/test_app.py::test_agent"
KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
#: what the SDK raises for a stream that times out while it is read (its own class)
BROKEN_STREAM = (httpx2.ReadTimeout, openai.APITimeoutError)
MESSAGES: Any = [{"role": "user", "content": "alpha beta gamma delta epsilon"}]


def client(url: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=retries)


def aclient(url: str, retries: int = 0, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=retries, **kw)


def chat(c: openai.OpenAI) -> str:
    r = c.chat.completions.create(model="gpt-fake-1", messages=MESSAGES)
    return r.choices[0].message.content or ""


def stream(c: openai.OpenAI) -> list[str]:
    s = c.chat.completions.create(model="gpt-fake-1", messages=MESSAGES, stream=True)
    return [ch.choices[0].delta.content or "" for ch in s if ch.choices]


@pytest.fixture
def recorded(upstream: FakeUpstream, recorder: Recorder) -> str:
    """A chat and a stream recorded under TEST_ID; the upstream is stopped afterwards."""
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        chat(client(upstream.url))
        stream(client(upstream.url))
    recorder.files()
    upstream.stop()
    return upstream.url


def replaying(recorder: Recorder, *faults: dict[str, Any], mode: Mode = Mode.REPLAY) -> Session:
    session = recorder.start(mode)
    session.begin_test(TEST_ID)
    session.set_test_options(TEST_ID, faults=[FaultSpec.parse(f) for f in faults])
    return session


def test_a_429_then_the_recorded_200_through_the_sdks_own_retry(
    recorded: str, recorder: Recorder
) -> None:
    session = replaying(
        recorder,
        {
            "status": 429,
            "headers": {"retry-after-ms": "10"},
            "times": 1,
            "endpoint": "/chat/completions",
        },
    )
    before = {p: p.read_bytes() for p in recorder.files()}
    with test_context(TEST_ID):
        assert chat(client(recorded, retries=2)) == "echo: alpha beta gamma delta epsilon"
    assert session.take_misses(TEST_ID) == []
    assert session.leftovers(TEST_ID)[2] == []  # the fault matched
    assert {p: p.read_bytes() for p in recorder.files()} == before  # a faulted test writes nothing


def test_a_status_fault_without_retries_is_the_sdks_own_error(
    recorded: str, recorder: Recorder
) -> None:
    replaying(recorder, {"status": 429, "body": {"error": {"message": "slow down"}}})
    with test_context(TEST_ID), pytest.raises(openai.RateLimitError, match="slow down"):
        chat(client(recorded))


@pytest.mark.parametrize(
    ("error", "sdk_error"),
    [
        ("read_timeout", openai.APITimeoutError),
        ("connect_error", openai.APIConnectionError),
        ("disconnect", openai.APIConnectionError),
    ],
)
def test_each_error_kind_before_the_response_sync_and_async(
    recorded: str, recorder: Recorder, error: str, sdk_error: type[Exception]
) -> None:
    replaying(recorder, {"error": error})
    with test_context(TEST_ID), pytest.raises(sdk_error):
        chat(client(recorded))

    async def call() -> None:
        await aclient(recorded).chat.completions.create(model="gpt-fake-1", messages=MESSAGES)

    replaying(recorder, {"error": error})
    with test_context(TEST_ID), pytest.raises(sdk_error):
        asyncio.run(call())


@pytest.mark.parametrize(
    ("error", "httpx_error"),
    [
        ("read_timeout", httpx2.ReadTimeout),
        ("connect_error", httpx2.ConnectError),
        ("disconnect", httpx2.RemoteProtocolError),
    ],
)
def test_a_stream_breaks_after_n_chunks_with_the_clients_own_exception(
    recorded: str, recorder: Recorder, error: str, httpx_error: type[Exception]
) -> None:
    # the chat first (call 1), then the stream breaks (call 2 of the endpoint)
    replaying(recorder, {"error": error, "after_chunks": 2, "call": 2})
    got: list[bytes] = []
    body = {"model": "gpt-fake-1", "messages": MESSAGES, "stream": True}
    with test_context(TEST_ID), httpx2.Client(headers={"authorization": f"Bearer {KEY}"}) as c:
        c.post(
            f"{recorded}/v1/chat/completions", json={"model": "gpt-fake-1", "messages": MESSAGES}
        )
        with (
            c.stream("POST", f"{recorded}/v1/chat/completions", json=body) as r,
            pytest.raises(httpx_error, match="injected by hashreplay_fault"),
        ):
            got.extend(r.iter_raw())
    assert len(got) == 2


def test_the_sdk_stream_breaks_after_n_chunks_sync_and_async(
    recorded: str, recorder: Recorder
) -> None:
    replaying(recorder, {"error": "read_timeout", "after_chunks": 1, "call": 2})
    with test_context(TEST_ID):
        chat(client(recorded))
        with pytest.raises(BROKEN_STREAM):
            stream(client(recorded))

    async def run() -> None:
        c = aclient(recorded)
        await c.chat.completions.create(model="gpt-fake-1", messages=MESSAGES)
        s = await c.chat.completions.create(model="gpt-fake-1", messages=MESSAGES, stream=True)
        async for _ in s:
            pass

    replaying(recorder, {"error": "read_timeout", "after_chunks": 1, "call": 2})
    with test_context(TEST_ID), pytest.raises(BROKEN_STREAM):
        asyncio.run(run())


def test_a_hang_is_cancelled_after_wait_hanging_returns(
    recorded: str, recorder: Recorder, hang_waits: list[HangWait]
) -> None:
    session = replaying(recorder, {"hang": True})

    async def run() -> None:
        task = asyncio.ensure_future(
            aclient(recorded, timeout=None).chat.completions.create(
                model="gpt-fake-1", messages=MESSAGES
            )
        )
        while True:  # the engine's wait, polled so the loop keeps running the task
            try:
                session.wait_hanging(TEST_ID, 0)
                break
            except HangTimeout:
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with test_context(TEST_ID):
        asyncio.run(run())
    # no timeout of its own (it would wait until the test's end): the cancel ended it at once
    assert hang_waits == [HangWait(None, "cancelled")]


def test_a_sync_hang_ends_with_the_clients_own_timeout(
    recorded: str, recorder: Recorder, hang_waits: list[HangWait]
) -> None:
    replaying(recorder, {"hang": True})
    c = openai.OpenAI(base_url=f"{recorded}/v1", api_key=KEY, max_retries=0, timeout=0.2)
    with test_context(TEST_ID), pytest.raises(openai.APITimeoutError):
        chat(c)
    assert hang_waits == [HangWait(0.2, "returned")]  # the SDK's timeout, handed to the hang


def test_wait_hanging_says_when_nothing_hangs(recorder: Recorder) -> None:
    session = replaying(recorder, {"hang": True})
    with pytest.raises(HangTimeout, match="hang=True"):
        session.wait_hanging(TEST_ID, 0.05)


def test_faults_in_record_if_missing_make_no_live_call(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    replaying(recorder, {"status": 503}, mode=Mode.RECORD_IF_MISSING)
    with test_context(TEST_ID), pytest.raises(openai.InternalServerError):
        chat(client(upstream.url))
    assert upstream.calls == []
    assert recorder.files() == []


def test_a_fault_that_matches_nothing_is_reported(recorded: str, recorder: Recorder) -> None:
    session = replaying(recorder, {"status": 500, "endpoint": "/embeddings"})
    with test_context(TEST_ID):
        chat(client(recorded))
    assert session.leftovers(TEST_ID)[2] == [
        "hashreplay_fault(status=500, endpoint='/embeddings') matched no request of this test"
    ]


def test_a_status_fault_body_is_json_the_sdk_reads(recorded: str, recorder: Recorder) -> None:
    replaying(recorder, {"status": 400, "body": {"error": {"message": "bad", "code": "x"}}})
    with test_context(TEST_ID), httpx2.Client() as c:
        answer = c.post(f"{recorded}/v1/chat/completions", json={"model": "gpt-fake-1"})
    assert answer.status_code == 400
    assert json.loads(answer.content) == {"error": {"message": "bad", "code": "x"}}


def test_a_429_then_the_recorded_200_async(recorded: str, recorder: Recorder) -> None:
    session = replaying(recorder, {"status": 429, "headers": {"retry-after-ms": "10"}, "times": 1})

    async def call() -> str:
        c = aclient(recorded, retries=1)
        r = await c.chat.completions.create(model="gpt-fake-1", messages=MESSAGES)
        return r.choices[0].message.content or ""

    with test_context(TEST_ID):
        assert asyncio.run(call()) == "echo: alpha beta gamma delta epsilon"
    assert session.take_misses(TEST_ID) == []

    replaying(recorder, {"status": 429})  # every call: the SDK gives up with its own error
    with test_context(TEST_ID), pytest.raises(openai.RateLimitError):
        asyncio.run(call())
