"""aiohttp's `ws_connect` recorded and replayed (docs/design.md §17), against a local fake
realtime server (tests/fakes/aio_realtime.py: fresh ids per event): record, replay with the
server stopped and no socket, a re-record with zero diff, a changed client frame as a named
miss (and the same frame under an `ignore` path), two connections in order, a server close,
a cut, a refused and an unanswered handshake, the bound by `max_body_bytes`, bounded waits,
a connection left open, and the patch undone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import WSMsgType

from hashreplay import Mode, test_context
from hashreplay.adapters import aiohttp_ws as adapter
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.core.errors import BodyTooLarge, ReplayFailure, ReplayMiss
from hashreplay.engine import frame_replay
from hashreplay.engine.session import Session
from tests.conftest import Recorder
from tests.fakes.aio_realtime import FakeRealtime
from tests.guards import ConnectGuard

T = TypeVar("T")
TEST_ID = "tests/test_voice.py::test_talk"
KEY = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm" * 2
PATH = "/v1/realtime?model=gpt-realtime"


class WsRecorder(Recorder):
    def start(self, mode: Mode | str, **overrides: object) -> Session:
        session = super().start(mode, **overrides)
        adapter.install(session)
        return session

    def end(self) -> list[ReplayFailure]:
        assert self.session is not None
        misses = self.session.end_test(TEST_ID)
        self.session.flush()
        return misses


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[WsRecorder]:
    recorder = WsRecorder(tmp_path)
    try:
        yield recorder
    finally:
        adapter.uninstall()
        httpx_adapter.uninstall()
        if recorder.session is not None:
            recorder.session.close()


def run(make: Callable[[aiohttp.ClientSession], Awaitable[T]]) -> T:
    async def go() -> T:
        async with aiohttp.ClientSession() as s:
            return await make(s)

    with test_context(TEST_ID):
        return asyncio.run(go())


def connect(s: aiohttp.ClientSession, url: str, **kwargs: Any) -> Any:
    return s.ws_connect(f"{url}{PATH}", headers={"Authorization": f"Bearer {KEY}"}, **kwargs)


async def talk(
    s: aiohttp.ClientSession, url: str, *, instructions: str = "be brief", text: str = "hi"
) -> list[Any]:
    """A realtime conversation: session, user item, a response with deltas and audio."""
    got: list[Any] = []
    async with connect(s, url) as ws:
        got.append((await ws.receive_json())["type"])
        await ws.send_json({"type": "session.update", "session": {"instructions": instructions}})
        got.append((await ws.receive_json())["type"])
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
        await ws.send_json({"type": "conversation.item.create", "item": item})
        created = await ws.receive_json()
        got.append((created["type"], created["item"]["id"].startswith(("item_", "rec-"))))
        await ws.send_json({"type": "response.create"})
        async for msg in ws:
            if msg.type is WSMsgType.BINARY:
                got.append(msg.data[:7])
                continue
            event = msg.json()
            got.append(event.get("delta") or event["type"])
            if event["type"] == "response.done":
                break
    got.append(ws.closed)
    return got


EXPECTED = [
    "session.created",
    "session.updated",
    ("conversation.item.created", True),
    "response.created",
    "Hel",
    "lo",
    b"\x00\x01audio",
    "response.done",
    True,
]


def record(rec: WsRecorder, script: Callable[[aiohttp.ClientSession, str], Awaitable[T]]) -> T:
    with FakeRealtime() as fake:
        rec.start(Mode.RECORD)
        got = run(lambda s: script(s, fake.url))
        assert rec.end() == []
    return got


def replay(
    rec: WsRecorder,
    script: Callable[[aiohttp.ClientSession, str], Awaitable[T]],
    **overrides: object,
) -> tuple[T, list[ReplayFailure]]:
    rec.start(Mode.REPLAY, **overrides)
    with ConnectGuard() as guard:
        got = run(lambda s: script(s, "ws://127.0.0.1:9"))  # nothing listens there
    assert guard.attempts == []
    return got, rec.end()


def the_file(rec: WsRecorder) -> dict[str, Any]:
    (path,) = rec.files()
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


# --- install / uninstall -----------------------------------------------------------------


def test_uninstall_restores_the_original_ws_connect(rec: WsRecorder) -> None:
    before = aiohttp.ClientSession._ws_connect
    rec.start(Mode.REPLAY)
    assert aiohttp.ClientSession._ws_connect is not before
    assert aiohttp.ClientSession._ws_connect.__wrapped__ is before  # type: ignore[attr-defined]
    rec.start(Mode.RECORD)  # installing again only swaps the session
    assert aiohttp.ClientSession._ws_connect.__wrapped__ is before  # type: ignore[attr-defined]
    adapter.uninstall()
    assert aiohttp.ClientSession._ws_connect is before
    assert not adapter.is_installed()


def test_without_a_session_the_connection_is_aiohttps_own() -> None:
    with FakeRealtime() as fake:

        async def go(s: aiohttp.ClientSession) -> Any:
            async with connect(s, fake.url) as ws:
                return type(ws), (await ws.receive_json())["type"]

        kind, first = run(go)
    assert kind is aiohttp.ClientWebSocketResponse and first == "session.created"


# --- record, replay, re-record -----------------------------------------------------------


def test_a_conversation_is_recorded_and_replays_with_the_server_stopped(rec: WsRecorder) -> None:
    assert record(rec, talk) == EXPECTED
    data = the_file(rec)
    response = data["response"]
    assert response["status"] == 101
    frames = response["frames"]
    directions = [(f["direction"], f["type"]) for f in frames]
    assert directions[:3] == [("received", "text"), ("sent", "text"), ("received", "text")]
    assert ("received", "binary") in directions
    assert directions[-1] == ("sent", "close")  # the client closed (the context manager)
    assert frames[0]["data"]["event_id"].startswith("rec-")  # fresh ids made stable
    assert frames[1]["data"] == {"type": "session.update", "session": {"instructions": "be brief"}}
    assert frames[2]["after_sent"] == 1
    text = json.dumps(data)
    assert KEY not in text  # the handshake's Authorization never written

    got, misses = replay(rec, talk)
    assert got == EXPECTED
    assert misses == []
    assert rec.session is not None and rec.session.stats.missed == 0


def test_a_replayed_connection_is_an_aiohttp_websocket_response(rec: WsRecorder) -> None:
    record(rec, talk)
    rec.start(Mode.REPLAY)

    async def go(s: aiohttp.ClientSession, url: str) -> Any:
        ws = await connect(s, url)  # awaited, not entered
        first = await ws.receive()
        facts = (isinstance(ws, aiohttp.ClientWebSocketResponse), first.type, ws.closed)
        assert await ws.close() is True
        assert await ws.close() is False  # closing twice, as aiohttp: False
        after = await ws.receive()
        with pytest.raises(aiohttp.ClientConnectionResetError):
            await ws.send_str("late")
        return (*facts, ws.closed, ws.close_code, after.type)

    got, misses = replay(rec, go)
    assert got == (True, WSMsgType.TEXT, False, True, 1000, WSMsgType.CLOSED)
    assert misses == []


def test_a_re_recording_is_byte_for_byte_the_same(rec: WsRecorder) -> None:
    record(rec, talk)
    (path,) = rec.files()
    first = path.read_bytes()
    record(rec, talk)  # a fresh server: fresh ids and timestamps
    assert rec.files() == [path]
    assert path.read_bytes() == first


def test_a_changed_client_frame_is_a_miss_naming_file_frame_and_field(rec: WsRecorder) -> None:
    record(rec, talk)
    (path,) = rec.files()
    before = path.read_bytes()
    rec.start(Mode.REPLAY)

    async def go(s: aiohttp.ClientSession, url: str) -> str:
        with pytest.raises(ReplayMiss) as caught:
            await talk(s, url, instructions="be verbose")
        return str(caught.value)

    report, misses = replay(rec, go)
    assert len(misses) == 1 and str(misses[0]) == report
    assert path.name in report
    assert "frames[1] (sent text)" in report
    assert "session.instructions" in report
    assert TEST_ID in report
    assert path.read_bytes() == before  # a miss never rewrites the recording


def test_a_frame_under_an_ignore_path_is_not_compared(rec: WsRecorder) -> None:
    record(rec, talk)
    got, misses = replay(
        rec,
        lambda s, url: talk(s, url, instructions="be verbose"),
        ignore=["frames[*].session.instructions"],
    )
    assert got == EXPECTED and misses == []


def test_a_frame_past_the_recordings_end_is_a_miss(rec: WsRecorder) -> None:
    async def short(s: aiohttp.ClientSession, url: str) -> None:
        async with connect(s, url) as ws:
            await ws.receive_json()

    record(rec, short)
    rec.start(Mode.REPLAY)

    async def more(s: aiohttp.ClientSession, url: str) -> str:
        async with connect(s, url) as ws:
            await ws.receive_json()
            with pytest.raises(ReplayMiss) as caught:
                await ws.send_json({"type": "response.create"})
            return str(caught.value)

    report, misses = replay(rec, more)
    assert "past the recording's end" in report and len(misses) == 1


def test_no_recording_fails_the_connect_with_the_miss_report(rec: WsRecorder) -> None:
    rec.start(Mode.REPLAY)

    async def go(s: aiohttp.ClientSession, url: str) -> str:
        with pytest.raises(ReplayMiss) as caught:
            await connect(s, url)
        return str(caught.value)

    report, misses = replay(rec, go)
    assert "GET" in report and "/v1/realtime" in report and len(misses) == 1


def test_two_connections_in_one_test_replay_in_the_order_made(rec: WsRecorder) -> None:
    async def twice(s: aiohttp.ClientSession, url: str) -> list[Any]:
        return [await talk(s, url, text="first"), await talk(s, url, text="second")]

    record(rec, twice)
    data = the_file(rec)
    assert len(data["later_responses"]) == 1
    got, misses = replay(rec, twice)
    assert got == [EXPECTED, EXPECTED] and misses == []

    async def swapped(s: aiohttp.ClientSession, url: str) -> str:
        await talk(s, url, text="first")
        await talk(s, url, text="first")
        return "unreachable"

    rec.start(Mode.REPLAY)
    with pytest.raises(ReplayMiss) as caught:
        run(lambda s: swapped(s, "ws://127.0.0.1:9"))
    assert "frames[3]" in str(caught.value) and "second" in str(caught.value)
    assert len(rec.end()) == 1


def test_binary_frames_each_way_are_recorded_as_base64_and_replayed(rec: WsRecorder) -> None:
    async def audio(s: aiohttp.ClientSession, url: str) -> list[Any]:
        async with connect(s, url) as ws:
            await ws.receive_json()
            await ws.send_bytes(b"\x01\x02\xfe")
            echoed = await ws.receive_bytes()
            return [echoed]

    assert record(rec, audio) == [b"\xfe\x02\x01"]
    frames = the_file(rec)["response"]["frames"]
    assert frames[1]["type"] == "binary" and frames[1]["data_encoding"] == "base64"
    got, misses = replay(rec, audio)
    assert got == [b"\xfe\x02\x01"] and misses == []


# --- how a connection ends ---------------------------------------------------------------


async def say_bye(s: aiohttp.ClientSession, url: str) -> list[Any]:
    ws = await connect(s, url)
    await ws.receive_json()
    await ws.send_json({"type": "bye"})
    msg = await ws.receive()
    after = await ws.receive()
    return [msg.type, msg.data, msg.extra, ws.closed, ws.close_code, after.type]


def test_a_servers_close_code_and_reason_are_reproduced(rec: WsRecorder) -> None:
    live = record(rec, say_bye)
    assert live == [WSMsgType.CLOSE, 4000, "bye", True, 4000, WSMsgType.CLOSED]
    close = the_file(rec)["response"]["frames"][-1]
    assert (close["direction"], close["type"], close["code"], close["reason"]) == (
        "received",
        "close",
        4000,
        "bye",
    )
    got, misses = replay(rec, say_bye)
    assert got == live and misses == []


async def get_cut(s: aiohttp.ClientSession, url: str) -> list[Any]:
    ws = await connect(s, url)
    await ws.receive_json()
    await ws.send_json({"type": "cut"})
    msg = await ws.receive()
    return [msg.type, ws.closed, ws.close_code]


def test_a_connection_cut_mid_stream_replays_as_cut_never_as_closed(rec: WsRecorder) -> None:
    live = record(rec, get_cut)
    assert live == [WSMsgType.CLOSED, True, 1006]
    response = the_file(rec)["response"]
    assert response["ended"]["state"] == "error"
    assert all(f["type"] != "close" for f in response["frames"])
    got, misses = replay(rec, get_cut)
    assert got == live and misses == []


def test_a_connection_left_open_is_recorded_abandoned_and_a_read_past_it_fails(
    rec: WsRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def leave(s: aiohttp.ClientSession, url: str) -> str:
        ws = await connect(s, url)
        first: str = (await ws.receive_json())["type"]
        return first  # never closed: the test's end records it

    with FakeRealtime() as fake:
        rec.start(Mode.RECORD)
        assert run(lambda s: leave(s, fake.url)) == "session.created"
        assert rec.end() == []
    assert the_file(rec)["response"]["ended"]["state"] == "abandoned"

    monkeypatch.setattr(adapter, "WAIT_LIMIT_S", 0.05)

    async def read_on(s: aiohttp.ClientSession, url: str) -> str:
        ws = await connect(s, url)
        await ws.receive_json()
        with pytest.raises(ReplayFailure) as caught:
            await ws.receive()
        return str(caught.value)

    report, misses = replay(rec, read_on)
    assert "stopped reading there" in report and len(misses) == 1


def test_a_receive_waiting_for_a_gated_frame_honours_timeouts_and_the_bound(
    rec: WsRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(rec, talk)
    rec.start(Mode.REPLAY)

    async def impatient(s: aiohttp.ClientSession, url: str) -> list[Any]:
        async with connect(s, url) as ws:
            await ws.receive_json()
            # session.updated arrived after the client's first frame: it waits for it
            with pytest.raises(asyncio.TimeoutError):
                await ws.receive(timeout=0.01)
            return [ws.close_code]

    got, misses = replay(rec, impatient)
    assert got == [1006] and misses == []  # the caller's own timeout is no failure

    monkeypatch.setattr(adapter, "WAIT_LIMIT_S", 0.05)

    async def stuck(s: aiohttp.ClientSession, url: str) -> str:
        async with connect(s, url) as ws:
            await ws.receive_json()
            with pytest.raises(ReplayFailure) as caught:
                await ws.receive()
            return str(caught.value)

    report, misses = replay(rec, stuck)
    assert "recorded frame 2" in report and "sent 1 frame(s)" in report
    assert len(misses) == 1
    assert frame_replay.WAIT_LIMIT_S == 10.0  # the engine's own bound is untouched


def test_a_refused_handshake_is_recorded_and_replayed_as_aiohttps_error(rec: WsRecorder) -> None:
    async def refused(s: aiohttp.ClientSession, url: str) -> int:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await s.ws_connect(f"{url}/refuse")
        return caught.value.status

    assert record(rec, refused) == 401
    assert the_file(rec)["response"]["status"] == 401
    got, misses = replay(rec, refused)
    assert got == 401 and misses == []


def test_a_handshake_with_no_answer_is_not_recorded(rec: WsRecorder) -> None:
    with FakeRealtime() as fake:
        dead = fake.url
    rec.start(Mode.RECORD)

    async def go(s: aiohttp.ClientSession) -> None:
        with pytest.raises(aiohttp.ClientConnectionError):
            await connect(s, dead)

    run(go)
    assert rec.end() == []
    assert rec.files() == []


def test_a_server_that_streams_forever_is_bounded_by_max_body_bytes(rec: WsRecorder) -> None:
    async def flood(s: aiohttp.ClientSession, url: str) -> None:
        async with connect(s, url) as ws:
            await ws.receive_json()
            await ws.send_json({"type": "flood"})
            with pytest.raises(BodyTooLarge):
                while True:
                    await ws.receive()

    with FakeRealtime() as fake:
        rec.start(Mode.RECORD, max_body_bytes=20_000)
        run(lambda s: flood(s, fake.url))
        failures = rec.end()
    assert rec.files() == []
    assert len(failures) == 1 and "max_body_bytes" in str(failures[0])


def test_live_mode_and_a_replayed_connection_of_another_test_stay_apart(rec: WsRecorder) -> None:
    with FakeRealtime() as fake:
        rec.start(Mode.LIVE)
        assert run(lambda s: talk(s, fake.url)) == EXPECTED
        assert rec.end() == []
        assert fake.connections == 1
    assert rec.files() == []


# --- faults (docs/scenarios.md, "WebSocket faults") ----------------------------------------


def faulted(rec: WsRecorder, **fault: Any) -> Session:
    from hashreplay.engine.faults import FaultSpec

    session = rec.start(Mode.REPLAY)
    session.begin_test(TEST_ID)
    session.set_test_options(TEST_ID, faults=[FaultSpec.parse(fault)])
    return session


async def read_all(s: aiohttp.ClientSession, url: str) -> list[Any]:
    """Receive until the connection ends, sending the recorded frames as they are due."""
    got: list[Any] = []
    async with connect(s, url) as ws:
        got.append((await ws.receive_json())["type"])
        await ws.send_json({"type": "session.update", "session": {"instructions": "be brief"}})
        msg = await ws.receive()
        got.append(msg.json()["type"] if msg.type is WSMsgType.TEXT else msg.type)
        if msg.type is WSMsgType.TEXT:
            msg = await ws.receive()
            got.append(msg.type)
        got.append((msg.data, msg.extra, ws.close_code))
    return got


def test_a_drop_after_n_frames_replays_as_a_cut(rec: WsRecorder) -> None:
    record(rec, talk)
    faulted(rec, error="disconnect", after_frames=1)
    with ConnectGuard() as guard:
        got = run(lambda s: read_all(s, "ws://127.0.0.1:9"))
    assert guard.attempts == []
    assert got == ["session.created", WSMsgType.CLOSED, (None, None, 1006)]
    assert rec.end() == []


def test_a_close_after_n_frames_replays_as_the_servers_close(rec: WsRecorder) -> None:
    record(rec, talk)
    faulted(rec, close=1011, after_frames=1, reason="overloaded")
    got = run(lambda s: read_all(s, "ws://127.0.0.1:9"))
    # the client's frame recorded before the server's next one still goes first
    assert got == ["session.created", WSMsgType.CLOSE, (1011, "overloaded", 1011)]
    assert rec.end() == []


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        ({"close": 1011}, "close=<code> needs after_frames=N"),
        ({"error": "read_timeout", "after_frames": 1}, 'after_frames goes with error="disconnect"'),
        ({"after_frames": 1}, "give exactly one of status, error, hang or close"),
        ({"close": 99, "after_frames": 1}, "close=99 is not a close code"),
        ({"error": "disconnect", "after_frames": 1, "after_chunks": 1}, "do not go together"),
        ({"reason": "x", "error": "disconnect"}, "reason goes with close=<code>"),
    ],
)
def test_a_malformed_websocket_fault_is_a_usage_error_naming_it(
    fault: dict[str, Any], problem: str
) -> None:
    from hashreplay.core.errors import ConfigError
    from hashreplay.engine.faults import FaultSpec

    with pytest.raises(ConfigError) as caught:
        FaultSpec.parse(fault)
    assert problem in str(caught.value)
    assert "after_frames=N" in str(caught.value)  # the valid forms name it


def test_a_websocket_fault_leaves_http_requests_and_the_recording_alone(rec: WsRecorder) -> None:
    from hashreplay.engine.faults import ActiveFault, FaultSpec, TestOptions
    from hashreplay.engine.http import IncomingRequest
    from hashreplay.engine.scenarios import fault_for

    spec = FaultSpec.parse({"error": "disconnect", "after_frames": 0})
    options = TestOptions(faults=[ActiveFault(spec)])
    http = IncomingRequest("GET", "https://api.example.test/v1/realtime", [], b"")
    ws = IncomingRequest("GET", "wss://api.example.test/v1/realtime", [], b"")
    assert fault_for(options, http) is None
    assert fault_for(options, ws) is spec
    record(rec, talk)
    (path,) = rec.files()
    before = path.read_bytes()
    faulted(rec, error="disconnect", after_frames=0)
    got = run(lambda s: read_all_cut(s, "ws://127.0.0.1:9"))
    assert got == [WSMsgType.CLOSED, 1006]
    assert path.read_bytes() == before


async def read_all_cut(s: aiohttp.ClientSession, url: str) -> list[Any]:
    async with connect(s, url) as ws:
        msg = await ws.receive()
        return [msg.type, ws.close_code]


def test_a_template_in_a_frame_is_replayed_as_recorded(rec: WsRecorder) -> None:
    """Templates fill HTTP answers from the request body; a handshake has none, so a frame
    holding one (hand-edited) is delivered as written (docs/usage.md, "Realtime APIs")."""
    record(rec, talk)
    (path,) = rec.files()
    data = json.loads(path.read_text())
    data["response"]["frames"][0]["data"]["session"]["model"] = "{{request:body.model}}"
    path.write_text(json.dumps(data, indent=2))

    async def first(s: aiohttp.ClientSession, url: str) -> Any:
        async with connect(s, url) as ws:
            return (await ws.receive_json())["session"]["model"]

    got, misses = replay(rec, first)
    assert got == "{{request:body.model}}" and misses == []
