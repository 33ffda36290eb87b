"""Body limits through real pytest runs (docs/design.md, "Bodies are limited as they arrive"
and "A file it wrote is a file it reads"):

- `max_body_bytes` is enforced while a live body arrives, in every adapter: a stream that
  never ends is stopped as soon as its recorded copy passes the limit, the test fails with
  an error naming the limit, the test id and the setting, nothing is written, and the
  memory of the test process stays bounded by the limit, not by what the upstream sends;
- the limit applies to each body, never to the size of the indented file: a recording made
  under a small `max_body_bytes` replays.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp  # noqa: F401  # imported here, in pytester's baseline (see tests/conftest.py)
import pytest

from hashreplay.cli import main
from hashreplay.core.config import load_config
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session
from tests.fakes.upstream import FakeUpstream
from tests.sdks import preload, sdk

preload("requests")  # in pytester's baseline where installed (see tests/conftest.py)

pytest_plugins = ["pytester"]

LIMIT = 4 * 1024 * 1024
#: what the endless upstream would send at most, if nobody stopped reading
CAP = 64 * 1024 * 1024
EVENT = b'data: {"choices": [{"delta": {"content": "' + b"x" * 1000 + b'"}}]}\n\n'


class _Endless(BaseHTTPRequestHandler):
    """An SSE stream that never ends: events until the client goes away (or `CAP` bytes)."""

    protocol_version = "HTTP/1.1"
    server: EndlessUpstream

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        chunk = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
        sent = 0
        try:
            while sent < CAP:
                self.wfile.write(chunk)
                sent += len(EVENT)
        except OSError:  # the client stopped reading and closed the connection
            pass
        self.server.streams.append(sent)
        self.close_connection = True


class EndlessUpstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Endless)
        #: bytes written on each stream, once it ended (sockets buffer some the client never read)
        self.streams: list[int] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def endless() -> Iterator[EndlessUpstream]:
    server = EndlessUpstream()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


ENDLESS_TESTS = """
import asyncio, os, tracemalloc
import aiohttp, httpx, httpx2, pytest, requests, urllib3
from hashreplay import BodyTooLarge

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
LIMIT = int(os.environ["LIMIT"])
BODY = {"model": "gpt-fake-1", "stream": True, "messages": [{"role": "user", "content": "go"}]}


def read(client):
    if client in ("httpx2", "httpx"):
        module = httpx2 if client == "httpx2" else httpx
        with module.Client(timeout=60) as c, c.stream("POST", URL, json=BODY) as r:
            for _ in r.iter_lines():
                pass
    elif client == "requests":
        with requests.post(URL, json=BODY, stream=True, timeout=60) as r:
            for _ in r.iter_lines():
                pass
    elif client == "urllib3":
        r = urllib3.PoolManager().request("POST", URL, json=BODY, preload_content=False)
        for _ in r.stream(65536):
            pass
    else:
        async def go():
            async with aiohttp.ClientSession() as s, s.post(URL, json=BODY) as r:
                async for _ in r.content:
                    pass
        asyncio.run(go())


@pytest.mark.parametrize("client", ["httpx2", "httpx", "requests", "urllib3", "aiohttp"])
def test_endless(client):
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge):
            read(client)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"PEAK {client} {peak}")
    assert peak < 3 * LIMIT
    print(f"BOUNDED {client}")


def test_swallowed():
    try:
        read("httpx2")
    except Exception:
        pass  # like an SDK or app that catches everything: the test still fails
"""


def test_an_endless_stream_is_stopped_at_max_body_bytes_with_memory_bounded(
    pytester: pytest.Pytester, endless: EndlessUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk("requests")  # the inner suite drives requests and urllib3 too (the `sdks` extra)
    sdk("urllib3")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.setenv("FAKE_URL", endless.url)
    monkeypatch.setenv("LIMIT", str(LIMIT))
    pytester.makepyprojecttoml(
        f'[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest"\n\n'
        f"[tool.hashreplay]\nmax_body_bytes = {LIMIT}\n"
    )
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_stream.py").write_text(ENDLESS_TESTS)

    result = pytester.runpytest_subprocess("--inference-mode=record", "-s", "-p", "no:randomly")
    # every client was stopped with memory bounded; each test then fails with the error
    for client in ("httpx2", "httpx", "requests", "urllib3", "aiohttp"):
        result.stdout.fnmatch_lines([f"*BOUNDED {client}*"])
    peaks = [int(m[1]) for line in result.outlines if (m := re.search(r"PEAK \S+ (\d+)", line))]
    assert len(peaks) == 5
    assert max(peaks) < 3 * LIMIT < CAP // 5  # tracemalloc: what the process held at most
    result.assert_outcomes(failed=6)
    expected = (
        "hashreplay: not recorded: the response body of http://localhost/v1/chat/completions "
        "in test suite/test_stream.py::test_swallowed passed max_body_bytes (4194304) while "
        "it arrived (SIZE bytes so far), so hashreplay stopped reading it and failed the "
        "call; if it is meant to be this large, raise it in [tool.hashreplay] of "
        "pyproject.toml (max_body_bytes = 8388608), else fix the upstream that does not end it"
    )
    pattern = re.escape(expected).replace("SIZE", r"\d+")
    assert re.search(pattern, result.stdout.str()), result.stdout.str()
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 0 recorded, 0 missed (record)"])
    assert not list(pytester.path.rglob("recordings/*.json"))
    # every stream ended because its client hung up, long before the upstream's own cap
    deadline = time.monotonic() + 60  # the handler threads note each end as they see it
    while len(endless.streams) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(endless.streams) == 6
    assert max(endless.streams) < CAP


SMALL_LIMIT_TESTS = """
import os
import httpx2

