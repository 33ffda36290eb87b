"""Faults, hangs, pacing and stream end states with every adapter besides httpx (they apply
to every adapter): requests and raw urllib3 (the urllib3 adapter), `urllib.request` (the
http.client adapter) and raw aiohttp, each recorded against a real server and replayed with
the plan fields of docs/design.md §11 carried out with the client library's own exceptions."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp
import pytest

from hashreplay import Mode, test_context
from hashreplay.engine.faults import FaultSpec, HangTimeout
from hashreplay.engine.session import Session
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.integration.three_phases import AllAdapters, adapters
from tests.scenarios.hang_spy import HangWait, hang_waits
from tests.scenarios.test_pacing import FakeClock, LoopClock, clock, loop_clock
from tests.sdks import sdk

requests = sdk("requests")
urllib3 = sdk("urllib3")

__all__ = ["adapters", "clock", "hang_waits", "loop_clock"]  # fixtures, used by name

TEST_ID = "tests/test_app.py::test_every_client"
CHAT = "/v1/chat/completions"
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-test-0123456789"}
MESSAGES = [{"role": "user", "content": "alpha beta gamma delta"}]
CHAT_BODY = json.dumps({"model": "gpt-fake-1", "messages": MESSAGES}).encode()
STREAM_BODY = json.dumps({"model": "gpt-fake-1", "messages": MESSAGES, "stream": True}).encode()
ANSWER = "echo: alpha beta gamma delta"


# --- the four clients, each as an application would use it --------------------------------


@dataclass(frozen=True)
class Client:
    name: str
    #: POST the chat: (status, body text); `timeout` is the client's own (None: its default)
    chat: Callable[..., tuple[int, str]]
    #: POST the stream and read `n` chunks (None: all) into `got`, then close it
    stream: Callable[..., list[bytes]]


def requests_chat(url: str, timeout: float | None = None) -> tuple[int, str]:
    r = requests.post(f"{url}{CHAT}", data=CHAT_BODY, headers=HEADERS, timeout=timeout)
    return r.status_code, r.text


def requests_stream(url: str, n: int | None = None, got: list[bytes] | None = None) -> list[bytes]:
    got = [] if got is None else got
    with requests.post(f"{url}{CHAT}", data=STREAM_BODY, headers=HEADERS, stream=True) as r:
        for chunk in r.iter_content(chunk_size=None):
            got.append(chunk)
            if n is not None and len(got) == n:
                break
    return got


def urllib3_chat(url: str, timeout: float | None = None) -> tuple[int, str]:
    with urllib3.PoolManager() as pool:
        kw: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        r = pool.request("POST", f"{url}{CHAT}", body=CHAT_BODY, headers=HEADERS, **kw)
        return r.status, r.data.decode()


def urllib3_stream(url: str, n: int | None = None, got: list[bytes] | None = None) -> list[bytes]:
    got = [] if got is None else got
    with urllib3.PoolManager() as pool:
        r = pool.request(
            "POST", f"{url}{CHAT}", body=STREAM_BODY, headers=HEADERS, preload_content=False
        )
        try:
            for chunk in r.stream(None):
                got.append(chunk)
                if n is not None and len(got) == n:
                    break
        finally:
            r.release_conn()
    return got


def urllib_chat(url: str, timeout: float | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"{url}{CHAT}", CHAT_BODY, HEADERS, method="POST")
    kw: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    try:
        with urllib.request.urlopen(request, **kw) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def urllib_stream(url: str, n: int | None = None, got: list[bytes] | None = None) -> list[bytes]:
    got = [] if got is None else got
    request = urllib.request.Request(f"{url}{CHAT}", STREAM_BODY, HEADERS, method="POST")
    with urllib.request.urlopen(request) as r:
        while chunk := r.read1(65536):
            got.append(chunk)
            if n is not None and len(got) == n:
                break
    return got


def aiohttp_chat(url: str, timeout: Any = None) -> tuple[int, str]:
    async def go() -> tuple[int, str]:
        if timeout is not None and not isinstance(timeout, aiohttp.ClientTimeout):
            kw = {"timeout": aiohttp.ClientTimeout(sock_read=timeout)}
        else:
            kw = {} if timeout is None else {"timeout": timeout}
        async with (
            aiohttp.ClientSession(**kw) as s,
            s.post(f"{url}{CHAT}", data=CHAT_BODY, headers=HEADERS) as r,
        ):
            return r.status, await r.text()

    return asyncio.run(go())


def aiohttp_stream(url: str, n: int | None = None, got: list[bytes] | None = None) -> list[bytes]:
    got = [] if got is None else got

    async def go() -> list[bytes]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{url}{CHAT}", data=STREAM_BODY, headers=HEADERS) as r,
        ):
            async for chunk in r.content.iter_any():
                got.append(chunk)
                if n is not None and len(got) == n:
                    break
        return got

    return asyncio.run(go())


CLIENTS = {
    "requests": Client("requests", requests_chat, requests_stream),
    "urllib3": Client("urllib3", urllib3_chat, urllib3_stream),
    "urllib": Client("urllib", urllib_chat, urllib_stream),
    "aiohttp": Client("aiohttp", aiohttp_chat, aiohttp_stream),
}


@pytest.fixture(params=list(CLIENTS))
def client(request: pytest.FixtureRequest) -> Client:
    return CLIENTS[request.param]


@pytest.fixture
def recorded(upstream: FakeUpstream, adapters: AllAdapters, client: Client) -> str:
    """A chat and a whole stream recorded with `client`; the upstream is stopped after."""
    adapters.start(Mode.RECORD)
    with test_context(TEST_ID):
        status, text = client.chat(upstream.url)
        assert (status, json.loads(text)["choices"][0]["message"]["content"]) == (200, ANSWER)
        assert b"[DONE]" in b"".join(client.stream(upstream.url))
    assert len(adapters.files()) == 2
    upstream.stop()
    return upstream.url


def replaying(rec: AllAdapters, *faults: dict[str, Any], **overrides: Any) -> Session:
    session = rec.start(Mode.REPLAY, **overrides)
    session.begin_test(TEST_ID)
    session.set_test_options(TEST_ID, faults=[FaultSpec.parse(f) for f in faults])
    return session


def content(text: str) -> str:
    answer: str = json.loads(text)["choices"][0]["message"]["content"]
    return answer


# --- a 429, then the recorded 200 ----------------------------------------------------------


def test_a_429_fault_then_the_recorded_200(
    recorded: str, adapters: AllAdapters, client: Client
) -> None:
    session = replaying(adapters, {"status": 429, "times": 1, "endpoint": CHAT})
    before = {p: p.read_bytes() for p in adapters.files()}
    statuses = []
    with test_context(TEST_ID):
        for _ in range(3):  # the application's own retry
            status, text = client.chat(recorded)
            statuses.append(status)
            if status != 429:
                break
    assert statuses == [429, 200]
    assert content(text) == ANSWER
    assert session.take_misses(TEST_ID) == []
    assert session.leftovers(TEST_ID)[2] == []  # the fault matched
    assert {p: p.read_bytes() for p in adapters.files()} == before  # a faulted test writes nothing


# --- errors before the response and after a chunk, as each client's own exception ----------

#: (client, error, after_chunks) -> what the application sees
RAISED: dict[tuple[str, str, bool], type[BaseException]] = {
    ("requests", "read_timeout", False): requests.exceptions.ReadTimeout,
    ("requests", "connect_error", False): requests.exceptions.ConnectionError,
    ("requests", "disconnect", False): requests.exceptions.ConnectionError,
    ("requests", "read_timeout", True): requests.exceptions.ConnectionError,
    ("requests", "connect_error", True): requests.exceptions.ChunkedEncodingError,
    ("requests", "disconnect", True): requests.exceptions.ChunkedEncodingError,
    ("urllib3", "read_timeout", False): urllib3.exceptions.ReadTimeoutError,
    ("urllib3", "connect_error", False): urllib3.exceptions.MaxRetryError,  # retried, then
    ("urllib3", "disconnect", False): urllib3.exceptions.ProtocolError,
    ("urllib3", "read_timeout", True): urllib3.exceptions.ReadTimeoutError,
    ("urllib3", "connect_error", True): urllib3.exceptions.ProtocolError,
    ("urllib3", "disconnect", True): urllib3.exceptions.ProtocolError,
    ("urllib", "read_timeout", False): TimeoutError,
    ("urllib", "connect_error", False): urllib.error.URLError,
    ("urllib", "disconnect", False): http.client.RemoteDisconnected,
    ("urllib", "read_timeout", True): TimeoutError,
    ("urllib", "connect_error", True): ConnectionRefusedError,
    ("urllib", "disconnect", True): http.client.IncompleteRead,
    ("aiohttp", "read_timeout", False): aiohttp.ServerTimeoutError,
    ("aiohttp", "connect_error", False): aiohttp.ClientConnectorError,
    ("aiohttp", "disconnect", False): aiohttp.ServerDisconnectedError,
    ("aiohttp", "read_timeout", True): aiohttp.ServerTimeoutError,
    ("aiohttp", "connect_error", True): aiohttp.ClientConnectionError,
    ("aiohttp", "disconnect", True): aiohttp.ServerDisconnectedError,
}


@pytest.mark.parametrize("error", ["read_timeout", "connect_error", "disconnect"])
def test_each_error_kind_before_the_response(
    recorded: str, adapters: AllAdapters, client: Client, error: str
) -> None:
    session = replaying(adapters, {"error": error, "endpoint": CHAT})
    with test_context(TEST_ID), pytest.raises(RAISED[client.name, error, False]):
        client.chat(recorded)
    assert session.take_misses(TEST_ID) == []


@pytest.mark.parametrize("error", ["read_timeout", "connect_error", "disconnect"])
def test_a_stream_breaks_after_one_chunk(
    recorded: str, adapters: AllAdapters, client: Client, error: str
) -> None:
    # the chat is call 1 of the endpoint, the stream call 2
    replaying(adapters, {"error": error, "after_chunks": 1, "call": 2})
    got: list[bytes] = []
    with test_context(TEST_ID):
        assert content(client.chat(recorded)[1]) == ANSWER
        with pytest.raises(RAISED[client.name, error, True]):
            client.stream(recorded, None, got)
    assert len(got) == 1
    assert got[0].startswith(b"data: ")


# --- hangs -----------------------------------------------------------------------------------

#: what a hang ends with once the client's own read timeout fires
HANG_RAISED: dict[str, type[BaseException]] = {
    "requests": requests.exceptions.ReadTimeout,
    "urllib3": urllib3.exceptions.ReadTimeoutError,
    "urllib": TimeoutError,
    "aiohttp": aiohttp.ServerTimeoutError,  # sock_read
}


def test_a_hang_ends_with_the_clients_own_timeout(
    recorded: str, adapters: AllAdapters, client: Client, hang_waits: list[HangWait]
) -> None:
    replaying(adapters, {"hang": True})
    start = time.monotonic()
    with test_context(TEST_ID), pytest.raises(HANG_RAISED[client.name]):
        client.chat(recorded, 0.2)
    assert time.monotonic() - start >= 0.15  # it really waited
    # it waited at most the client's own read timeout (handed to the hang, not timed here),
    # and that ended it: the test had not ended
    assert hang_waits == [HangWait(0.2, "returned")]


@pytest.mark.parametrize("client", ["requests", "urllib3", "urllib"], indirect=True)
def test_a_sync_hang_is_seen_by_wait_hanging_and_ends_with_the_test(
    recorded: str, adapters: AllAdapters, client: Client, hang_waits: list[HangWait]
) -> None:
    session = replaying(adapters, {"hang": True})
    raised: list[BaseException] = []

    def call() -> None:  # no timeout: it hangs until the test ends
        with test_context(TEST_ID):
            try:
                client.chat(recorded)
            except Exception as exc:
                raised.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    session.wait_hanging(TEST_ID, 30)  # generous limits: they only stop a broken run
    assert thread.is_alive()
    assert hang_waits == [HangWait(None)]  # no timeout of its own: only the test's end frees it
    session.end_test(TEST_ID)
    thread.join(30)
    assert not thread.is_alive()
    assert hang_waits == [HangWait(None, "returned")]  # freed by the test's end
    assert isinstance(raised[0], HANG_RAISED[client.name])


@pytest.mark.parametrize("client", ["aiohttp"], indirect=True)
def test_an_aiohttp_hang_ends_with_its_total_timeout_or_a_cancel(
    recorded: str, adapters: AllAdapters, client: Client, hang_waits: list[HangWait]
) -> None:
    session = replaying(adapters, {"hang": True})
    with test_context(TEST_ID), pytest.raises(asyncio.TimeoutError):
        client.chat(recorded, aiohttp.ClientTimeout(total=0.2))
    # aiohttp's total timeout cancelled the hanging request (its wait had no read timeout)
    assert hang_waits == [HangWait(None, "cancelled")]

    async def run() -> None:
        async def call() -> str:
            async with (
                aiohttp.ClientSession() as s,
                s.post(f"{recorded}{CHAT}", data=CHAT_BODY, headers=HEADERS) as r,
            ):
                return await r.text()

        task = asyncio.ensure_future(call())
        while True:  # the engine's wait, polled so the loop keeps running the task
            try:
                session.wait_hanging(TEST_ID, 0)
                break
            except HangTimeout:
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with test_context(TEST_ID):
        asyncio.run(run())
    assert hang_waits[1:] == [HangWait(None, "cancelled")]  # the test's cancel ended it


# --- pacing ----------------------------------------------------------------------------------


def test_fixed_pace_waits_before_each_chunk_through_the_clock(
    recorded: str, adapters: AllAdapters, client: Client, clock: FakeClock
) -> None:
    replaying(adapters, pace="fixed:50")
    with test_context(TEST_ID):
        chunks = client.stream(recorded)
        assert b"[DONE]" in b"".join(chunks)
        assert len(chunks) > 2
        assert [w for w in clock.waits if w] == [0.05] * len(chunks)
        clock.waits.clear()
        assert content(client.chat(recorded)[1]) == ANSWER  # a whole body: one chunk
        assert [w for w in clock.waits if w] == [0.05]
    clock.waits.clear()
    replaying(adapters)  # instant: no wait at all
    with test_context(TEST_ID):
        client.stream(recorded)
    assert clock.waits == []


@pytest.mark.parametrize("client", ["aiohttp"], indirect=True)
def test_aiohttp_pacing_awaits_and_the_loop_stays_responsive(
    recorded: str, adapters: AllAdapters, client: Client, loop_clock: LoopClock
) -> None:
    replaying(adapters, pace="fixed:50")

    async def run() -> int:
        done = asyncio.Event()
        task = asyncio.ensure_future(loop_clock.ticker(done))
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{recorded}{CHAT}", data=STREAM_BODY, headers=HEADERS) as r,
        ):
            got = [chunk async for chunk in r.content.iter_any()]
        done.set()
        await task
        return len(got)

    with test_context(TEST_ID):
        chunks = asyncio.run(run())
    # 50 ms before each chunk, awaited (never blocking the loop), and another task ran during
    # every wait: shown by the fake clock, whatever the machine's speed
    assert [w for w in loop_clock.waits if w] == [0.05] * chunks
    assert loop_clock.blocking == []
    assert min(loop_clock.ran_during) >= 1


# --- stream end states when recording ----------------------------------------------------------


class _SlowEvents(BaseHTTPRequestHandler):
    """An SSE stream of three events 0.15 s apart, then `[DONE]`: a client that stops
    after the first has the rest still to come."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        events = [
            b'data: {"choices":[{"index":0,"delta":{"content":"w%d"}}]}\n\n' % i for i in range(3)
        ]
        try:
            for i, event in enumerate([*events, b"data: [DONE]\n\n"]):
                if i:
                    time.sleep(0.15)
                self.wfile.write(b"%x\r\n%b\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client left

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def slow_events() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowEvents)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


