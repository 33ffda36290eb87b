"""What trials of `hashreplay serve` and server mode found: fault headers (counters without a
run header, a clear 400 for a malformed one), headers meant for hashreplay never reaching the
upstream, the conversation header in the ASGI/WSGI middleware, stats that count only files
written, binary bodies measured in bytes, a cut-off stream recorded again, and a miss report
that names the host:port the client used."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import hashreplay
from hashreplay.asgi import TestIdMiddleware as AsgiMiddleware
from hashreplay.wsgi import TestIdMiddleware as WsgiMiddleware
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.server.conftest import Servers, chat, load, recordings
from tests.server.test_proxy_bounds import _Handler, _Server

TEST_ID = "tests/test_app.py::test_fixes"
CHAT = "/v1/chat/completions"
FAULT = "X-HashReplay-Fault"


def stats(url: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx2.get(f"{url}/__hashreplay/stats").json()
    return data


# --- fault headers ---------------------------------------------------------------------------


def test_a_fault_with_times_applies_in_order_without_a_run_header(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", upstream.url, root=root)
    fault = json.dumps({"status": 429, "times": 2})
    seen = []
    with httpx2.Client() as client:
        for _ in range(3):
            answer = client.post(
                f"{proxy.url}{CHAT}",
                json=chat("hi"),
                headers={"X-HashReplay-Test-Id": TEST_ID, FAULT: fault},
            )
            seen.append(answer.status_code)
        anonymous = [
            client.post(f"{proxy.url}{CHAT}", json=chat("anon"), headers={FAULT: fault})
            for _ in range(3)
        ]
    assert seen == [429, 429, 200]  # the first two, then the real answer
    assert [a.status_code for a in anonymous] == [429, 429, 200]  # no test id either
    assert len(upstream.calls) == 2


@pytest.mark.parametrize("with_test_id", [True, False])
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not json", "not a JSON object"),
        ("[1, 2]", "must be a JSON object"),
        ('{"status": 99}', "status 99 is not an HTTP status"),
        ('{"sttaus": 500}', "unknown argument 'sttaus'"),
        ('{"status": 200, "headers": {"x-a": "one\\r\\nx-b: two"}}', "holds CR, LF or NUL"),
        ('{"status": 200, "headers": {"x-a": "one\\ntwo"}}', "holds CR, LF or NUL"),
        ('{"status": 200, "headers": {"x-a": "nul\\u0000"}}', "holds CR, LF or NUL"),
        ('{"status": 200, "headers": {"bad name": "v"}}', "is not an HTTP header name"),
        ('{"status": "500"}', "status '500' is not an HTTP status"),
        ('{"error": "disconnect", "body": {"e": 1}}', "headers and body go with status=..."),
    ],
)
def test_a_malformed_fault_header_is_a_clear_400(
    servers: Servers,
    root: Path,
    upstream: FakeUpstream,
    value: str,
    problem: str,
    *,
    with_test_id: bool,
) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", upstream.url, root=root)
    ids = {"X-HashReplay-Test-Id": TEST_ID} if with_test_id else {}
    answer = httpx2.post(f"{proxy.url}{CHAT}", json=chat("x"), headers={**ids, FAULT: value})
    assert answer.status_code == 400
    assert answer.headers["x-should-retry"] == "false"
    error = answer.json()["error"]
    assert error["code"] == "bad_fault"
    assert f"POST {CHAT}: header {FAULT}: " in error["message"]
    assert problem in error["message"]
    assert "valid forms: status=<int>" in error["message"]
    assert upstream.calls == []
    assert recordings(root) == []
    assert stats(proxy.url)["errors"] == {"bad_fault": 1}


def test_hashreplay_headers_never_reach_the_upstream(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    proxy = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
    unmatched = json.dumps({"status": 500, "endpoint": "/v1/embeddings"})  # not this endpoint
    answer = httpx2.post(
        f"{proxy.url}{CHAT}",
        json=chat("hi"),
        headers={
            "X-HashReplay-Test-Id": TEST_ID,
            "X-HashReplay-Run": "r1",
            "X-HashReplay-Conversation": "alice",
            FAULT: unmatched,
            "Authorization": "Bearer sk-test-forwarded-0001",
        },
    )
    assert answer.status_code == 200
    (call,) = upstream.calls
    assert not [name for name in call.headers if name.startswith("x-hashreplay")]
    assert call.headers["authorization"] == "Bearer sk-test-forwarded-0001"  # the client's own
    (path,) = recordings(root)
    data = load(path)
    assert data["request"]["conversation"] == "alice"
    assert "x-hashreplay" not in path.read_text().lower()


# --- server mode: the conversation header in the middleware ----------------------------------


@pytest.fixture
def installed(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("HASHREPLAY_ROOT", str(root))
    monkeypatch.setenv("INFERENCE_MODE", "record")
    try:
        yield root
    finally:
        hashreplay.uninstall()


def conversations(root: Path) -> list[str | None]:
    found = [load(p)["request"].get("conversation") for p in recordings(root)]
    return sorted(found, key=str)


async def test_asgi_middleware_reads_the_conversation_header(
    installed: Path, upstream: FakeUpstream
) -> None:
    hashreplay.install()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        async with httpx2.AsyncClient(base_url=upstream.url) as client:
            answer = await client.post(CHAT, json=chat("same question"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": answer.content})

    transport = httpx2.ASGITransport(app=AsgiMiddleware(app))
    async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
        for name in ("alice", "bob", None):
            extra = {"X-HashReplay-Conversation": name} if name else {}
            answer = await client.post(
                "/ask", headers={"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": "r", **extra}
            )
            assert answer.status_code == 200
    # three identical upstream calls, three files: each conversation its own sequence
    assert conversations(installed) == [None, "alice", "bob"]
    assert all("x-hashreplay" not in k for c in upstream.calls for k in c.headers)


def test_wsgi_middleware_reads_the_conversation_header_while_the_body_streams(
    installed: Path, upstream: FakeUpstream
) -> None:
    hashreplay.install()

    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("content-type", "text/plain")])
        with httpx2.Client(base_url=upstream.url) as client:
            yield client.post(CHAT, json=chat("same question")).content  # while iterated

    with httpx2.Client(
        transport=httpx2.WSGITransport(app=WsgiMiddleware(app)), base_url="http://app"
    ) as client:
        for name in ("alice", "bob"):
            answer = client.get(
                "/",
                headers={"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Conversation": name},
            )
            assert answer.status_code == 200
    assert conversations(installed) == ["alice", "bob"]


# --- stats, sizes --------------------------------------------------------------------------


def test_stats_count_only_files_written(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    blocked = root / "tests" / "api"
    blocked.mkdir(parents=True)
    (blocked / "recordings").write_text("a file where the recordings directory goes\n")
    proxy = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
    answer = httpx2.post(
        f"{proxy.url}{CHAT}",
        json=chat("hi"),
        headers={"X-HashReplay-Test-Id": "tests/api/test_chat.py::test_hi"},
    )
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "recording_not_written"
    ok = httpx2.post(
        f"{proxy.url}{CHAT}", json=chat("hi"), headers={"X-HashReplay-Test-Id": TEST_ID}
    )
    assert ok.status_code == 200
    numbers = stats(proxy.url)
    assert numbers["recorded"] == 1 == len(recordings(root))
    assert numbers["errors"] == {"recording_not_written": 1}


def test_a_binary_body_is_measured_in_bytes_not_base64(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    limit = 300_000
    (root / "pyproject.toml").write_text(f"[tool.hashreplay]\nmax_body_bytes = {limit}\n")
    audio = os.urandom(200_000)  # 266,668 characters of base64 in the file
    speech = {"X-HashReplay-Test-Id": TEST_ID}
    upstream.script("POST", "/v1/audio/speech", Scripted(body=audio))
    proxy = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
    answer = httpx2.post(f"{proxy.url}/v1/audio/speech", json={"input": "hi"}, headers=speech)
    assert answer.status_code == 200
    assert answer.content == audio
    replay = servers.serve("--mode", "replay", root=root)
    again = httpx2.post(f"{replay.url}/v1/audio/speech", json={"input": "hi"}, headers=speech)
    assert again.status_code == 200, again.text
    assert again.content == audio

    # 250,000 bytes: 333,336 as base64 in the file, which the limit applies to
    upstream.script("POST", "/v1/audio/speech", Scripted(body=os.urandom(250_000)))
    refused = httpx2.post(f"{proxy.url}/v1/audio/speech", json={"input": "2"}, headers=speech)
    assert refused.status_code == 502
    error = refused.json()["error"]
    assert error["code"] == "response_too_large"
    assert (
        f"is 250000 bytes (333336 as base64), over max_body_bytes ({limit})" in (error["message"])
    )
    # over the limit as it arrives (its content-length): the bytes that came
    upstream.script("POST", "/v1/audio/speech", Scripted(body=os.urandom(400_000)))
    refused = httpx2.post(f"{proxy.url}/v1/audio/speech", json={"input": "3"}, headers=speech)
    assert refused.status_code == 502
    assert f"is 400000 bytes, over max_body_bytes ({limit})" in refused.json()["error"]["message"]
    assert stats(proxy.url)["recorded"] == 1


def test_the_store_names_a_binary_body_by_its_bytes(root: Path) -> None:
    from hashreplay.core.config import load_config
    from hashreplay.core.errors import BodyTooLarge
    from hashreplay.engine.http import IncomingRequest, LiveExchange
    from hashreplay.engine.session import Session

    (root / "pyproject.toml").write_text("[tool.hashreplay]\nmax_body_bytes = 1000\n")
    session = Session(load_config(root, env={}, mode="record"))
    prep = session.prepare(IncomingRequest("GET", "http://api/v1/file", [], b""), test_id=TEST_ID)
    exchange = LiveExchange(200, [("content-type", "application/octet-stream")], [os.urandom(1200)])
    with pytest.raises(BodyTooLarge, match=r"file in test \S+ is 1200 bytes \(1600 as base64\)"):
        session.record(prep, exchange)
    assert session.stats.recorded == 0


# --- a cut-off stream is recorded again --------------------------------------------------------


class _Pausing(_Handler):
    def _forever(self) -> None:
        """Three events, a pause after the first while `pause` is set."""
        self._head("text/event-stream", {"transfer-encoding": "chunked"})
        events = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]
        for index, event in enumerate(events):
            self.wfile.write(b"%x\r\n%b\r\n" % (len(event), event))
            self.wfile.flush()
            if index == 0 and self.server.pause.is_set():
                time.sleep(1.0)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def pausing() -> Iterator[_Server]:
    server = _Server()
    server.RequestHandlerClass = _Pausing
    server.pause = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_re_recording_a_cut_off_stream_replaces_it(
    servers: Servers, root: Path, pausing: _Server
) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", pausing.url, root=root)
    url = f"{proxy.url}/v1/forever"
    ids = {"X-HashReplay-Test-Id": TEST_ID}  # no run header: one sequence for the proxy's life
    pausing.pause.set()  # type: ignore[attr-defined]
    timeout = httpx2.Timeout(5, read=0.3)
    with (
        pytest.raises(httpx2.ReadTimeout),  # the client gives up mid-stream
        httpx2.stream("POST", url, json=chat("s"), headers=ids, timeout=timeout) as answer,
    ):
        for _ in answer.iter_raw():
            pass
    deadline = time.monotonic() + 10
    while not recordings(root) and time.monotonic() < deadline:
        time.sleep(0.05)
    (path,) = recordings(root)
    assert load(path)["response"]["ended"]["state"] == "abandoned"

    pausing.pause.clear()  # type: ignore[attr-defined]
    whole = httpx2.post(url, json=chat("s"), headers=ids, timeout=10)
    assert whole.status_code == 200 and whole.text.endswith("data: [DONE]\n\n")
    data = load(path)
    assert "ended" not in data["response"]  # replaced, not appended after the cut-off one
    assert "later_responses" not in data
    proxy.stop()

    replay = servers.serve("--mode", "replay", root=root)
    again = httpx2.post(url.replace(proxy.url, replay.url), json=chat("s"), headers=ids)
    assert again.status_code == 200
    events = [line for line in again.text.splitlines() if line.startswith("data:")]
    assert [json.loads(e[5:]) for e in events[:2]] == [{"n": 1}, {"n": 2}]
    assert events[2] == "data: [DONE]"


# --- the miss report ---------------------------------------------------------------------------


def test_a_miss_report_names_the_host_and_port_the_client_used(
    servers: Servers, root: Path
) -> None:
    upstream_url = "http://127.0.0.1:9/v1"  # never reached in replay
    proxy = servers.serve("--mode", "replay", "--upstream", f"openai={upstream_url}", root=root)
    answer = httpx2.post(
        f"{proxy.url}/openai/chat/completions",
        json=chat("hi"),
        headers={"X-HashReplay-Test-Id": TEST_ID},
    )
    assert answer.status_code == 404
    lines = answer.json()["error"]["message"].splitlines()
    assert lines[0] == (
        f"hashreplay: no recording for POST {proxy.url}/openai/chat/completions (replay mode)"
    )
    assert lines[1] == f"  upstream:  {upstream_url}/chat/completions"
    assert f"POST {proxy.url}/openai/chat/completions" in proxy.log()

    bare = servers.serve("--mode", "replay", root=root)  # no upstream: the URL as asked
    answer = httpx2.post(f"{bare.url}{CHAT}?x=1", json=chat("hi"))
    first = answer.json()["error"]["message"].splitlines()[0]
    assert first == f"hashreplay: no recording for POST {bare.url}{CHAT}?x=1 (replay mode)"


# --- the plugin's passthrough headers ---------------------------------------------------------

PASSTHROUGH_SUITE = """
import os

