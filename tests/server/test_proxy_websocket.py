"""WebSocket upgrades through `hashreplay serve` (docs/server.md, "WebSockets"): a plain
`websockets` client (as a client in any language would) records a realtime conversation
through the proxy, replays it with the upstream stopped, gets a named miss for a changed
frame and for a connection with no recording, the recorded close and cut, a refused and an
unreachable upstream; bad input (an unknown route, a malformed frame) gets a clear error and
never rewrites a recording."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect

from tests.fakes.aio_realtime import FakeRealtime
from tests.server.conftest import Servers, load, recordings

TEST_ID = "tests/test_voice_js.py::talks"
PATH = "/v1/realtime?model=gpt-realtime"
KEY = "sk-proj-" + "Qw3Er4Ty5Ui6Op7As8Df" * 2


def dial(
    proxy_url: str, path: str = PATH, test_id: str | None = TEST_ID, run: str | None = None
) -> Any:
    headers = {"Authorization": f"Bearer {KEY}"}
    if test_id is not None:
        headers["X-HashReplay-Test-Id"] = test_id
    if run is not None:  # a new run of the test: its connections replay from the first
        headers["X-HashReplay-Run"] = run
    url = proxy_url.replace("http://", "ws://") + path
    return connect(url, additional_headers=headers, open_timeout=10, close_timeout=5)


def talk(proxy_url: str, *, instructions: str = "be brief", run: str | None = None) -> list[Any]:
    got: list[Any] = []
    with dial(proxy_url, run=run) as ws:
        got.append(json.loads(ws.recv(timeout=10))["type"])
        ws.send(json.dumps({"type": "session.update", "session": {"instructions": instructions}}))
        got.append(json.loads(ws.recv(timeout=10))["type"])
        ws.send(json.dumps({"type": "response.create"}))
        while True:
            frame = ws.recv(timeout=10)
            if isinstance(frame, bytes):
                got.append(frame[:7])
                continue
            event = json.loads(frame)
            got.append(event.get("delta") or event["type"])
            if event["type"] == "response.done":
                break
    return got


EXPECTED = [
    "session.created",
    "session.updated",
    "response.created",
    "Hel",
    "lo",
    b"\x00\x01audio",
    "response.done",
]


def record_then_stop(servers: Servers, root: Path, script: Any) -> Any:
    with FakeRealtime() as fake:
        upstream = fake.url.replace("ws://", "http://")
        proxy = servers.serve("--mode", "record", "--upstream", upstream, root=root)
        got = script(proxy.url)
        proxy.stop()  # graceful: every recording is on disk
    return got


def replayer(servers: Servers, root: Path) -> Any:
    return servers.serve("--mode", "replay", "--upstream", "http://127.0.0.1:9", root=root)


def test_a_conversation_records_through_the_proxy_and_replays_with_the_upstream_stopped(
    servers: Servers, root: Path
) -> None:
    assert record_then_stop(servers, root, talk) == EXPECTED
    [path] = recordings(root)
    data = load(path)
    assert data["test_id"] == TEST_ID
    frames = data["response"]["frames"]
    assert data["response"]["status"] == 101
    assert frames[0]["data"]["event_id"].startswith("rec-")
    closes = [(f["direction"], f["code"]) for f in frames if f["type"] == "close"]
    assert closes == [("sent", 1000), ("received", 1000)]  # the client's, and its answer
    assert KEY not in path.read_text()

    proxy = replayer(servers, root)
    assert talk(proxy.url) == EXPECTED
    stats = httpx2.get(proxy.url + "/__hashreplay/stats").json()
    assert stats["missed"] == 0


def test_a_changed_client_frame_closes_with_the_miss_and_keeps_the_recording(
    servers: Servers, root: Path
) -> None:
    record_then_stop(servers, root, talk)
    [path] = recordings(root)
    before = path.read_bytes()
    proxy = replayer(servers, root)
    with pytest.raises(ConnectionClosed) as caught:
        talk(proxy.url, instructions="be verbose")
    close = caught.value.rcvd
    assert close is not None and close.code == 1008
    assert "frames[1]" in close.reason and path.name[:20] in close.reason
    assert "session.instructions" in proxy.log()  # the full report is in the proxy's log
    assert path.read_bytes() == before
    assert talk(proxy.url, run="second") == EXPECTED  # and the proxy still serves


def test_a_connection_with_no_recording_is_refused_with_the_miss_report(
    servers: Servers, root: Path
) -> None:
    proxy = replayer(servers, root)
    with pytest.raises(InvalidStatus) as caught:
        dial(proxy.url, test_id="tests/other.py::never_recorded")
    response = caught.value.response
    assert response.status_code == 404
    report = json.loads(response.body)["error"]["message"]
    assert "tests/other.py::never_recorded" in report and "/v1/realtime" in report
    assert KEY not in response.body.decode()


def test_an_unknown_route_is_a_json_error(servers: Servers, root: Path) -> None:
    proxy = servers.serve(
        "--mode", "replay", "--upstream", "openai=http://127.0.0.1:9/v1", root=root
    )
    with pytest.raises(InvalidStatus) as caught:
        dial(proxy.url, path="/nowhere/realtime")
    assert caught.value.response.status_code == 404
    assert "unknown_upstream" in caught.value.response.body.decode()


def test_the_recorded_close_and_cut_are_reproduced(servers: Servers, root: Path) -> None:
    def bye(url: str) -> Any:
        with dial(url) as ws:
            ws.recv(timeout=10)
            ws.send(json.dumps({"type": "bye"}))
            with pytest.raises(ConnectionClosed) as caught:
                ws.recv(timeout=10)
            return caught.value.rcvd and (caught.value.rcvd.code, caught.value.rcvd.reason)

    def cut(url: str) -> Any:
        with dial(url, test_id=TEST_ID + "_cut") as ws:
            ws.recv(timeout=10)
            ws.send(json.dumps({"type": "cut"}))
            with pytest.raises(ConnectionClosedError) as caught:
                ws.recv(timeout=10)
            return caught.value.rcvd

    def both(url: str) -> Any:
        return bye(url), cut(url)

    assert record_then_stop(servers, root, both) == ((4000, "bye"), None)
    ends = {load(p)["test_id"]: load(p)["response"] for p in recordings(root)}
    assert ends[TEST_ID + "_cut"]["ended"]["state"] == "error"
    proxy = replayer(servers, root)
    assert both(proxy.url) == ((4000, "bye"), None)


def test_a_refused_upstream_handshake_is_recorded_and_refused_again(
    servers: Servers, root: Path
) -> None:
    def refused(url: str) -> int:
        with pytest.raises(InvalidStatus) as caught:
            dial(url, path="/refuse")
        return caught.value.response.status_code

    assert record_then_stop(servers, root, refused) == 401
    proxy = replayer(servers, root)
    assert refused(proxy.url) == 401


def test_an_unreachable_upstream_is_a_502_and_records_nothing(servers: Servers, root: Path) -> None:
    with FakeRealtime() as fake:
        dead = fake.url.replace("ws://", "http://")
    proxy = servers.serve("--mode", "record", "--upstream", dead, root=root)
    with pytest.raises(InvalidStatus) as caught:
        dial(proxy.url)
    assert caught.value.response.status_code == 502
    assert "nothing was recorded" in caught.value.response.body.decode()
    proxy.stop()
    assert recordings(root) == []


def test_a_malformed_frame_is_refused_and_never_rewrites_the_recording(
    servers: Servers, root: Path
) -> None:
    record_then_stop(servers, root, talk)
    [path] = recordings(root)
    before = path.read_bytes()
    proxy = replayer(servers, root)
    with dial(proxy.url) as ws:
        ws.recv(timeout=10)
        # a text frame that is not UTF-8, written on the socket under the library
        sock: socket.socket = ws.socket
        sock.sendall(bytes([0x81, 0x82, 0, 0, 0, 0, 0xFF, 0xFE]))  # masked, key 0
        with pytest.raises(ConnectionClosed) as caught:
            ws.recv(timeout=10)
    assert caught.value.rcvd is not None and caught.value.rcvd.code == 1007
    assert path.read_bytes() == before
    assert talk(proxy.url, run="second") == EXPECTED


def test_a_fault_header_drops_a_replayed_connection_and_a_bad_one_is_a_400(
    servers: Servers, root: Path
) -> None:
    record_then_stop(servers, root, talk)
    [path] = recordings(root)
    before = path.read_bytes()
    proxy = replayer(servers, root)
    url = proxy.url.replace("http://", "ws://") + PATH
    fault = json.dumps({"error": "disconnect", "after_frames": 1})
    headers = {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Fault": fault}
    with connect(url, additional_headers=headers, open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        ws.send(json.dumps({"type": "session.update", "session": {"instructions": "be brief"}}))
        with pytest.raises(ConnectionClosedError) as caught:
            ws.recv(timeout=10)
    assert caught.value.rcvd is None  # dropped: no close frame
    bad = {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Fault": '{"close": 1011}'}
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=bad, open_timeout=10)
    assert refused.value.response.status_code == 400
    assert "after_frames=N" in refused.value.response.body.decode()
    assert path.read_bytes() == before
