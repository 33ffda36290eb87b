"""Timing and pacing (issue 14 item 1): offsets recorded only when asked; replay waits per
the pace. The waits are measured through the pacer's injectable clock; one test measures
real time (within 20% of the recorded time, as the issue asks) with the loop kept busy."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from hashreplay import Mode, test_context
from hashreplay.core.config import load_config
from hashreplay.core.errors import ConfigError
from hashreplay.core.scenarios import Pace
from hashreplay.engine import pacing
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream, Scripted

TEST_ID = "tests/test_app.py::test_slow"
BODY = {
    "model": "gpt-fake-1",
    "messages": [{"role": "user", "content": "one two three four"}],
    "stream": True,
}


class FakeClock:
    """Records the waits the pacer asks for instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    fake = FakeClock()
    previous = pacing.set_clock(fake)
    yield fake
    pacing.set_clock(previous)


def read(url: str) -> list[bytes]:
    with (
        test_context(TEST_ID),
        httpx2.Client() as c,
        c.stream("POST", f"{url}/v1/chat/completions", json=BODY) as r,
    ):
        return list(r.iter_raw())


def record(upstream: FakeUpstream, recorder: Recorder, **options: Any) -> dict[str, Any]:
    upstream.script("POST", "/v1/chat/completions", Scripted(delay=0.3))
    recorder.start(Mode.RECORD, **options)
    read(upstream.url)
    (path,) = recorder.files()
    response: dict[str, Any] = json.loads(path.read_text())["response"]
    upstream.stop()
    return response


def test_timing_is_off_by_default(upstream: FakeUpstream, recorder: Recorder) -> None:
    assert "timing" not in record(upstream, recorder)


def test_recorded_pace_waits_the_stored_offsets(
    upstream: FakeUpstream, recorder: Recorder, clock: FakeClock
) -> None:
    response = record(upstream, recorder, record_timing=True)
    timing = response["timing"]
    assert timing["head_us"] >= 300_000  # the upstream's delay
    assert len(timing["chunks_us"]) >= 1
    assert timing["chunks_us"] == sorted(timing["chunks_us"])

    recorder.start(Mode.REPLAY, pace="recorded")
    read(upstream.url)
    assert sum(clock.waits) == pytest.approx(timing["chunks_us"][-1] / 1e6, rel=0.01)
    assert clock.waits[0] == pytest.approx(timing["head_us"] / 1e6)


def test_fixed_pace_waits_before_each_chunk_and_instant_waits_not(
    upstream: FakeUpstream, recorder: Recorder, clock: FakeClock
) -> None:
    record(upstream, recorder)
    recorder.start(Mode.REPLAY, pace="fixed:25")
    chunks = read(upstream.url)
    assert [w for w in clock.waits if w] == [0.025] * len(chunks)
    clock.waits.clear()
    recorder.start(Mode.REPLAY)
    read(upstream.url)
    assert clock.waits == []


def test_recorded_pace_without_timing_fails_the_test_saying_how_to_record_it(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    record(upstream, recorder)
    session = recorder.start(Mode.REPLAY, pace="recorded")
    with test_context(TEST_ID), httpx2.Client() as c:
        answer = c.post(f"{upstream.url}/v1/chat/completions", json=BODY)
    assert answer.status_code == 404
    (miss,) = session.take_misses(TEST_ID)
    assert "@pytest.mark.hashreplay(record_timing=True)" in miss.report
    assert "record_timing = true" in miss.report


def test_a_marker_pace_wins_over_the_config(
    upstream: FakeUpstream, recorder: Recorder, clock: FakeClock
) -> None:
    record(upstream, recorder)
    session = recorder.start(Mode.REPLAY, pace="fixed:500")
    session.begin_test(TEST_ID)
    session.set_test_options(TEST_ID, pace=Pace.parse("fixed:1"))
    read(upstream.url)
    assert set(clock.waits) - {0.0} == {0.001}


def test_pace_from_the_environment_and_its_errors(tmp_path: Any) -> None:
    assert load_config(tmp_path, env={"HASHREPLAY_PACE": "fixed:20"}).pace == "fixed:20"
    with pytest.raises(ConfigError, match="HASHREPLAY_PACE: 'slow' is not a pace"):
        load_config(tmp_path, env={"HASHREPLAY_PACE": "slow"})
    (tmp_path / "pyproject.toml").write_text('[tool.hashreplay]\npace = "sometimes"\n')
    with pytest.raises(ConfigError, match="pace"):
        load_config(tmp_path, env={})


def test_an_async_stream_takes_the_recorded_time_and_the_loop_stays_responsive(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    upstream.script("POST", "/v1/chat/completions", Scripted(delay=0.6))
    recorder.start(Mode.RECORD, record_timing=True)
    read(upstream.url)
    (path,) = recorder.files()
    recorded = json.loads(path.read_text())["response"]["timing"]["chunks_us"][-1] / 1e6
    upstream.stop()
    recorder.start(Mode.REPLAY, pace="recorded")

    async def run() -> tuple[float, int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.ensure_future(ticker())
        start = time.monotonic()
        async with (
            httpx2.AsyncClient() as c,
            c.stream("POST", f"{upstream.url}/v1/chat/completions", json=BODY) as r,
        ):
            async for _ in r.aiter_raw():
                pass
        elapsed = time.monotonic() - start
        done.set()
        await task
        return elapsed, ticks

    with test_context(TEST_ID):
        elapsed, ticks = asyncio.run(run())
    assert recorded * 0.8 <= elapsed <= recorded * 1.2 + 0.2  # + a floor for a loaded machine
    assert ticks >= 10  # the loop ran other tasks while the replay waited
