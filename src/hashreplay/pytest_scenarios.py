"""The pytest side of scenarios (docs/scenarios.md): the `hashreplay` marker's scenario
options, `hashreplay_fault` markers, the `hashreplay` fixture, and the end-of-test report of
unconsumed recordings and faults that matched nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from hashreplay.core.constants import FAULT_MARKER
from hashreplay.core.errors import ConfigError, HashReplayWarning, RecordingError
from hashreplay.core.scenarios import Pace, Unconsumed
from hashreplay.engine.faults import FaultSpec
from hashreplay.engine.hangs import check_timeout, hang_timeout
from hashreplay.engine.session import Session


def apply_markers(item: pytest.Item, session: Session, marker: pytest.Mark | None) -> None:
    """Hand the test's scenario options (its closest `hashreplay` marker, its fault
    markers) to the engine; a ConfigError names the marker."""
    kwargs = marker.kwargs if marker is not None else {}
    timing = kwargs.get("timing")
    if timing is not None and not isinstance(timing, bool):
        msg = f"@pytest.mark.hashreplay timing={timing!r} must be True or False"
        raise ConfigError(msg)
    pace = kwargs.get("pace")
    unconsumed = kwargs.get("unconsumed")
    faults = [
        FaultSpec.parse(m.kwargs, source=f"@pytest.mark.{FAULT_MARKER}")
        for m in reversed(list(item.iter_markers(FAULT_MARKER)))
    ]
    if timing is None and pace is None and unconsumed is None and not faults:
        return
    session.set_test_options(
        item.nodeid,
        timing=timing,
        pace=None if pace is None else Pace.parse(pace, source="@pytest.mark.hashreplay pace"),
        unconsumed=None
        if unconsumed is None
        else Unconsumed.parse(unconsumed, source="@pytest.mark.hashreplay unconsumed"),
        faults=faults,
    )


def report_leftovers(item: pytest.Item, session: Session, report: pytest.TestReport) -> int:
    """Warn about (or fail the test for) what it left unused, and say which faults had
    nothing to break yet; returns how many responses were left unused."""
    _report_recorded_first(item, session, report)
    try:
        policy, unused, faults = session.leftovers(item.nodeid)
    except RecordingError as exc:  # its recordings directory cannot be read (a symlink out)
        if report.passed:
            report.outcome = "failed"
            report.longrepr = f"hashreplay: {item.nodeid}: {exc}"
        return 0
    if not unused and not faults:
        return 0
    root = session.config.root
    lines = [u.describe(root) for u in unused] + faults
    count = sum(u.count for u in unused)
    head = f"hashreplay: {item.nodeid} left {count} recorded response(s) unused" + (
        f" and {len(faults)} fault(s) unmatched" if faults else ""
    )
    text = "\n".join([head, *(f"  {line}" for line in lines)])
    hint = (
        "\n  (the test makes fewer calls than were recorded: re-record it with "
        'INFERENCE_MODE=record, or set unconsumed = "ignore")'
    )
    if policy is Unconsumed.FAIL and report.passed:
        report.outcome = "failed"
        report.longrepr = text + hint
    elif policy is not Unconsumed.IGNORE:
        item.warn(HashReplayWarning(text))
    return count


def _report_recorded_first(item: pytest.Item, session: Session, report: pytest.TestReport) -> None:
    """A fault that breaks a recorded response found none in a recording mode, so the call
    was recorded whole: the test did not see the fault this time. Its failure (likely, as
    it expects the fault) says why; a pass gets a warning."""
    faults = session.recorded_first(item.nodeid)
    if not faults:
        return
    text = "\n".join(
        f"hashreplay: {item.nodeid}: {fault} had no recorded response to break, so the "
        "call was made live and recorded whole; the fault applies from the next replay: "
        f"pytest {item.nodeid}"
        for fault in faults
    )
    if report.failed and report.longrepr is not None:
        report.longrepr = f"{report.longrepr}\n\n{text}"
    else:
        item.warn(HashReplayWarning(text))


class HashReplayFixture:
    """What the `hashreplay` fixture gives a test."""

    def __init__(self, session: Session, test_id: str) -> None:
        self._session = session
        self._test_id = test_id

    def wait_hanging(self, timeout: float | None = 5.0) -> Any:
        """Return once a request of this test hangs (`hashreplay_fault(hang=True)`); a
        HangTimeout after `timeout` seconds (None: no limit). Inside a running event loop it
        returns an awaitable instead: `await hashreplay.wait_hanging()`."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._session.wait_hanging(self._test_id, timeout)
            return None
        return self._await_hanging(timeout)

    def _await_hanging(self, timeout: float | None) -> Coroutine[Any, Any, None]:
        check_timeout(timeout)  # at the call, not when awaited
        hangs, test_id = self._session.hangs, self._test_id

        async def wait() -> None:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not hangs.hanging(test_id):
                if deadline is not None and time.monotonic() >= deadline:
                    assert timeout is not None  # a deadline comes from a timeout
                    # the timeout the test gave, not the poll's own zero wait
                    raise hang_timeout(test_id, timeout)
                await asyncio.sleep(0.005)

        return wait()
