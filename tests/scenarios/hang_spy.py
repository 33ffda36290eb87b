"""What each hanging request waited for, seen by the test instead of timed: the timeout it
was handed (the client's own; None: none) and how its wait ended."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from hashreplay.engine.faults import Hang


@dataclass
class HangWait:
    #: the client's own timeout the hang waits at most (None: until the test ends)
    timeout: float | None
    #: "waiting", "returned" (its timeout elapsed or the test ended) or "cancelled"
    ended: str = "waiting"


@pytest.fixture
def hang_waits(monkeypatch: pytest.MonkeyPatch) -> list[HangWait]:
    """Every hang's wait, in order, while it still really waits."""
    waits: list[HangWait] = []
    real_wait, real_await = Hang.wait, Hang.await_

    def wait(self: Hang, timeout: float | None) -> None:
        seen = HangWait(timeout)
        waits.append(seen)
        real_wait(self, timeout)
        seen.ended = "returned"

    async def await_(self: Hang, timeout: float | None) -> None:
        seen = HangWait(timeout)
        waits.append(seen)
        try:
            await real_await(self, timeout)
        except asyncio.CancelledError:
            seen.ended = "cancelled"
            raise
        seen.ended = "returned"

    monkeypatch.setattr(Hang, "wait", wait)
    monkeypatch.setattr(Hang, "await_", await_)
    return waits
