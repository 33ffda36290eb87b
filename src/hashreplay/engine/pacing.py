"""Pacing: how long replay waits before a response's head and each chunk (docs/scenarios.md).

`delays_for` turns a pace and a response into the plan's `delays`; adapters wait through
`sleep` (sync clients) or `asleep` (event loops: awaited, the loop stays responsive). The
clock is injectable (`set_clock`), so tests can see the waits requested without waiting.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from hashreplay.core.recording import RecordedResponse
from hashreplay.core.scenarios import Pace


class Clock(Protocol):
    def sleep(self, seconds: float) -> None: ...

    async def asleep(self, seconds: float) -> None: ...


class RealClock:
    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


_clock: list[Clock] = [RealClock()]


def set_clock(clock: Clock) -> Clock:
    """Use `clock` for every pacing wait; returns the previous one (to restore)."""
    previous, _clock[0] = _clock[0], clock
    return previous


def sleep(seconds: float) -> None:
    if seconds > 0:
        _clock[0].sleep(seconds)


async def asleep(seconds: float) -> None:
    if seconds > 0:
        await _clock[0].asleep(seconds)


class NoTiming(Exception):
    """`pace = "recorded"` for a response recorded without timing."""


def delays_for(response: RecordedResponse, pace: Pace, chunks: int) -> tuple[float, ...]:
    """Seconds before the head and before each of `chunks` chunks (empty: no waiting).

    Recorded offsets are per chunk as it arrived; when the replayed chunks (one per stream
    event) are more or fewer, the offsets are spread over them so the whole still takes the
    recorded time. Raises NoTiming for `recorded` without stored timing.
    """
    if pace.instant:
        return ()
    if pace.kind == "fixed":
        return (0.0, *([pace.fixed_ms / 1000] * chunks))
    timing = response.timing
    if timing is None:
        raise NoTiming
    head = timing.head_us / 1e6
    offsets = [us / 1e6 for us in timing.chunks_us]
    delays = [max(head, 0.0)]
    previous = head
    for i in range(chunks):
        if not offsets:
            delays.append(0.0)
            continue
        j = len(offsets) - 1 if chunks == 1 else round(i * (len(offsets) - 1) / (chunks - 1))
        at = max(offsets[j], previous)
        delays.append(at - previous)
        previous = at
    return tuple(delays)
