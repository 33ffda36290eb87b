"""WebSocket clients recorded and replayed (docs/design.md §17), against the local fakes of
tests/fakes/realtime.py: the raw `websockets` asyncio and sync clients, the openai SDK's
Realtime and Responses WebSocket mode (`websocket_base_url`), and google-genai's Live client
over TLS. Each is recorded, replayed with the server stopped, no key and no socket opened,
and recorded again to the same bytes; then the failure paths: a changed client frame, two
connections in one test, a server that streams forever, a handshake with no answer, a
refused handshake, a connection cut mid-stream, a wait for a frame that never comes."""

from __future__ import annotations

import asyncio
import difflib
import json
import socket
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import connect as aconnect
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK, InvalidStatus
from websockets.sync.client import connect as sconnect

from hashreplay import Mode, adapters, test_context
from hashreplay.adapters import websockets as ws_adapter
from hashreplay.core.config import load_config
from hashreplay.core.errors import ReplayFailure
from hashreplay.engine.session import Session
from tests.fakes.realtime import FakeRealtime
from tests.guards import ConnectGuard
from tests.sdks import required, sdk

TEST = "tests/integration/test_app.py::test_voice"
KEY = "sk-proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt" * 2
GOOGLE_KEY = "AIzaSy" + "B1c2D3e4F5g6H7i8J9k0L1m2N3o4P5q"


@dataclass
class Run:
    result: Any
    misses: list[ReplayFailure]
    session: Session