import httpx2
import pytest

import hashreplay

SERVER = os.environ["SERVER_URL"]


@pytest.mark.hashreplay_fault(status=500, endpoint="/v1/never-called")
def test_calls_the_server():
    with hashreplay.conversation("alice"):
        assert httpx2.post(SERVER + "/v1/chat/completions", json={"model": "m", "messages": []}).status_code == 200
    own = {"X-HashReplay-Conversation": "bob"}  # the test's own header is its business
    assert httpx2.post(SERVER + "/v1/chat/completions", json={"model": "m", "messages": []}, headers=own).status_code == 200
"""


def test_the_plugin_adds_only_the_test_id_and_run_to_passthrough_requests(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server under test gets the two headers; a conversation or fault of the test never
    travels with them (server mode reads an explicit conversation header, nothing else)."""
    pytester.makepyprojecttoml(f'[tool.hashreplay]\npassthrough = ["{upstream.url}"]\n')
    pytester.makepyfile(test_suite=PASSTHROUGH_SUITE)
    monkeypatch.setenv("SERVER_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore")
    result.assert_outcomes(passed=1)
    first, second = upstream.calls
    ours = [sorted(k for k in c.headers if k.startswith("x-hashreplay")) for c in (first, second)]
    assert ours[0] == ["x-hashreplay-run", "x-hashreplay-test-id"]
    assert ours[1] == ["x-hashreplay-conversation", "x-hashreplay-run", "x-hashreplay-test-id"]
    assert second.headers["x-hashreplay-conversation"] == "bob"
    assert first.headers["x-hashreplay-test-id"] == "test_suite.py::test_calls_the_server"
