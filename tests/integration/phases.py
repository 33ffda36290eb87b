"""The three phases every real client goes through: record against the fake
upstream; replay with the fake stopped and zero connects; replay against a fresh fake on a new
port, with the network guard blocking everything, that receives zero requests. Replayed
results must equal recorded ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hashreplay import Mode, test_context
from hashreplay.adapters import network_guard
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

TEST_ID = "tests/integration/test_app.py::test_sdk"


@dataclass
class Phases:
    live: Any
    offline: Any
    fresh: Any
    #: requests the fake upstream received while recording
    live_calls: int
    files: list[Path]


def three_phases(
    upstream: FakeUpstream,
    recorder: Recorder,
    run: Callable[[str], Any],
    *,
    test_id: str = TEST_ID,
) -> Phases:
    """Run ``run(base_url)`` in the three phases; assert what every client must show."""
    recorder.start(Mode.RECORD)
    with test_context(test_id):
        live = run(upstream.url)
    live_calls = len(upstream.calls)
    files = recorder.files()
    assert live_calls > 0, "the client sent nothing to the fake upstream"
    assert len(files) == live_calls, "not every request was recorded"
    url = upstream.url
    upstream.stop()

    session = recorder.start(Mode.REPLAY)
    with ConnectGuard() as guard, test_context(test_id):
        offline = run(url)
    assert guard.attempts == [], f"replay opened sockets: {guard.attempts}"
    assert (session.stats.replayed, session.stats.missed) == (live_calls, 0)

    session = recorder.start(Mode.REPLAY, block_network="all")
    network_guard.install(session)
    try:
        with FakeUpstream() as fresh_upstream, test_context(test_id):
            fresh = run(fresh_upstream.url)
            received = list(fresh_upstream.calls)
    finally:
        network_guard.uninstall()
    assert received == [], f"replay reached the fresh upstream: {received}"
    assert session.take_misses(test_id) == []
    assert (session.stats.replayed, session.stats.missed) == (live_calls, 0)

    assert offline == live
    assert fresh == live
    return Phases(live, offline, fresh, live_calls, files)
