"""`hashreplay serve` over loopback: memory stays bounded (a response that never ends, a body
over max_body_bytes, fault headers of any size), and credentials in `--upstream` userinfo
never reach a recording or a log however the upstream echoes them."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.server.conftest import ServerProcess, Servers, chat, recordings

TEST_ID = "tests/test_app.py::test_bounds"
CHUNK = b"data: " + b"x" * 65_000 + b"\n\n"
BOMB = 64 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.server.seen.append(dict(self.headers.items()))
        if self.path.endswith("/forever"):
            self._forever()
        elif self.path.endswith("/echo"):
            self._echo(stream=False)
        elif self.path.endswith("/echo-stream"):
            self._echo(stream=True)
        elif self.path.endswith("/bomb"):  # one small gzip chunk that inflates to 64 MiB
            body = gzip.compress(b"\0" * BOMB, compresslevel=9)
            self._head(
                "text/event-stream", {"content-encoding": "gzip", "transfer-encoding": "chunked"}
            )
            self.wfile.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
        elif self.path.endswith("/big"):
            body = b'{"text": "' + b"y" * self.server.big + b'"}'
            self._head("application/json", {"content-length": str(len(body))})
            self.wfile.write(body)
        else:
            body = b'{"ok": true}'
            self._head("application/json", {"content-length": str(len(body))})
            self.wfile.write(body)

    def _head(self, content_type: str, headers: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _forever(self) -> None:
        """An event stream that never ends: chunks until the reader goes away."""
        self._head("text/event-stream", {"transfer-encoding": "chunked"})
        try:
            while True:
                self.wfile.write(b"%x\r\n%b\r\n" % (len(CHUNK), CHUNK))
                self.wfile.flush()
                self.server.sent += len(CHUNK)
        except OSError:
            self.close_connection = True

    def _echo(self, *, stream: bool) -> None:
        """Echoes the Authorization header it got in a header, the body and (streamed) in
        an event split over two chunks."""
        auth = self.headers.get("authorization", "")
        token = auth.partition(" ")[2]
        text = json.dumps({"you_sent": auth, "token": token, "decoded": _decoded(token)})
        if not stream:
            body = text.encode()
            self._head("application/json", {"content-length": str(len(body)), "x-echo": auth})
            self.wfile.write(body)
            return
        self._head("text/event-stream", {"transfer-encoding": "chunked", "x-echo": auth})
        for event in (f"data: {text}\n\n".encode(), b"data: [DONE]\n\n"):
            self.wfile.write(b"%x\r\n%b\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _decoded(token: str) -> str:
    try:
        return base64.b64decode(token).decode()
    except ValueError:
        return ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.sent = 0
        self.big = 0
        self.seen: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def odd() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def project(root: Path, max_body_bytes: int | None = None) -> Path:
    lines = ["[tool.hashreplay]"]
    if max_body_bytes is not None:
        lines.append(f"max_body_bytes = {max_body_bytes}")
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return root


def memory_kib(server: ServerProcess) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of the serve process, in KiB."""
    found = {}
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


