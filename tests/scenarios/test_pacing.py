"""Timing and pacing: offsets recorded only when asked; replay waits per the pace. The waits
are seen through the pacer's injectable clock, never timed with an upper bound; one test
checks that the real clock does wait (a lower bound)."""

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
from hashreplay.core.modes import Pace
from hashreplay.engine import scenarios as pacing
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


class LoopClock(FakeClock):
    """A FakeClock for event loops: each awaited wait yields to the loop and counts how often
    the `ticker` task ran meanwhile (the loop stayed responsive, whatever the machine's
    speed); a blocking wait is kept apart, in `blocking` (on a loop, it would stall it)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocking: list[float] = []
        self.ran_during: list[int] = []
        self.ticks = 0

    def sleep(self, seconds: float) -> None:
        self.blocking.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        before = self.ticks
        for _ in range(2):
            await asyncio.sleep(0)
        self.ran_during.append(self.ticks - before)

    async def ticker(self, done: asyncio.Event) -> None:
        """Another task on the loop: it ticks each time the loop lets it run."""
        while not done.is_set():
            self.ticks += 1
            await asyncio.sleep(0)


@pytest.fixture
def loop_clock() -> Iterator[LoopClock]:
    fake = LoopClock()
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
    assert load_config(tmp_path, env={"HASHREPLAY_PACE": "fixed:20"}).pace == Pace("fixed", 20.0)
    with pytest.raises(ConfigError, match="HASHREPLAY_PACE: 'slow' is not a pace"):
        load_config(tmp_path, env={"HASHREPLAY_PACE": "slow"})
    (tmp_path / "pyproject.toml").write_text('[tool.hashreplay]\npace = "sometimes"\n')
    with pytest.raises(ConfigError, match="pace"):
        load_config(tmp_path, env={})


def test_an_async_stream_takes_the_recorded_time_and_the_loop_stays_responsive(
    upstream: FakeUpstream, recorder: Recorder, loop_clock: LoopClock
) -> None:
    recorded = record(upstream, recorder, record_timing=True)["timing"]["chunks_us"][-1] / 1e6
    recorder.start(Mode.REPLAY, pace="recorded")

    async def run() -> None:
        done = asyncio.Event()
        task = asyncio.ensure_future(loop_clock.ticker(done))
        async with (
            httpx2.AsyncClient() as c,
            c.stream("POST", f"{upstream.url}/v1/chat/completions", json=BODY) as r,
        ):
            async for _ in r.aiter_raw():
                pass
        done.set()
        await task

    with test_context(TEST_ID):
        asyncio.run(run())
    # the replay asked the clock for the recorded time, awaited (never blocking), and the
    # loop ran another task during every wait: shown by the fake clock, not a stopwatch
    assert sum(loop_clock.waits) == pytest.approx(recorded, rel=0.01)
    assert loop_clock.blocking == []
    assert loop_clock.ran_during and min(loop_clock.ran_during) >= 1


def test_the_real_clock_really_waits_on_an_event_loop(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorded = record(upstream, recorder, record_timing=True)["timing"]["chunks_us"][-1] / 1e6
    recorder.start(Mode.REPLAY, pace="recorded")

    async def run() -> None:
        async with (
            httpx2.AsyncClient() as c,
            c.stream("POST", f"{upstream.url}/v1/chat/completions", json=BODY) as r,
        ):
            async for _ in r.aiter_raw():
                pass

    start = time.monotonic()
    with test_context(TEST_ID):
        asyncio.run(run())
    # a lower bound only (a busy machine may take longer): the default clock really waited
    assert time.monotonic() - start >= recorded * 0.8