def test_story():
    body = {"model": "gpt-fake-1", "stream": True,
            "messages": [{"role": "user", "content": " ".join(["word"] * 12)}]}
    with httpx2.Client() as c:
        with c.stream("POST", os.environ["FAKE_URL"] + "/v1/chat/completions", json=body) as r:
            text = "".join(r.iter_text())
    assert "[DONE]" in text
"""


def _small_limit_project(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    tests: str,
) -> None:
    """A project with `max_body_bytes = 3000` and `tests` in `suite/<name>`."""
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest"\n\n'
        "[tool.hashreplay]\nmax_body_bytes = 3000\n"
    )
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / name).write_text(tests)


def test_a_file_written_under_a_small_max_body_bytes_replays(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_limit_project(pytester, upstream, monkeypatch, "test_story.py", SMALL_LIMIT_TESTS)

    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (path,) = pytester.path.glob("suite/recordings/*.json")
    data = json.loads(path.read_text())
    compact = len(json.dumps(data["response"]["body"], separators=(",", ":")))
    # each body within the limit, the indented file well over it
    assert compact <= 3000 < path.stat().st_size
    written = path.read_bytes()

    upstream.stop()
    replayed = pytester.runpytest()
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["hashreplay: 1 replayed, 0 recorded, 0 missed (replay)"])
    assert main(["verify", "--root", str(pytester.path)]) == 0
    assert path.read_bytes() == written


BIG_REQUEST_TESTS = """
import os
import httpx, httpx2, pytest, requests

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
BODY = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "x" * 5000}]}


@pytest.mark.parametrize("client", ["httpx2", "httpx", "requests"])
def test_big(client):
    if client == "requests":
        requests.post(URL, json=BODY, timeout=30)
    else:
        (httpx2 if client == "httpx2" else httpx).post(URL, json=BODY, timeout=30)


def test_small():
    httpx2.post(URL, json={**BODY, "messages": [{"role": "user", "content": "hi"}]})
"""


def test_a_request_body_over_max_body_bytes_is_refused_before_it_is_sent(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording could never hold it, so recording modes fail the test naming the limit
    and the setting, and the upstream never sees the request (as the proxy refuses it)."""
    sdk("requests")
    _small_limit_project(pytester, upstream, monkeypatch, "test_big.py", BIG_REQUEST_TESTS)

    result = pytester.runpytest_subprocess(
        "--inference-mode=record-if-missing", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "hashreplay: suite/test_big.py::test_big?httpx2?: not recorded: the request body "
            "of POST http://127.0.0.1:*/v1/chat/completions in test "
            "suite/test_big.py::test_big?httpx2? is 5064 bytes, over max_body_bytes (3000); "
            "raise it in ?tool.hashreplay? of pyproject.toml (max_body_bytes = 8192) or send "
            "a smaller body; it was not sent upstream",
        ]
    )
    assert [call.body for call in upstream.calls if b"x" * 5000 in call.body] == []
    assert len(upstream.calls) == 1  # test_small only
    assert len(list(pytester.path.rglob("recordings/*.json"))) == 1


def test_recording_files_are_read_whatever_their_size(tmp_path: Path) -> None:
    """`textconv` and `verify` read a file bigger than `max_body_bytes` as replay does."""
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\nmax_body_bytes = 3000\n")
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 2500}]}
    session = Session(load_config(tmp_path, env={}, mode="record"))
    session.begin_test("tests/test_x.py::test_y")
    request = IncomingRequest("POST", "http://h/v1/chat/completions", [], json.dumps(big).encode())
    prep = session.prepare(request, test_id="tests/test_x.py::test_y")
    answer = json.dumps({"echo": "y" * 2500}).encode()
    path = session.record(prep, LiveExchange(200, [("content-type", "application/json")], [answer]))
    assert path is not None
    assert path.stat().st_size > 5000
    assert main(["verify", "--root", str(tmp_path)]) == 0
    assert main(["textconv", str(path)]) == 0