def headers(**extra: str) -> dict[str, str]:
    return {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": uuid.uuid4().hex, **extra}


def read_stream(url: str, cap: int, **kwargs: Any) -> tuple[int, BaseException | None]:
    """Bytes read from a streamed POST until it ends or breaks (and how it broke), or until
    `cap` bytes came: a proxy that never cuts the stream fails, never hangs."""
    received = 0
    try:
        with httpx2.stream("POST", url, json=chat("on"), timeout=30, **kwargs) as answer:
            assert answer.status_code == 200
            for data in answer.iter_raw():
                received += len(data)
                if received > cap:
                    break
    except httpx2.HTTPError as exc:
        return received, exc
    return received, None


def warm_up(proxy: ServerProcess, odd: _Server) -> None:
    """One ordinary request, so the baseline includes the imports of the forwarding path."""
    answer = httpx2.post(f"{proxy.url}/v1/ok", json=chat("warm"), headers=headers())
    assert answer.status_code == 200


def test_a_stream_that_never_ends_is_cut_at_max_body_bytes_while_recording(
    servers: Servers, root: Path, odd: _Server
) -> None:
    limit = 4 * 1024 * 1024
    project(root, max_body_bytes=limit)
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", odd.url, root=root)
    warm_up(proxy, odd)
    before = memory_kib(proxy)
    received, broken = read_stream(f"{proxy.url}/v1/forever", 4 * limit, headers=headers())

    assert isinstance(broken, httpx2.RemoteProtocolError)  # a broken stream, never an end
    assert limit - len(CHUNK) <= received <= limit + len(CHUNK)
    after = memory_kib(proxy)
    grown_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
    assert grown_mib < 3 * limit / 2**20, (before, after)
    files = recordings(root)
    assert len(files) == 1  # the warm-up only: the cut-off stream is not recorded
    assert "forever" not in files[0].read_text()
    time.sleep(0.2)
    sent = odd.sent
    time.sleep(0.3)
    assert odd.sent == sent  # the proxy stopped reading the upstream
    log = proxy.log()
    assert "response.body (so far) of POST /v1/forever in test " + TEST_ID in log
    assert f"over max_body_bytes ({limit}); raise it in [tool.hashreplay]" in log
    assert "closing the client's connection" in log
    stats = httpx2.get(f"{proxy.url}/__hashreplay/stats").json()
    assert stats["recorded"] == 1
    assert stats["errors"] == {"response_too_large": 1}


def test_a_compressed_chunk_that_inflates_past_the_limit_is_cut_as_it_inflates(
    servers: Servers, root: Path, odd: _Server
) -> None:
    """A ~64 KiB gzip chunk that inflates to 64 MiB: while recording, the proxy counts what
    it inflates against max_body_bytes piece by piece, so it stops near the limit instead of
    holding the whole 64 MiB, records nothing and says why."""
    limit = 1024 * 1024
    project(root, max_body_bytes=limit)
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", odd.url, root=root)
    warm_up(proxy, odd)
    before = memory_kib(proxy)
    received, _ = read_stream(f"{proxy.url}/v1/bomb", 4 * BOMB, headers=headers())

    assert received <= 2 * limit  # never the whole 64 MiB
    after = memory_kib(proxy)
    grown_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
    assert grown_mib < 16, (before, after)  # vs 64 MiB inflated whole, held for the file
    assert len(recordings(root)) == 1  # the warm-up only
    assert f"over max_body_bytes ({limit})" in proxy.log()
    stats = httpx2.get(f"{proxy.url}/__hashreplay/stats").json()
    assert stats["errors"] == {"response_too_large": 1}


def test_a_stream_relayed_without_recording_keeps_memory_flat(
    servers: Servers, root: Path, odd: _Server
) -> None:
    """`live` keeps nothing: 64 MiB pass through, the proxy's peak memory grows far less."""
    project(root, max_body_bytes=1024 * 1024)  # the limit is for recordings only
    proxy = servers.serve("--mode", "live", "--upstream", odd.url, root=root)
    warm_up(proxy, odd)
    before = memory_kib(proxy)
    total = 64 * 1024 * 1024
    received = 0
    with httpx2.stream("POST", f"{proxy.url}/v1/forever", json=chat("on"), timeout=30) as answer:
        for data in answer.iter_raw():
            received += len(data)
            if received > total:
                break
    after = memory_kib(proxy)
    assert received > total
    assert (after["VmHWM"] - before["VmRSS"]) * 1024 < total / 4, (before, after)


def test_a_whole_response_over_max_body_bytes_is_a_clear_error(
    servers: Servers, root: Path, odd: _Server
) -> None:
    limit = 256 * 1024
    project(root, max_body_bytes=limit)
    odd.big = 2 * limit
    proxy = servers.serve("--mode", "record", "--upstream", odd.url, root=root)
    answer = httpx2.post(f"{proxy.url}/v1/big", json=chat("big"), headers=headers())
    assert answer.status_code == 502
    assert answer.headers["x-should-retry"] == "false"
    error = answer.json()["error"]
    assert error["code"] == "response_too_large"
    assert f"is {2 * limit + 12} bytes, over max_body_bytes ({limit})" in error["message"]
    assert "max_body_bytes = 1048576" in error["message"]  # what to set
    assert TEST_ID in error["message"] and "/v1/big" in error["message"]

    too_big = httpx2.post(
        f"{proxy.url}/v1/ok", content=b"z" * (limit + 1), headers=headers()
    )  # a request body the recording could not hold never goes upstream
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "body_too_large"
    assert f"over max_body_bytes ({limit})" in too_big.json()["error"]["message"]
    assert "not sent upstream" in too_big.json()["error"]["message"]
    assert len(odd.seen) == 1
    assert recordings(root) == []
    stats = httpx2.get(f"{proxy.url}/__hashreplay/stats").json()
    assert stats["recorded"] == 0


def test_fault_headers_are_bounded(servers: Servers, root: Path, odd: _Server) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", odd.url, root=root)
    url = f"{proxy.url}/v1/ok"
    long = json.dumps({"status": 500, "body": "b" * 5000})
    answer = httpx2.post(url, json=chat("x"), headers=headers(**{"X-HashReplay-Fault": long}))
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "bad_fault"
    assert (
        f"header X-HashReplay-Fault is {len(long)} bytes, over the limit of 4096 bytes"
        in (error["message"])
    )
    # A test keeps the counters of its 64 latest distinct values: older ones are forgotten
    # (and start afresh), so no number of distinct values grows the proxy without bound.
    run = uuid.uuid4().hex
    once = json.dumps({"status": 429, "times": 1})
    with httpx2.Client() as client:

        def post(fault: str) -> httpx2.Response:
            ids = {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": run}
            return client.post(url, json=chat("x"), headers={**ids, "X-HashReplay-Fault": fault})

        assert post(once).status_code == 429
        assert post(once).status_code == 200  # times=1: used up
        for n in range(64):
            fault = json.dumps({"status": 503, "body": f"{n:04d}" + "p" * 3000})
            answer = post(fault)
            assert answer.status_code == 503
            assert answer.text.startswith(f"{n:04d}")
        assert post(once).status_code == 429  # forgotten, so it starts afresh
    assert len(odd.seen) == 1  # faulted requests never go upstream


@pytest.mark.parametrize("path", ["/v1/echo", "/v1/echo-stream"])
def test_upstream_userinfo_echoed_back_is_never_written(
    servers: Servers, root: Path, odd: _Server, path: str
) -> None:
    user, password = "svc-account", "pw-9f8e7d6c5b4a"
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    upstream = f"http://{user}:{password}@127.0.0.1:{odd.server_address[1]}"
    proxy = servers.serve("--mode", "record", "--upstream", upstream, root=root)
    answer = httpx2.post(f"{proxy.url}{path}", json=chat("who"), headers=headers())
    assert answer.status_code == 200
    assert basic in answer.text  # the client sees what the upstream answered
    assert odd.seen[-1]["Authorization"] == f"Basic {basic}"
    (file,) = recordings(root)
    written = file.read_text()
    proxy.stop()
    shown = written + proxy.log()
    for secret in (password, basic, f"{user}:{password}"):
        assert secret not in shown
    assert "[secret removed]" in written
    data = json.loads(written)
    assert data["response"].get("headers", {}).get("x-echo") in (None, "[secret removed]")
