"""In record mode a live stream reaches the caller as it arrives (not after it ended), and is
recorded once it ends, or as far as it was read when the caller closes it early."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from hashreplay import Mode, test_context
from tests.integration.three_phases import TEST_ID, AllAdapters, ChunkedSSE, adapters
from tests.sdks import sdk

__all__ = ["adapters"]


class TwoPartStream:
    """Sends one SSE event, then waits until the client says it has it, then the rest."""

    def __init__(self) -> None:
        self.client_has_first = threading.Event()
        self.waited_ok: list[bool] = []
        outer = self

        class Handler(ChunkedSSE):
            def do_GET(self) -> None:
                self.start_sse()
                self.chunk(b'data: {"n": 1}\n\n')
                outer.waited_ok.append(outer.client_has_first.wait(5))
                self.chunk(b'data: {"n": 2}\n\n')
                self.end()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def two_part() -> Iterator[TwoPartStream]:
    server = TwoPartStream()
    yield server
    server.close()


def _events(adapters: AllAdapters) -> list[object]:
    (file,) = adapters.files()
    return [e["data"] for e in json.loads(file.read_text())["response"]["body"]]


def test_requests_sees_the_first_event_before_the_stream_ends(
    two_part: TwoPartStream, adapters: AllAdapters
) -> None:
    requests = sdk("requests")  # the `sdks` extra
    adapters.start(Mode.RECORD)
    with test_context(TEST_ID), requests.get(f"{two_part.url}/sse", stream=True) as r:
        lines = []
        for line in r.iter_lines(chunk_size=None):
            if line:
                lines.append(line)
                two_part.client_has_first.set()
    assert two_part.waited_ok == [True]  # the first event was in hand while the server waited
    assert lines == [b'data: {"n": 1}', b'data: {"n": 2}']
    assert _events(adapters) == [{"n": 1}, {"n": 2}]


def test_http_client_sees_the_first_event_before_the_stream_ends(
    two_part: TwoPartStream, adapters: AllAdapters
) -> None:
    adapters.start(Mode.RECORD)
    host, port = two_part.server.server_address[:2]
    with test_context(TEST_ID):
        conn = http.client.HTTPConnection(str(host), int(port))
        conn.request("GET", "/sse")
        response = conn.getresponse()
        first = response.readline()
        two_part.client_has_first.set()
        rest = response.read()
        conn.close()
    assert two_part.waited_ok == [True]
    assert first + rest == b'data: {"n": 1}\n\ndata: {"n": 2}\n\n'
    assert _events(adapters) == [{"n": 1}, {"n": 2}]


def test_a_stream_closed_early_is_recorded_as_far_as_it_was_read(
    two_part: TwoPartStream, adapters: AllAdapters
) -> None:
    requests = sdk("requests")  # the `sdks` extra
    adapters.start(Mode.RECORD)
    with test_context(TEST_ID), requests.get(f"{two_part.url}/sse", stream=True) as r:
        first = next(line for line in r.iter_lines(chunk_size=None) if line)
    two_part.client_has_first.set()
    assert first == b'data: {"n": 1}'
    assert _events(adapters) == [{"n": 1}]
