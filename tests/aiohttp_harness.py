"""Shared by the aiohttp tests: a Recorder that installs the aiohttp adapter too, and the
three phases every real client goes through (record; replay with the fake stopped and no
connect; replay against a fresh fake on a new port that receives nothing)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import aiohttp as aiohttp_adapter
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.engine.session import Session
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

T = TypeVar("T")
TEST_ID = "tests/test_aio.py::test_client"


class AioRecorder(Recorder):
    """`Recorder` with the aiohttp adapter installed beside the httpx one."""

    def start(self, mode: Mode | str, **overrides: object) -> Session:
        session = super().start(mode, **overrides)
        aiohttp_adapter.install(session)
        return session


@pytest.fixture
def aio_recorder(tmp_path: Path) -> Iterator[AioRecorder]:
    rec = AioRecorder(tmp_path)
    try:
        yield rec
    finally:
        aiohttp_adapter.uninstall()
        httpx_adapter.uninstall()
        if rec.session is not None:
            rec.session.close()


@dataclass
class Phases(Generic[T]):
    live: T
    offline: T
    fresh: T
    live_calls: int
    files: list[Path]


def three_phases(
    recorder: AioRecorder,
    run: Callable[[str], T],
    *,
    test_id: str = TEST_ID,
    **overrides: object,
) -> Phases[T]:
    """Run `run(base_url)` live (recorded), then replayed twice; asserts that the replays
    opened no socket, reached no server and missed nothing. `overrides` are config keys of
    the recording run."""
    with FakeUpstream() as fake:
        recorder.start(Mode.RECORD, **overrides)
        with test_context(test_id):
            live = run(fake.url)
        dead_url = fake.url
        live_calls = len(fake.calls)
    files = recorder.files()

    session = recorder.start(Mode.REPLAY)
    with ConnectGuard() as guard, test_context(test_id):
        offline = run(dead_url)
    assert guard.attempts == []
    assert session.stats.missed == 0

    with FakeUpstream() as fresh_fake:
        session = recorder.start(Mode.REPLAY)
        with test_context(test_id):
            fresh = run(fresh_fake.url)
        assert fresh_fake.calls == []
    assert session.stats.missed == 0
    assert session.stats.replayed > 0
    return Phases(live, offline, fresh, live_calls, files)
