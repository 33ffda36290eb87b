"""Cut-off responses through the proxy: a client that times out before a whole body ends leaves
a recording marked abandoned (never a normal 200), replay never passes it off as complete,
and record-if-missing records it again."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.server.conftest import Servers, load, recordings

TEST_ID = "tests/test_app.py::test_cut"
PAYLOAD = b'{"id": "x", "choices": [{"message": {"content": "' + b"a" * 200 + b'"}}]}'


class SlowUpstream:
    """Sends half a JSON body, pauses `pause` s, then the rest (content-length framing)."""

    def __init__(self, pause: float) -> None:
        self.pause = pause
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, rest = data.split(b"\r\n\r\n", 1)
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            while len(rest) < length:
                rest += conn.recv(65536)
            half = len(PAYLOAD) // 2
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(PAYLOAD)}\r\nconnection: close\r\n\r\n".encode()
                + PAYLOAD[:half]
            )
            time.sleep(self.pause)
            with contextlib.suppress(OSError):
                conn.sendall(PAYLOAD[half:])

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def slow() -> Iterator[SlowUpstream]:
    upstream = SlowUpstream(pause=1.0)
    yield upstream
    upstream.close()


def post(url: str, *, read_timeout: float) -> httpx2.Response:
    headers = {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": uuid.uuid4().hex}
    timeout = httpx2.Timeout(10.0, read=read_timeout)
    return httpx2.post(f"{url}/v1/chat", json={"q": 1}, headers=headers, timeout=timeout)


def wait_for_file(root: Path) -> dict[str, object]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = recordings(root)
        if found:
            return load(found[0])
        time.sleep(0.05)
    pytest.fail("nothing was recorded")


def test_a_client_that_times_out_mid_body_leaves_an_abandoned_recording(
    servers: Servers, root: Path, slow: SlowUpstream
) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", slow.url, root=root)
    with pytest.raises(httpx2.ReadTimeout):
        post(proxy.url, read_timeout=0.3)
    data = wait_for_file(root)
    response = data["response"]
    assert isinstance(response, dict)
    assert response["ended"] == {"state": "abandoned", "after_chunks": 1}

    replay = servers.serve("--mode", "replay", root=root)
    with pytest.raises(httpx2.HTTPError):  # an incomplete body, never a clean 200
        post(replay.url, read_timeout=5)

    answer = post(proxy.url, read_timeout=5)  # a patient client: recorded again, complete
    assert answer.content == PAYLOAD
    (path,) = recordings(root)
    assert "ended" not in load(path)["response"]