#: what reading past where the recording's client stopped raises
ABANDONED_RAISED: dict[str, type[BaseException]] = {
    "requests": requests.exceptions.ChunkedEncodingError,
    "urllib3": urllib3.exceptions.ProtocolError,
    "urllib": http.client.IncompleteRead,
    "aiohttp": aiohttp.ClientPayloadError,
}


def test_an_abandoned_recorded_stream_never_replays_as_complete(
    slow_events: str, adapters: AllAdapters, client: Client
) -> None:
    adapters.start(Mode.RECORD, record_timing=True)
    with test_context(TEST_ID):
        assert len(client.stream(slow_events, 1)) == 1
    (path,) = adapters.files()
    response = json.loads(path.read_text())["response"]
    assert response["ended"]["state"] == "abandoned"
    kept = response["ended"]["after_chunks"]
    assert kept == len(response["body"]) >= 1
    assert response["timing"]["head_us"] > 0  # `started` was filled

    adapters.start(Mode.REPLAY)
    with test_context(TEST_ID):  # the same client behaviour replays as it was recorded
        assert len(client.stream(slow_events, kept)) == kept
    adapters.start(Mode.REPLAY)
    got: list[bytes] = []
    with (
        test_context(TEST_ID),
        pytest.raises(
            ABANDONED_RAISED[client.name], match="client stopped reading when it was recorded"
        ),
    ):
        client.stream(slow_events, None, got)
    assert len(got) == kept


