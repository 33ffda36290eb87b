"""Requests that hang (`hashreplay_fault(hang=True)`), per test: `wait_hanging` returns once
one is in flight, and the test's end releases them (docs/scenarios.md)."""

from __future__ import annotations

import asyncio
import threading
import time

from hashreplay.core.errors import HashReplayError


class HangTimeout(HashReplayError, TimeoutError):
    """`wait_hanging(timeout)` saw no hanging request in time."""


class Hangs:
    """Requests that hang, per test: `wait_hanging` watches them, the test's end frees them."""

    __slots__ = ("cond", "in_flight", "released")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.in_flight: dict[str | None, int] = {}
        self.released: dict[str | None, threading.Event] = {}

    def hang(self, test_id: str | None) -> Hang:
        with self.cond:
            event = self.released.setdefault(test_id, threading.Event())
        return Hang(self, test_id, event)

    def enter(self, test_id: str | None) -> None:
        with self.cond:
            self.in_flight[test_id] = self.in_flight.get(test_id, 0) + 1
            self.cond.notify_all()

    def leave(self, test_id: str | None) -> None:
        with self.cond:
            self.in_flight[test_id] = self.in_flight.get(test_id, 1) - 1

    def hanging(self, test_id: str | None) -> bool:
        """Whether a request of the test hangs now."""
        with self.cond:
            return self.in_flight.get(test_id, 0) > 0

    def wait_hanging(self, test_id: str | None, timeout: float | None) -> None:
        """Return once a request of the test hangs; a HangTimeout after `timeout` s (None:
        no limit)."""
        check_timeout(timeout)
        with self.cond:
            if not self.cond.wait_for(lambda: self.in_flight.get(test_id, 0) > 0, timeout):
                assert timeout is not None  # without one, wait_for returns only when true
                raise hang_timeout(test_id, timeout)

    def release(self, test_id: str | None) -> None:
        """The test ended: every request it left hanging returns (with its error)."""
        with self.cond:
            event = self.released.pop(test_id, None)
            self.in_flight.pop(test_id, None)
        if event is not None:
            event.set()


def check_timeout(timeout: object) -> None:
    """`wait_hanging`'s timeout must be a number of seconds >= 0, or None (no limit)."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        msg = (
            f"wait_hanging(timeout={timeout!r}): the timeout must be a number of seconds >= 0 "
            "(or None: no limit)"
        )
        raise TypeError(msg)


def hang_timeout(test_id: str | None, timeout: float) -> HangTimeout:
    """The error of a `wait_hanging(timeout)` that saw no hanging request: it names the
    timeout it waited, as given (`0.5 s`, `5 s`)."""
    shown = f"{timeout:g}"
    if float(shown) != timeout:  # more digits than %g shows: the exact value
        shown = repr(float(timeout))
    msg = (
        f"no request of test {test_id!r} was hanging within {shown} s (the timeout "
        "given to wait_hanging): does the test's hashreplay_fault(hang=True) marker match "
        "the request it makes, and does the request start before the timeout?"
    )
    return HangTimeout(msg)


class Hang:
    """One hanging request. `wait` / `await_` return when `timeout` (the client's own,
    None: none) elapses or the test ends; a cancelled task stops waiting at once."""

    POLL = 0.005

    def __init__(self, hangs: Hangs, test_id: str | None, event: threading.Event) -> None:
        self._hangs = hangs
        self._test_id = test_id
        self._event = event

    def wait(self, timeout: float | None) -> None:
        self._hangs.enter(self._test_id)
        try:
            self._event.wait(timeout)
        finally:
            self._hangs.leave(self._test_id)

    async def await_(self, timeout: float | None) -> None:
        self._hangs.enter(self._test_id)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._event.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    return
                await asyncio.sleep(self.POLL)
        finally:
            self._hangs.leave(self._test_id)
