"""`hashreplay serve` as a process: streams, bad input, shutdown, concurrent writers."""

from __future__ import annotations

import json
import signal
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2
import pytest

from hashreplay.server.__main__ import main
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.server.conftest import Servers, chat, free_port, load, recordings

TEST_ID = "tests/agents/test_stream.py::test_it"
CHAT = "/v1/chat/completions"
HEADERS = {"X-HashReplay-Test-Id": TEST_ID, "Authorization": "Bearer sk-test-0123456789abcdefghij"}


class _GatedStream(BaseHTTPRequestHandler):
    """Sends one SSE event, then waits for the test to say the client saw it, then ends."""

    protocol_version = "HTTP/1.1"
    gate = threading.Event()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event, wait in ((b'data: {"n": 1}\n\n', True), (b"data: [DONE]\n\n", False)):
            self.wfile.write(b"%x\r\n%b\r\n" % (len(event), event))
            self.wfile.flush()
            if wait and not self.gate.wait(10):
                return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@pytest.fixture
def gated_upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GatedStream)
    server.daemon_threads = True
    _GatedStream.gate = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _GatedStream.gate.set()
        server.shutdown()
        server.server_close()


def test_a_stream_is_relayed_as_it_arrives(
    servers: Servers, root: Path, gated_upstream: str
) -> None:
    proxy = servers.serve("--mode", "record", "--upstream", gated_upstream, root=root)
    with (
        httpx2.Client(timeout=5.0) as client,
        client.stream(
            "POST", proxy.url + CHAT, json=chat("s", stream=True), headers=HEADERS
        ) as response,
    ):
        pieces = response.iter_raw()
        first = next(pieces)  # arrives while the upstream still holds back the rest
        assert first == b'data: {"n": 1}\n\n'
        _GatedStream.gate.set()
        rest = b"".join(pieces)
    assert rest == b"data: [DONE]\n\n"
    [path] = recordings(root)
    response_data = load(path)["response"]
    assert response_data["is_streaming"] is True
    assert [e["data"] for e in response_data["body"]] == [{"n": 1}, "[DONE]"]


