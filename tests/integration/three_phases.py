"""The three phases every real client goes through: record against the fake
upstream; replay with it stopped (no connection attempted); replay with a fresh fake on a
new port that receives no request. Every adapter is active, as under the pytest plugin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import activate, deactivate
from hashreplay.engine.session import Session
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

TEST_ID = "tests/test_clients.py::test_offline"


class AllAdapters(Recorder):
    """A `Recorder` that activates every adapter (httpx, urllib3, http.client, ...)."""

    def start(self, mode: Mode | str, **overrides: object) -> Session:
        session = super().start(mode, **overrides)
        activate(session)
        return session


@pytest.fixture
def adapters(tmp_path: Path) -> Iterator[AllAdapters]:
    rec = AllAdapters(tmp_path)
    try:
        yield rec
    finally:
        deactivate()
        if rec.session is not None:
            rec.session.close()


@dataclass
class Phases:
    live: Any
    offline: Any
    fresh: Any
    recorded_files: int
    live_calls: int


def three_phases(
    upstream: FakeUpstream, rec: AllAdapters, run: Callable[[str], Any], **overrides: object
) -> Phases:
    """Run `run(base_url)` in the three phases; asserts that replay opened no connection,
    sent nothing to the fresh fake and missed nothing. `overrides`: config of every phase."""
    rec.start(Mode.RECORD, **overrides)
    with test_context(TEST_ID):
        live = run(upstream.url)
    files = len(rec.files())
    live_calls = len(upstream.calls)
    url = upstream.url
    upstream.stop()

    session = rec.start(Mode.REPLAY, **overrides)
    with ConnectGuard() as guard, test_context(TEST_ID):
        offline = run(url)
    assert guard.attempts == []
    assert session.stats.missed == 0

    with FakeUpstream() as fresh_fake:
        session = rec.start(Mode.REPLAY, **overrides)
        with test_context(TEST_ID):
            fresh = run(fresh_fake.url)
        assert fresh_fake.calls == []
        assert session.stats.missed == 0
    return Phases(live, offline, fresh, files, live_calls)


class ChunkedSSE(BaseHTTPRequestHandler):
    """The handler of a hand-timed test upstream: HTTP/1.1, silent, an SSE response sent in
    `transfer-encoding: chunked` pieces whose timing the subclass's `do_GET` decides."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
        self.wfile.flush()

    def end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