class Project:
    """A temporary project whose tests' connections go through every adapter."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.session: Session | None = None

    def run(self, mode: Mode, body: Callable[[], Any], **overrides: Any) -> Run:
        session = Session(
            load_config(self.root, env={}, mode=mode.value, **overrides), write_behind=True
        )
        self.session = session
        session.begin_test(TEST)
        adapters.activate(session)
        try:
            with test_context(TEST):
                result = body()
        finally:
            misses = session.end_test(TEST)
            session.flush()
            adapters.deactivate()
            session.close()
        return Run(result, misses, session)

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*.json") if ".hashreplay" not in p.parts)

    def text(self) -> str:
        return "".join(p.read_text() for p in self.files())


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    yield Project(tmp_path)
    adapters.deactivate()


def three_phases(
    project: Project, body: Callable[[FakeRealtime], Any], *, tls: bool = False
) -> tuple[Any, list[Path]]:
    """Record against a fake; replay with it stopped (no socket opened); record again
    against a fresh fake: the same result each time, and the same bytes on disk."""
    with FakeRealtime(tls=tls) as server:
        live = project.run(Mode.RECORD, lambda: body(server))
    assert live.misses == []
    files = project.files()
    assert files, "nothing was recorded"
    first = {p: p.read_bytes() for p in files}
    with ConnectGuard() as guard:
        offline = project.run(Mode.REPLAY, lambda: body(server))  # the server is gone
    assert guard.attempts == [], f"replay opened sockets: {guard.attempts}"
    assert offline.misses == []
    assert offline.result == live.result
    connections = sum(1 + len(json.loads(p.read_text()).get("later_responses", [])) for p in files)
    assert offline.session.stats.replayed == connections
    with FakeRealtime(tls=tls) as fresh:
        again = project.run(Mode.RECORD, lambda: body(fresh))
    assert again.misses == []
    assert again.result == live.result
    for path in project.files():
        diff = difflib.unified_diff(
            first.get(path, b"").decode().splitlines(), path.read_text().splitlines(), lineterm=""
        )
        assert path in first and path.read_bytes() == first[path], "\n".join(diff)
    text = project.text()
    assert KEY not in text and GOOGLE_KEY not in text
    return live.result, files


# --- the raw library, asyncio and sync ------------------------------------------------------


def raw_async(server: FakeRealtime, *, said: str = "hi") -> list[Any]:
    async def go() -> list[Any]:
        got: list[Any] = []
        url = f"{server.url}/echo?key={KEY}"
        async with aconnect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            got.append(json.loads(await ws.recv())["type"])
            await ws.send(json.dumps({"say": said}))
            echo = json.loads(await ws.recv())
            got.append((echo["type"], echo["got"]))
            got.append(await ws.recv())
            await ws.send(json.dumps({"close": [4000, "bye now"]}))
            try:
                await ws.recv()
            except ConnectionClosedError as exc:
                got.append(("closed", exc.rcvd.code if exc.rcvd else None, ws.close_reason))
        return got

    return asyncio.run(go())


def test_raw_asyncio_client(project: Project) -> None:
    result, files = three_phases(project, raw_async)
    assert result == [
        "hello",
        ("echo", {"say": "hi"}),
        b"\x00\x01binary\xff",
        ("closed", 4000, "bye now"),
    ]
    assert len(files) == 1
    frames = json.loads(files[0].read_text())["response"]["frames"]
    assert frames[0]["data"]["event_id"].startswith("rec-")
    assert frames[0]["data"]["created_at"] == 0
    assert frames[3] == {
        "after_sent": 1,
        "data": "AAFiaW5hcnn/",
        "data_encoding": "base64",
        "direction": "received",
        "type": "binary",
    }


def raw_sync(server: FakeRealtime) -> list[Any]:
    got: list[Any] = []
    with sconnect(f"{server.url}/echo", additional_headers=[("api-key", KEY)]) as ws:
        got.append(json.loads(ws.recv(timeout=5))["type"])
        ws.send(json.dumps({"say": "sync"}))
        got.append(json.loads(ws.recv())["got"])
        got.append(ws.recv())
        with pytest.raises(TimeoutError):  # nothing more comes before the client sends
            ws.recv(timeout=0.05)
        for message in []:  # iteration is the library's own
            got.append(message)
    got.append(ws.close_code)
    return got


def test_raw_sync_client(project: Project) -> None:
    result, _ = three_phases(project, raw_sync)
    assert result == ["hello", {"say": "sync"}, b"\x00\x01binary\xff", 1000]


def test_the_originals_are_restored(project: Project) -> None:
    before = (
        websockets.asyncio.client.connect.connect,
        websockets.sync.client.reconnect.open_connection,
    )
    session = Session(load_config(project.root, env={}, mode="replay"))
    adapters.activate(session)
    assert ws_adapter.is_installed()
    assert websockets.asyncio.client.connect.connect is not before[0]
    adapters.deactivate()
    assert not ws_adapter.is_installed()
    after = (
        websockets.asyncio.client.connect.connect,
        websockets.sync.client.reconnect.open_connection,
    )
    assert after == before


# --- the SDKs -------------------------------------------------------------------------------------


def test_openai_realtime(project: Project) -> None:
    openai = sdk("openai")

    def body(server: FakeRealtime) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            client = openai.AsyncOpenAI(api_key=KEY, websocket_base_url=f"{server.url}/v1")
            seen: list[str] = []
            text = ""
            async with client.realtime.connect(model="gpt-realtime") as conn:
                await conn.session.update(session={"type": "realtime", "instructions": "be brief"})
                await conn.conversation.item.create(
                    item={
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "hello realtime"}],
                    }
                )
                await conn.response.create()
                async for event in conn:
                    seen.append(event.type)
                    if event.type == "response.output_text.delta":
                        text += event.delta
                    if event.type == "response.done":
                        break
            return {"seen": seen, "text": text}

        return asyncio.run(go())

    result, files = three_phases(project, body)
    assert result["text"] == "echo: hello realtime"
    assert result["seen"][0] == "session.created"
    assert "response.output_audio.delta" in result["seen"]
    assert result["seen"][-1] == "response.done"
    (path,) = files
    stored = json.loads(path.read_text())
    assert stored["request"]["headers"].get("authorization") in (None, "[secret removed]")
    frames = stored["response"]["frames"]
    ids = [
        f["data"].get("event_id") for f in frames if f["direction"] == "received" and "data" in f
    ]
    assert ids and all(i.startswith("rec-") for i in ids)


def test_openai_responses_websocket_mode(project: Project) -> None:
    openai = sdk("openai")
    if not hasattr(openai.OpenAI(api_key="x").responses, "connect"):
        # an openai older than the mode (it came after 2.0, the floor `dev` allows): in CI,
        # where the SDKs are required at their newest, a missing mode is a failure
        why = f"openai {openai.__version__} has no Responses WebSocket mode (client.responses.connect)"
        if required():
            pytest.fail(why)
        pytest.skip(f"{why}: pip install -U openai to run this test")

    def body(server: FakeRealtime) -> list[str]:
        client = openai.OpenAI(api_key=KEY, websocket_base_url=f"{server.url}/v1")
        texts = []
        with client.responses.connect() as conn:
            conn.send({"type": "response.create", "model": "gpt-fake", "input": "over a socket"})
            text = ""
            for event in conn:
                if event.type == "response.output_text.delta":
                    text += event.delta
                if event.type == "response.completed":
                    break
            texts.append(text)
        return texts

    result, _ = three_phases(project, body)
    assert result == ["echo: over a socket"]


def test_gemini_live_over_tls(project: Project) -> None:
    genai = sdk("google.genai")
    from google.genai import types

    def body(server: FakeRealtime) -> str:
        async def go() -> str:
            options = types.HttpOptions(
                base_url=server.url.replace("wss://", "https://"),
                async_client_args={"ssl": server.client_ssl()},
            )
            client = genai.Client(api_key=GOOGLE_KEY, http_options=options)
            config = types.LiveConnectConfig(response_modalities=[types.Modality.TEXT])
            text = ""
            async with client.aio.live.connect(model="gemini-live-fake", config=config) as live:
                await live.send_client_content(
                    turns=types.Content(role="user", parts=[types.Part(text="hello gemini")])
                )
                async for message in live.receive():
                    if message.text:
                        text += message.text
                    if message.server_content and message.server_content.turn_complete:
                        break
            return text

        return asyncio.run(go())

    result, files = three_phases(project, body, tls=True)
    assert result.strip() == "gemini says: hello gemini"
    stored = json.loads(files[0].read_text())
    assert stored["request"]["url"].startswith("wss://")
    sent = [f for f in stored["response"]["frames"] if f["direction"] == "sent"]
    assert "setup" in sent[0]["data"]


# --- failure paths -----------------------------------------------------------------------------


def test_a_changed_client_frame_is_a_miss_naming_file_frame_and_field(project: Project) -> None:
    with FakeRealtime() as server:
        project.run(Mode.RECORD, lambda: raw_async(server))
    (path,) = project.files()
    before = path.read_bytes()

    def changed() -> Any:
        with pytest.raises(ConnectionClosedError) as closed:
            raw_async(server, said="something else")
        return closed.value.rcvd.code if closed.value.rcvd else None

    replay = project.run(Mode.REPLAY, changed)
    assert replay.result == 1008  # the replayed server closed it: policy violation
    (miss,) = replay.misses
    report = str(miss)
    assert path.name in report
    assert "frames[1] (sent text)" in report
    assert "frames[1].say: recorded 'hi', incoming 'something else'" in report
    assert path.read_bytes() == before


def test_two_connections_in_one_test_replay_in_order(project: Project) -> None:
    def twice(server: FakeRealtime) -> list[Any]:
        return [raw_async(server, said="first")[1], raw_async(server, said="second")[1]]

    result, files = three_phases(project, twice)
    assert [r[1]["say"] for r in result] == ["first", "second"]
    assert len(files) == 1
    stored = json.loads(files[0].read_text())
    assert len(stored["later_responses"]) == 1


def test_a_server_streaming_forever_stays_bounded(project: Project) -> None:
    def listen(server: FakeRealtime) -> Any:
        async def go() -> Any:
            async with aconnect(f"{server.url}/forever") as ws:
                try:
                    async for _ in ws:
                        pass
                except ConnectionClosedError as exc:
                    return exc.sent.code if exc.sent else None
            return None

        return asyncio.run(go())

    with FakeRealtime() as server:
        run = project.run(Mode.RECORD, lambda: listen(server), max_body_bytes=20_000)
    assert run.result == 1009  # message too big: the client's side gave up
    assert project.files() == []
    assert any("max_body_bytes (20000)" in str(m) for m in run.misses)


def test_a_handshake_with_no_answer_is_not_recorded(project: Project) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed

    def dial() -> str:
        async def go() -> str:
            with pytest.raises(OSError) as refused:
                await aconnect(f"ws://127.0.0.1:{port}/echo", open_timeout=5)
            return type(refused.value).__name__

        return asyncio.run(go())

    run = project.run(Mode.RECORD, dial)
    assert run.result == "ConnectionRefusedError"
    assert project.files() == []
    assert run.session.stats.not_recorded == 1


def test_a_refused_handshake_replays_as_refused(project: Project) -> None:
    def dial(server: FakeRealtime) -> Any:
        with pytest.raises(InvalidStatus) as refused:
            sconnect(f"{server.url}/reject", additional_headers={"Authorization": f"Bearer {KEY}"})
        return refused.value.response.status_code, json.loads(refused.value.response.body)

    result, files = three_phases(project, dial)
    assert result == (401, {"error": {"message": "invalid api key", "code": "invalid_api_key"}})
    assert "frames" not in json.loads(files[0].read_text())["response"]


def test_a_connection_cut_mid_stream_replays_as_cut(project: Project) -> None:
    def read(server: FakeRealtime) -> Any:
        async def go() -> Any:
            async with aconnect(f"{server.url}/cut") as ws:
                first = json.loads(await ws.recv())["type"]
                with pytest.raises(ConnectionClosedError) as cut:
                    await ws.recv()
                return first, cut.value.rcvd is None, ws.close_code

        return asyncio.run(go())

    result, files = three_phases(project, read)
    assert result == ("partial", True, 1006)
    assert json.loads(files[0].read_text())["response"]["ended"]["state"] == "error"


def test_a_receive_that_would_wait_forever_fails_naming_the_frame(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stop_early(server: FakeRealtime) -> Any:
        async def go() -> Any:
            ws = await aconnect(f"{server.url}/echo")
            return json.loads(await ws.recv())["type"]  # left open: the test stopped reading

        return asyncio.run(go())

    with FakeRealtime() as server:
        project.run(Mode.RECORD, lambda: stop_early(server))
    (path,) = project.files()
    assert json.loads(path.read_text())["response"]["ended"]["state"] == "abandoned"
    monkeypatch.setattr(ws_adapter, "WAIT_LIMIT_S", 0.2)

    def read_more() -> Any:
        async def go() -> Any:
            async with aconnect(f"{server.url}/echo") as ws:
                await ws.recv()
                with pytest.raises(ConnectionClosedError) as closed:
                    await ws.recv()  # the recording has nothing more: bounded, never a hang
                return closed.value.rcvd.code if closed.value.rcvd else None

        return asyncio.run(go())

    run = project.run(Mode.REPLAY, read_more)
    assert run.result == 1011
    (failure,) = run.misses
    assert "waited 0.2s for a frame after the last one recorded (frame 0)" in str(failure)
    assert path.name in str(failure)


def test_a_clean_early_close_in_replay_is_fine(project: Project) -> None:
    with FakeRealtime() as server:
        project.run(Mode.RECORD, lambda: raw_async(server))

    def leave() -> Any:
        async def go() -> Any:
            async with aconnect(
                f"{server.url}/echo?key={KEY}",
                additional_headers={"Authorization": f"Bearer {KEY}"},
            ) as ws:
                first = json.loads(await ws.recv())["type"]
            with pytest.raises(ConnectionClosedOK):
                await ws.recv()
            return first, ws.close_code

        return asyncio.run(go())

    run = project.run(Mode.REPLAY, leave)
    assert run.result == ("hello", 1000)
    assert run.misses == []


def test_the_legacy_client(project: Project) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from websockets.legacy.client import connect as legacy_connect

    def body(server: FakeRealtime) -> list[Any]:
        async def go() -> list[Any]:
            got: list[Any] = []
            async with legacy_connect(
                f"{server.url}/echo", extra_headers={"Authorization": f"Bearer {KEY}"}
            ) as ws:
                got.append(json.loads(await ws.recv())["type"])
                await ws.send(json.dumps({"say": "legacy"}))
                got.append(json.loads(await ws.recv())["got"])
                got.append(await ws.recv())
            got.append(ws.close_code)
            return got

        return asyncio.run(go())

    result, files = three_phases(project, body)
    assert result == ["hello", {"say": "legacy"}, b"\x00\x01binary\xff", 1000]
    frames = json.loads(files[0].read_text())["response"]["frames"]
    assert [f["type"] for f in frames][:4] == ["text", "text", "text", "binary"]


def test_live_mode_lists_the_connection(project: Project) -> None:
    with FakeRealtime() as server:

        def body() -> Any:
            raw_sync(server)
            assert project.session is not None
            return [tuple(c) for c in project.session.calls(TEST)]

        run = project.run(Mode.LIVE, body)
    assert run.result == [("GET", "/echo", None, 101, "live")]
    assert project.files() == []