def test_a_stream_read_to_its_end_is_stored_complete_with_its_timing(
    upstream: FakeUpstream, adapters: AllAdapters, client: Client
) -> None:
    adapters.start(Mode.RECORD, record_timing=True)
    with test_context(TEST_ID):
        client.stream(upstream.url)
    (path,) = adapters.files()
    response = json.loads(path.read_text())["response"]
    assert "ended" not in response
    timing = response["timing"]
    assert 0 < timing["head_us"] <= timing["chunks_us"][0]
    assert timing["chunks_us"] == sorted(timing["chunks_us"])


def test_recorded_pace_waits_the_stored_offsets(
    upstream: FakeUpstream, adapters: AllAdapters, client: Client, clock: FakeClock
) -> None:
    upstream.script("POST", CHAT, Scripted(delay=0.2))
    adapters.start(Mode.RECORD, record_timing=True)
    with test_context(TEST_ID):
        client.stream(upstream.url)
    (path,) = adapters.files()
    timing = json.loads(path.read_text())["response"]["timing"]
    upstream.stop()
    replaying(adapters, pace="recorded")
    with test_context(TEST_ID):
        assert b"[DONE]" in b"".join(client.stream(upstream.url))
    assert clock.waits[0] == pytest.approx(timing["head_us"] / 1e6)
    assert sum(clock.waits) == pytest.approx(timing["chunks_us"][-1] / 1e6, rel=0.01)
