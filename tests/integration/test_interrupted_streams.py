"""A live stream being recorded that the user stops (Ctrl-C while the body is read, or a
KeyboardInterrupt raised by the test's own code between chunks) got no answer from the
upstream: nothing is written for the call, and a recording it would have replaced stays byte
for byte (docs/design.md, "Only answers are recorded"), through every client."""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from hashreplay import Mode, test_context
from tests.integration.three_phases import TEST_ID, AllAdapters, ChunkedSSE, adapters
from tests.sdks import sdk

__all__ = ["adapters"]

EVENTS = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]


class PausingStream:
    """Sends the first SSE event; when `interrupt` is set, then sends SIGINT to the test's
    thread (a Ctrl-C arriving while the client blocks reading the next chunk) and waits for
    the client to go before sending the rest."""

    def __init__(self) -> None:
        self.interrupt = False
        self.main = threading.main_thread().ident
        outer = self

        class Handler(ChunkedSSE):
            def do_GET(self) -> None:
                self.start_sse()
                self.chunk(EVENTS[0])
                if outer.interrupt:
                    assert outer.main is not None
                    signal.pthread_kill(outer.main, signal.SIGINT)
                    self.connection.settimeout(5)
                    self.rfile.read(1)  # until the client closes the connection
                    return
                for event in EVENTS[1:]:
                    self.chunk(event)
                self.end()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/sse"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pausing() -> Iterator[PausingStream]:
    server = PausingStream()
    yield server
    server.close()


def read_httpx(url: str, stop: Callable[[], None]) -> None:
    import httpx

    with httpx.Client() as client, client.stream("GET", url) as r:
        for _ in r.iter_lines():
            stop()


def read_httpx_async(url: str, stop: Callable[[], None]) -> None:
    import httpx

    async def run() -> None:
        async with httpx.AsyncClient() as client, client.stream("GET", url) as r:
            async for _ in r.aiter_lines():
                stop()

    asyncio.run(run())


def read_requests(url: str, stop: Callable[[], None]) -> None:
    requests = sdk("requests")
    with requests.get(url, stream=True) as r:
        for _ in r.iter_lines(chunk_size=None):
            stop()


def read_urllib3(url: str, stop: Callable[[], None]) -> None:
    import urllib3

    r = urllib3.PoolManager().request("GET", url, preload_content=False)
    try:
        for _ in r.stream(None):
            stop()
    finally:
        r.release_conn()


def read_http_client(url: str, stop: Callable[[], None]) -> None:
    host, port = url.split("//")[1].split("/", maxsplit=1)[0].split(":")
    conn = http.client.HTTPConnection(host, int(port))
    try:
        conn.request("GET", "/sse")
        with conn.getresponse() as r:
            while r.readline():
                stop()
    finally:
        conn.close()


def read_aiohttp(url: str, stop: Callable[[], None]) -> None:
    aiohttp = sdk("aiohttp")

    async def run() -> None:
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            async for _ in r.content:
                stop()

    asyncio.run(run())


READERS = [
    read_httpx,
    read_httpx_async,
    read_requests,
    read_urllib3,
    read_http_client,
    read_aiohttp,
]


def _go_on() -> None:
    pass


def _raise() -> None:
    raise KeyboardInterrupt


def _run(adapters: AllAdapters, read: Callable[..., Any], url: str, stop: Any) -> None:
    adapters.start(Mode.RECORD)
    with test_context(TEST_ID):
        read(url, stop)
    if adapters.session is not None:
        adapters.session.flush()


def _ctrl_c(pausing: PausingStream, adapters: AllAdapters, read: Callable[..., Any]) -> None:
    """A run that the upstream interrupts with SIGINT after the first event. A KeyboardInterrupt
    raised while a collected object's __del__ runs is swallowed by Python ("Exception ignored
    in"): no garbage collection while the signal can arrive."""
    pausing.interrupt = True
    gc.collect()
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(adapters, read, pausing.url, _go_on)
    finally:
        gc.enable()


@pytest.mark.parametrize("read", READERS, ids=lambda r: r.__name__[5:])
def test_ctrl_c_while_a_live_stream_is_read_records_nothing(
    pausing: PausingStream, adapters: AllAdapters, read: Callable[..., Any]
) -> None:
    _ctrl_c(pausing, adapters, read)
    assert adapters.files() == []  # not even as abandoned or as a recorded exception

    pausing.interrupt = False
    _run(adapters, read, pausing.url, _go_on)
    (file,) = adapters.files()
    before = file.read_bytes()
    assert [e["data"] for e in json.loads(before)["response"]["body"]][:2] == [{"n": 1}, {"n": 2}]

    _ctrl_c(pausing, adapters, read)
    assert adapters.files() == [file]
    assert file.read_bytes() == before  # byte for byte: not re-recorded, not cut off


#: the readers whose stream is closed while the interrupt is being handled (a `with` block
#: or `finally`); urllib3's and requests' generators are closed by the interpreter as the
#: exception unwinds past them, where no Python code can see it (a Ctrl-C arriving in the
#: read itself, the usual case, is covered above for them too)
HANDLED = [read_httpx, read_httpx_async, read_http_client, read_aiohttp]


@pytest.mark.parametrize("read", HANDLED, ids=lambda r: r.__name__[5:])
def test_a_keyboard_interrupt_raised_between_chunks_records_nothing(
    pausing: PausingStream, adapters: AllAdapters, read: Callable[..., Any]
) -> None:
    with pytest.raises(KeyboardInterrupt):
        _run(adapters, read, pausing.url, _raise)
    assert adapters.files() == []

    _run(adapters, read, pausing.url, _go_on)
    (file,) = adapters.files()
    before = file.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        _run(adapters, read, pausing.url, _raise)
    assert file.read_bytes() == before
