"""A session's server-push stream (MCP's GET stream over streamable HTTP) and the session id
a server hands out in a header (docs/recordings.md, "MCP over streamable HTTP"): stored
complete when its client closes or cancels it, answered again when the client reconnects
past the recorded ones in replay; the session id stable in every file and key."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from hashreplay import Mode
from hashreplay.core.config import load_config
from hashreplay.core.format import EndState
from hashreplay.engine.http import IncomingRequest, LiveBody, LiveExchange
from hashreplay.engine.replay import Miss, Record, Replay
from hashreplay.engine.session import Session

TEST = "tests/test_agent.py::test_tools"
URL = "http://127.0.0.1:9/mcp"
ACCEPT = ("accept", "application/json, text/event-stream")
SSE = [("content-type", "text/event-stream")]
LIVE_SESSION = "0f3c9a1e5b7d4c2a8e6f1b3d5a7c9e0f"


def session(root: Path, mode: Mode, **overrides: object) -> Session:
    s = Session(load_config(root, env={}, mode=mode.value, **overrides))
    s.begin_test(TEST)
    return s


def initialize() -> IncomingRequest:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = [ACCEPT, ("content-type", "application/json")]
    return IncomingRequest("POST", URL, headers, json.dumps(body).encode())


def get_stream(session_id: str) -> IncomingRequest:
    return IncomingRequest("GET", URL, [ACCEPT, ("mcp-session-id", session_id)], b"")


def initialized(session_id: str) -> LiveExchange:
    answer = b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'
    return LiveExchange(200, [*SSE, ("mcp-session-id", session_id)], [answer])


def test_only_a_session_get_for_events_is_a_push_stream(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    assert s.prepare(get_stream(LIVE_SESSION), test_id=TEST).push is True
    assert s.prepare(initialize(), test_id=TEST).push is False
    assert s.prepare(IncomingRequest("GET", URL, [ACCEPT], b""), test_id=TEST).push is False


@pytest.mark.parametrize("closed", ["closed", "cancelled"])
def test_a_push_stream_its_client_ends_is_stored_complete(closed: str) -> None:
    body = LiveBody(200, SSE, push=True)
    body.feed(b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/x"}\n\n')
    exc = asyncio.CancelledError() if closed == "cancelled" else None
    exchange = body.exchange(exc, abandoned=True)
    assert exchange is not None
    assert exchange.abandoned is False and exchange.exception is None


def test_an_ordinary_stream_cut_off_stays_abandoned_and_a_cancelled_one_unrecorded() -> None:
    cut = LiveBody(200, SSE)
    cut.feed(b'data: {"type":"delta"}\n\n')
    exchange = cut.exchange(None, abandoned=True)
    assert exchange is not None and exchange.abandoned is True
    cancelled = LiveBody(200, SSE)
    assert cancelled.exchange(asyncio.CancelledError()) is None


def test_ctrl_c_while_a_push_stream_closes_records_nothing() -> None:
    body = LiveBody(200, SSE, push=True)
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        assert body.exchange(asyncio.CancelledError()) is None


def test_the_session_id_is_stable_and_a_reconnect_replays_the_last_stream(
    tmp_path: Path,
) -> None:
    rec = session(tmp_path, Mode.RECORD, match_headers=["mcp-session-id"])
    first = rec.decide(initialize(), test_id=TEST)
    assert isinstance(first, Record)
    rec.record(first.prep, initialized(LIVE_SESSION))
    opened = rec.decide(get_stream(LIVE_SESSION), test_id=TEST)
    assert isinstance(opened, Record)
    body = rec.live_body(opened.prep, 200, [*SSE, ("mcp-session-id", LIVE_SESSION)])
    stream_file = rec.record(opened.prep, body.exchange(asyncio.CancelledError()))
    rec.close()
    stored = json.loads(stream_file.read_text())
    stable = stored["request"]["headers"]["mcp-session-id"]
    assert stable.startswith("rec-") and LIVE_SESSION not in stream_file.read_text()
    assert stored["response"]["headers"]["mcp-session-id"] == stable
    assert stored["response"].get("ended") is None
    assert stored["response"]["is_streaming"] is True

    replay = session(tmp_path, Mode.REPLAY, match_headers=["mcp-session-id"])
    again = replay.decide(initialize(), test_id=TEST)
    assert isinstance(again, Replay)
    assert dict(again.plan().headers)["mcp-session-id"] == stable  # what the client sends back
    for _ in range(3):  # the client reconnecting after the stream ended: never a miss
        decision = replay.decide(get_stream(stable), test_id=TEST)
        assert isinstance(decision, Replay)
        assert decision.response.end_state is EndState.COMPLETE
    # an ordinary request past its recording's end still misses
    assert isinstance(replay.decide(initialize(), test_id=TEST), Miss)
    # and another session id is another key under `match_headers`
    assert isinstance(replay.decide(get_stream("rec-ffffffffffff"), test_id=TEST), Miss)
