"""Failure paths of the urllib3 and http.client adapters with real clients: failures replay as
the clients' own exceptions, broken streams break at the same place, a miss answers at once,
passthrough URLs carry the test id, and a stream read another way gets the same bytes."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import pytest

from hashreplay import Mode, test_context
from hashreplay.core.constants import MISS_HEADER, TEST_ID_HEADER
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.guards import ConnectGuard
from tests.integration.three_phases import TEST_ID, AllAdapters, adapters, three_phases
from tests.sdks import sdk

requests = sdk("requests")
urllib3 = sdk("urllib3")

__all__ = ["adapters"]

STREAM = {
    "model": "gpt-fake-1",
    "stream": True,
    "messages": [{"role": "user", "content": "one two three four five six seven eight"}],
}


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def record_and_replay(
    adapters: AllAdapters, run: Any, **overrides: object
) -> tuple[Any, Any, ConnectGuard]:
    adapters.start(Mode.RECORD, **overrides)
    with test_context(TEST_ID):
        live = run()
    session = adapters.start(Mode.REPLAY, **overrides)
    with ConnectGuard() as guard, test_context(TEST_ID):
        replayed = run()
    assert session.stats.missed == 0
    return live, replayed, guard


def outcome(call: Any) -> tuple[str, str]:
    try:
        call()
    except Exception as exc:
        return type(exc).__qualname__, type(getattr(exc, "reason", None)).__name__
    return "no error", ""


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ("requests", ("ConnectionError", "NewConnectionError")),
        ("urllib3-no-retries", ("NewConnectionError", "NoneType")),
        ("urllib3", ("MaxRetryError", "NewConnectionError")),
        ("urllib.request", ("URLError", "ConnectionRefusedError")),
        ("http.client", ("ConnectionRefusedError", "NoneType")),
    ],
)
def test_connection_refused_replays_as_the_clients_own_error(
    adapters: AllAdapters, client: str, expected: tuple[str, str]
) -> None:
    url = closed_port_url()

    def call() -> Any:
        if client == "requests":
            return requests.get(f"{url}/plain", timeout=2)
        if client == "urllib3-no-retries":
            return urllib3.PoolManager().request("GET", f"{url}/plain", retries=False)
        if client == "urllib3":
            return urllib3.PoolManager().request("GET", f"{url}/plain", retries=1)
        if client == "urllib.request":
            return urllib.request.urlopen(f"{url}/plain", timeout=2)
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=2)
        conn.request("GET", "/plain")
        return conn.getresponse()

    def run() -> tuple[str, str]:
        if client == "requests":
            with pytest.raises(requests.ConnectionError) as caught:
                call()
            inner = caught.value.args[0]
            return type(caught.value).__qualname__, type(inner.reason).__name__
        return outcome(call)

    # a refused connection is no answer: recorded only with record_failures = "all"
    live, replayed, guard = record_and_replay(adapters, run, record_failures="all")
    assert live == expected
    assert replayed == live
    assert guard.attempts == []


def test_broken_stream_breaks_at_the_same_place(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    def run(url: str) -> tuple[list[bytes], str]:
        upstream.script("POST", "/v1/chat/completions", Scripted(disconnect_after_chunks=2))
        lines: list[bytes] = []
        with requests.post(f"{url}/v1/chat/completions", json=STREAM, stream=True) as r:
            try:
                lines.extend(line for line in r.iter_lines() if line)
            except requests.exceptions.ChunkedEncodingError as exc:
                return lines, type(exc).__name__
        return lines, "no error"

    phases = three_phases(upstream, adapters, run)
    lines, error = phases.live
    assert error == "ChunkedEncodingError"
    assert len(lines) == 2
    assert phases.offline[1] == phases.fresh[1] == error
    assert len(phases.offline[0]) == len(phases.fresh[0]) == 2


def test_http_client_broken_stream(upstream: FakeUpstream, adapters: AllAdapters) -> None:
    def run(url: str) -> tuple[bytes, str]:
        upstream.script("POST", "/api/chat", Scripted(disconnect_after_chunks=2))
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port)
        conn.request("POST", "/api/chat", json.dumps({**STREAM, "model": "llama-fake:1b"}))
        response = conn.getresponse()
        got = b""
        try:
            while piece := response.read(10):
                got += piece
        except http.client.IncompleteRead as exc:
            return got, type(exc).__name__
        return got, "no error"

    phases = three_phases(upstream, adapters, run)
    got, error = phases.live
    assert error == "IncompleteRead"
    assert len(_complete_contents(got)) >= 1
    assert phases.offline[1] == phases.fresh[1] == error
    assert _complete_contents(phases.offline[0]) == _complete_contents(got)


def _complete_contents(data: bytes) -> list[str]:
    """The message texts of the whole NDJSON lines in `data` (a broken stream ends inside
    one)."""
    out = []
    for line in data.split(b"\n"):
        with contextlib.suppress(ValueError):
            out.append(json.loads(line)["message"]["content"])
    return out


def test_gzip_body_is_stored_decoded(adapters: AllAdapters) -> None:
    payload = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "zip it"}]}
    with FakeUpstream(compress=True) as fake:
        adapters.start(Mode.RECORD)
        with test_context(TEST_ID):
            live = requests.post(f"{fake.url}/v1/chat/completions", json=payload)
            raw = urllib3.PoolManager().request(
                "POST",
                f"{fake.url}/v1/chat/completions",
                body=json.dumps(payload),
                headers={"accept-encoding": "gzip", "content-type": "application/json"},
                decode_content=False,
            )
        assert live.headers["content-encoding"] == "gzip"
        assert raw.data[:2] == b"\x1f\x8b"  # the caller got the wire bytes it asked for
        files = adapters.files()
        stored = [json.loads(f.read_text())["response"] for f in files]
        assert len(stored) == 1  # the same request twice: one file, two responses
        adapters.start(Mode.REPLAY)
        with test_context(TEST_ID):
            replayed = requests.post(f"{fake.url}/v1/chat/completions", json=payload)
        assert replayed.json()["choices"] == live.json()["choices"]
        assert "content-encoding" not in replayed.headers
    text = files[0].read_text()
    assert "echo: zip it" in text
    assert "gzip" not in text


def test_miss_answers_at_once_and_fails_the_test(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    session = adapters.start(Mode.REPLAY)
    with ConnectGuard() as guard, test_context(TEST_ID):
        r = requests.get(f"{upstream.url}/plain")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{upstream.url}/binary")
    assert r.status_code == caught.value.code == 404
    assert r.headers[MISS_HEADER] == "1"
    assert "hashreplay" in r.json()["error"]["type"]
    assert guard.attempts == [] and upstream.calls == []
    assert session.stats.missed == 2


def test_passthrough_urls_go_live_with_the_test_id(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    adapters.start(Mode.REPLAY, passthrough=[upstream.url])
    with test_context(TEST_ID):
        assert requests.get(f"{upstream.url}/plain").text == "hello from fake upstream"
        with urllib.request.urlopen(f"{upstream.url}/plain") as r:
            assert r.read() == b"hello from fake upstream"
    assert [c.headers.get(TEST_ID_HEADER.lower()) for c in upstream.calls] == [TEST_ID] * 2
    assert adapters.files() == []


def test_stream_recorded_as_lines_replays_the_same_bytes_to_a_raw_reader(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    body = {"model": "llama-fake:1b", "messages": [{"role": "user", "content": "a b c d e"}]}
    adapters.start(Mode.RECORD)
    with test_context(TEST_ID):
        requests.post(f"{upstream.url}/api/chat", json=body).raise_for_status()
    adapters.start(Mode.REPLAY)
    with test_context(TEST_ID):
        r = requests.post(f"{upstream.url}/api/chat", json=body, stream=True)
        lines = [line for line in r.iter_lines() if line]
    adapters.start(Mode.REPLAY)
    with test_context(TEST_ID):
        raw = urllib3.PoolManager().request(
            "POST", f"{upstream.url}/api/chat", body=json.dumps(body), preload_content=False
        )
        chunks = list(raw.stream(5))
    assert b"".join(chunks).splitlines() == lines
    assert len(lines) > 2
    assert len(upstream.calls) == 1


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ("requests", "ConnectionError"),
        ("urllib.request", "RemoteDisconnected"),
        ("requests-timeout", "ReadTimeout"),
        ("urllib3-timeout", "ReadTimeoutError"),
    ],
)
def test_a_server_that_hangs_up_or_stalls(
    upstream: FakeUpstream, adapters: AllAdapters, client: str, expected: str
) -> None:
    def run(url: str) -> str:
        if client.endswith("timeout"):
            upstream.script("GET", "/plain", Scripted(delay=2))
        else:
            upstream.script("GET", "/plain", Scripted(close_without_response=True))
        if client.startswith("requests"):
            return outcome(lambda: requests.get(f"{url}/plain", timeout=0.3))[0]
        if client == "urllib3-timeout":
            pool = urllib3.PoolManager(retries=False, timeout=0.3)
            return outcome(lambda: pool.request("GET", f"{url}/plain"))[0]
        return outcome(lambda: urllib.request.urlopen(f"{url}/plain"))[0]

    # no response arrived: recorded only with record_failures = "all"
    phases = three_phases(upstream, adapters, run, record_failures="all")
    assert phases.live == expected
    assert phases.offline == phases.fresh == expected