def test_record_then_replay_streams_and_bodies_with_upstream_stopped(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    recorder = servers.serve(
        "--mode", "record", "--upstream", f"openai={upstream.url}/v1", root=root
    )
    with httpx2.Client(base_url=recorder.url + "/openai", timeout=10.0) as client:
        whole = client.post("/chat/completions", json=chat("one"), headers=HEADERS)
        stream = client.post("/chat/completions", json=chat("two", stream=True), headers=HEADERS)
    assert whole.status_code == stream.status_code == 200
    recorder.stop()
    upstream.stop()
    replayer = servers.serve(
        "--mode", "replay", "--upstream", "openai=http://127.0.0.1:9/v1", root=root
    )
    with httpx2.Client(base_url=replayer.url + "/openai", timeout=10.0) as client:
        again = client.post("/chat/completions", json=chat("one"), headers=HEADERS)
        again_stream = client.post(
            "/chat/completions", json=chat("two", stream=True), headers=HEADERS
        )
    assert again.json()["choices"][0]["message"]["content"] == "echo: one"
    assert again.headers["content-type"] == "application/json"
    assert again_stream.headers["content-type"].startswith("text/event-stream")
    deltas = [
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in again_stream.text.splitlines()
        if line.startswith("data: {")
    ]
    assert "".join(deltas) == "echo: two"
    stats = httpx2.get(replayer.url + "/__hashreplay/stats").json()
    assert (stats["replayed"], stats["missed"], stats["errors"]) == (2, 0, {})


def _raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


@pytest.mark.parametrize(
    "garbage",
    [
        b"THIS IS NOT HTTP\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n",
        b"POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    ],
    ids=["request-line", "header", "content-length"],
)
def test_malformed_http_gets_a_json_400_and_the_proxy_keeps_serving(
    servers: Servers, root: Path, garbage: bytes
) -> None:
    proxy = servers.serve("--mode", "replay", root=root)
    answer = _raw_exchange(proxy.port, garbage)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "bad_request"
    assert error["message"].startswith("malformed HTTP request")
    assert httpx2.get(proxy.url + "/__hashreplay/health").json()["status"] == "ok"


def test_errors_never_stop_the_process(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    proxy = servers.serve(
        "--mode",
        "record",
        "--upstream",
        f"up={upstream.url}",
        "--upstream",
        "down=http://127.0.0.1:9",
        "--max-body-bytes",
        "100",
        "--no-access-log",
        root=root,
    )
    with httpx2.Client(base_url=proxy.url, timeout=10.0) as client:
        results = [
            client.post(
                "/up/v1/chat/completions", content=b"{" + b" " * 200 + b"}", headers=HEADERS
            ),
            client.post("/elsewhere/v1/chat/completions", json={}),
            client.post("/down/v1/chat/completions", json=chat("x")),
            client.post("/up/v1/chat/completions", json=chat("ok"), headers=HEADERS),
        ]
    assert [(r.status_code, r.json().get("error", {}).get("code")) for r in results] == [
        (413, "body_too_large"),
        (404, "unknown_upstream"),
        (502, "upstream_unreachable"),
        (200, None),
    ]
    stats = httpx2.get(proxy.url + "/__hashreplay/stats").json()
    assert stats["errors"] == {
        "body_too_large": 1,
        "unknown_upstream": 1,
        "upstream_unreachable": 1,
    }
    assert stats["recorded"] == 1
    assert "upstream 'down' (http://127.0.0.1:9) is unreachable" in proxy.log()


def test_a_broken_upstream_stream_is_recorded_and_replayed_broken(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    upstream.script("POST", CHAT, Scripted(disconnect_after_chunks=2))
    recorder = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
    body = chat("a b c d e f g h", stream=True)
    seen: list[bytes] = []
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        httpx2.Client(timeout=10.0) as client,
        client.stream("POST", recorder.url + CHAT, json=body, headers=HEADERS) as response,
    ):
        seen.extend(response.iter_raw())
    [path] = recordings(root)
    stored = load(path)["response"]
    assert stored["is_exception"] is True
    assert len(stored["body"]) == 2
    assert b"".join(seen).count(b"data: ") == 2

    recorder.stop()
    upstream.stop()
    replayer = servers.serve("--mode", "replay", root=root)
    replayed: list[bytes] = []
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        httpx2.Client(timeout=10.0) as client,
        client.stream("POST", replayer.url + CHAT, json=body, headers=HEADERS) as response,
    ):
        replayed.extend(response.iter_raw())
    assert b"".join(replayed).count(b"data: ") == 2
    assert httpx2.get(replayer.url + "/__hashreplay/health").status_code == 200


@pytest.mark.parametrize("compress", [False, True], ids=["content-length", "gzip-decoded"])
def test_a_recording_is_on_disk_once_the_client_has_the_whole_response(
    servers: Servers, root: Path, compress: bool
) -> None:
    with FakeUpstream(compress=compress) as upstream:
        proxy = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
        with httpx2.Client(base_url=proxy.url, timeout=10.0) as client:
            for i in range(25):
                response = client.post(CHAT, json=chat(f"number {i}"), headers=HEADERS)
                assert response.json()["choices"][0]["message"]["content"] == f"echo: number {i}"
                assert len(recordings(root)) == i + 1, f"request {i}: no file yet"
                assert list(root.rglob("*.tmp")) == []


def test_graceful_shutdown_finishes_the_in_flight_recording(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    upstream.script("POST", CHAT, Scripted(delay=1.5))
    proxy = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx2.post, proxy.url + CHAT, json=chat("slow"), headers=HEADERS, timeout=10.0
        )
        for _ in range(200):  # wait (bounded) until the upstream has the request
            if upstream.calls:
                break
            threading.Event().wait(0.02)
        assert upstream.calls, "the request never reached the upstream"
        proxy.signal(signal.SIGTERM)
        response = pending.result(timeout=15)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "echo: slow"
    # uvicorn ends by re-raising the signal (exit status -15) after a graceful shutdown.
    assert proxy.proc.wait(10) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in proxy.log()
    [path] = recordings(root)
    assert load(path)["response"]["status"] == 200


@pytest.mark.parametrize("layout", ["two-processes", "workers-2"])
def test_concurrent_writers_of_one_recording_leave_one_whole_file(
    servers: Servers, root: Path, upstream: FakeUpstream, layout: str
) -> None:
    common = ("--mode", "record", "--upstream", upstream.url, "--no-access-log")
    if layout == "two-processes":
        urls = [servers.serve(*common, root=root).url, servers.serve(*common, root=root).url]
    else:
        urls = [servers.serve(*common, "--workers", "2", root=root).url]

    def send(i: int) -> int:
        url = urls[i % len(urls)]
        return httpx2.post(url + CHAT, json=chat("same"), headers=HEADERS, timeout=10.0).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(send, range(40)))
    assert statuses == [200] * 40
    [path] = recordings(root)
    data = load(path)  # parses: a whole file, never an interleaving of two writers
    assert data["test_id"] == TEST_ID
    responses = 1 + len(data.get("later_responses") or [])
    assert 1 <= responses <= 40
    assert list(root.rglob("*.tmp")) == []


def test_command_line_errors_say_what_to_fix(
    capsys: pytest.CaptureFixture[str], root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    assert main(["--upstream", "ftp://example", "--root", str(root)]) == 2
    assert (
        "invalid --upstream 'ftp://example': expected an http:// or https:// URL"
        in capsys.readouterr().err
    )
    assert main(["--mode", "record", "--root", str(root)]) == 2
    assert (
        "record mode (from option) sends requests upstream, but no --upstream"
        in capsys.readouterr().err
    )
    assert main(["--mode", "sometimes", "--root", str(root)]) == 2
    assert "expected one of replay, record-if-missing, record, live" in capsys.readouterr().err
    assert main(["--upstream", "http://a", "--upstream", "http://b", "--root", str(root)]) == 2
    assert "more than one default --upstream" in capsys.readouterr().err
    assert main(["--workers", "0", "--root", str(root)]) == 2
    assert "--workers 0: expected 1 or more" in capsys.readouterr().err


def test_a_taken_port_is_reported(servers: Servers, root: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        import sys

        argv = [sys.executable, "-m", "hashreplay.server", "--port", str(port), "--root", str(root)]
        proc = servers.start(argv, port=free_port(), ready=False)
        assert proc.proc.wait(20) != 0
    assert f"could not serve on 127.0.0.1:{port}" in proc.log()
