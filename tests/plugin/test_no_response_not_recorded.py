"""Only answers are recorded (docs/design.md, "Only answers are recorded"), through real
pytest runs: a call that got no HTTP response (refused, a hang-up or a timeout before the
status line) is never written in any recording mode, whatever the client; the test sees the
real error and the summary counts it; a `record` run with the upstream down keeps every good
recording byte for byte; error statuses and streams broken after the status are answers and
are recorded; `record_failures = "all"` records transport errors too; a file an older
version wrote with only a transport error is flagged by `verify` and recorded again by
`record-if-missing`."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import aiohttp  # noqa: F401  # imported here, in pytester's baseline (see tests/conftest.py)
import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.sdks import preload, sdk

preload("requests")  # in pytester's baseline where installed (see tests/conftest.py)

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest"

[tool.hashreplay]
{extra}
"""

#: One test per client library; each makes one call to $FAKE_URL and reports what it got.
CLIENTS = """
import asyncio, http.client, json, os, urllib.request
from urllib.parse import urlsplit

import aiohttp, httpx, httpx2, pytest, requests, urllib3

URL = os.environ["FAKE_URL"]
TIMEOUT = float(os.environ.get("CLIENT_TIMEOUT", "5"))
CHAT = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "answers"}]}


def call(client):
    url = URL + "/v1/chat/completions"
    if client == "httpx2":
        with httpx2.Client(timeout=TIMEOUT) as c:
            return c.post(url, json=CHAT).status_code
    if client == "httpx":
        with httpx.Client(timeout=TIMEOUT) as c:
            return c.post(url, json=CHAT).status_code
    if client == "aiohttp":
        async def go():
            timeout = aiohttp.ClientTimeout(total=TIMEOUT)
            async with aiohttp.ClientSession(timeout=timeout) as s:
                async with s.post(url, json=CHAT) as r:
                    await r.read()
                    return r.status
        return asyncio.run(go())
    if client == "requests":
        return requests.post(url, json=CHAT, timeout=TIMEOUT).status_code
    if client == "urllib3":
        pool = urllib3.PoolManager(retries=False, timeout=TIMEOUT)
        return pool.request("POST", url, json=CHAT).status
    if client == "urllib":
        req = urllib.request.Request(url, data=json.dumps(CHAT).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as e:
            e.read()
            return e.code
    parts = urlsplit(URL)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(CHAT).encode())
    response = conn.getresponse()
    response.read()
    return response.status


@pytest.mark.parametrize(
    "client", ["httpx2", "httpx", "aiohttp", "requests", "urllib3", "urllib", "http.client"]
)
def test_call(client):
    print(f"STATUS {client} {call(client)}")
"""

#: A streamed answer read to its end (or to where the upstream broke it off).
STREAM = """
import os
import httpx2

def test_stream():
    body = {"model": "gpt-fake-1", "stream": True,
            "messages": [{"role": "user", "content": "one two three four five six"}]}
    with httpx2.Client() as c:
        with c.stream("POST", os.environ["FAKE_URL"] + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for _ in r.iter_lines():
                pass
"""

ALL_CLIENTS = 7


def closed_port_url() -> str:
    """A loopback URL on which nothing listens: every connect is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def make_project(pytester: pytest.Pytester, tests: str, extra: str = "") -> Path:
    if tests is CLIENTS:  # it drives requests and urllib3 too (the `sdks` extra)
        sdk("requests")
        sdk("urllib3")
    pytester.makepyprojecttoml(PYPROJECT.format(extra=extra))
    (pytester.path / "suite").mkdir(exist_ok=True)
    (pytester.path / "suite" / "test_app.py").write_text(tests)
    return pytester.path


def recordings(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("suite/recordings/*.json"))}


def responses(root: Path) -> list[dict[str, object]]:
    found = []
    for content in recordings(root).values():
        data = json.loads(content)
        found.extend([data["response"], *(data.get("later_responses") or [])])
    return found


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("CLIENT_TIMEOUT", raising=False)


def test_a_refused_connection_is_never_recorded_by_any_client(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester, CLIENTS)
    monkeypatch.setenv("FAKE_URL", closed_port_url())
    for mode in ("record-if-missing", "record"):
        result = pytester.runpytest(f"--inference-mode={mode}", "-p", "no:randomly")
        # each test sees its client's own connection error, not a recording of it
        result.assert_outcomes(failed=ALL_CLIENTS)
        result.stdout.re_match_lines(
            [
                r".*(ConnectError|ClientConnectorError|ConnectionError|NewConnectionError"
                r"|URLError|ConnectionRefusedError).*",
            ]
        )
        result.stdout.fnmatch_lines(
            [
                f"hashreplay: 0 replayed, 0 recorded, 0 missed ({mode}); "
                f"{ALL_CLIENTS} calls not recorded: no response"
            ]
        )
        assert recordings(root) == {}

    # with the upstream back, record-if-missing records the answers: nothing stale in the way
    with FakeUpstream() as upstream:
        monkeypatch.setenv("FAKE_URL", upstream.url)
        result = pytester.runpytest("--inference-mode=record-if-missing", "-s")
        result.assert_outcomes(passed=ALL_CLIENTS)
        result.stdout.fnmatch_lines(
            [f"hashreplay: 0 replayed, {ALL_CLIENTS} recorded, 0 missed (record-if-missing)"]
        )
    replayed = pytester.runpytest("-s")
    replayed.assert_outcomes(passed=ALL_CLIENTS)
    assert main(["verify", "--root", str(root)]) == 0


def test_record_with_the_upstream_down_keeps_every_recording_byte_for_byte(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester, CLIENTS)
    with FakeUpstream() as upstream:
        monkeypatch.setenv("FAKE_URL", upstream.url)
        pytester.runpytest("--inference-mode=record").assert_outcomes(passed=ALL_CLIENTS)
    good = recordings(root)
    assert len(good) == ALL_CLIENTS

    monkeypatch.setenv("FAKE_URL", closed_port_url())
    result = pytester.runpytest("--inference-mode=record", "--hashreplay-prune")
    result.assert_outcomes(failed=ALL_CLIENTS)
    result.stdout.fnmatch_lines(
        [f"hashreplay: 0 replayed, 0 recorded, 0 missed (record); {ALL_CLIENTS} calls *"]
    )
    # not one file rewritten, and none pruned as unused: a failed re-record is no re-record
    assert recordings(root) == good
    pytester.runpytest().assert_outcomes(passed=ALL_CLIENTS)


@pytest.mark.parametrize(
    ("scripted", "timeout"),
    [
        (Scripted(close_without_response=True), "5"),  # the server hangs up before the head
        (Scripted(delay=3.0), "0.3"),  # the client's timeout fires before the status line
    ],
    ids=["hang-up", "timeout"],
)
def test_no_status_line_is_no_answer(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    scripted: Scripted,
    timeout: str,
) -> None:
    root = make_project(pytester, CLIENTS)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("CLIENT_TIMEOUT", timeout)
    upstream.script("POST", "/v1/chat/completions", *[scripted] * 20)
    result = pytester.runpytest("--inference-mode=record-if-missing", "-k", "httpx2 or requests")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*; 2 calls not recorded: no response"])
    assert recordings(root) == {}


@pytest.mark.parametrize("status", [500, 429])
def test_error_statuses_are_answers_and_are_recorded(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    root = make_project(pytester, CLIENTS)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    upstream.script("POST", "/v1/chat/completions", *[Scripted(status=status)] * ALL_CLIENTS)
    result = pytester.runpytest("--inference-mode=record", "-s")
    result.assert_outcomes(passed=ALL_CLIENTS)
    result.stdout.fnmatch_lines([f"*STATUS httpx2 {status}", f"*STATUS requests {status}"])
    result.stdout.no_fnmatch_line("*not recorded*")
    assert [r["status"] for r in responses(root)] == [status] * ALL_CLIENTS

    upstream.stop()
    replayed = pytester.runpytest("-s")
    replayed.assert_outcomes(passed=ALL_CLIENTS)
    replayed.stdout.fnmatch_lines([f"*STATUS aiohttp {status}", f"*STATUS http.client {status}"])


def test_a_stream_broken_after_the_status_is_an_answer(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester, STREAM)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    upstream.script("POST", "/v1/chat/completions", Scripted(disconnect_after_chunks=2))
    result = pytester.runpytest("--inference-mode=record")
    result.assert_outcomes(failed=1)  # the client's own error for the broken stream
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 1 recorded, 0 missed (record)"])
    (response,) = responses(root)
    assert response["status"] == 200
    assert response["ended"] == {"state": "error", "after_chunks": 2}


def test_record_failures_all_records_transport_errors_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester, CLIENTS, 'record_failures = "all"')
    monkeypatch.setenv("FAKE_URL", closed_port_url())
    result = pytester.runpytest("--inference-mode=record", "-k", "httpx2 or aiohttp or urllib3")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 3 recorded, 0 missed (record)"])
    stored = responses(root)
    assert [(r["status"], r["is_exception"]) for r in stored] == [(None, True)] * 3
    # as the user asked: replayed as the client's own error, and verify does not object
    replayed = pytester.runpytest("-k", "httpx2 or aiohttp or urllib3")
    replayed.assert_outcomes(failed=3)
    replayed.stdout.fnmatch_lines(["hashreplay: 3 replayed, 0 recorded, 0 missed (replay)"])
    assert main(["verify", "--root", str(root)]) == 0


def test_record_failures_is_a_closed_set(pytester: pytest.Pytester) -> None:
    make_project(pytester, CLIENTS, 'record_failures = "errors"')
    result = pytester.runpytest("--inference-mode=record")
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ['*record_failures`: \'errors\' is not valid; use one of "responses", "all"*']
    )


def test_an_older_no_response_recording_is_flagged_and_recorded_again(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file that an older version wrote for a refused connection (what `record_failures =
    "all"` writes now): `verify` names it and the fix; `record-if-missing` records it again
    instead of replaying "connection refused" for ever."""
    root = make_project(pytester, CLIENTS, 'record_failures = "all"')
    monkeypatch.setenv("FAKE_URL", closed_port_url())
    pytester.runpytest("--inference-mode=record", "-k", "httpx2 or requests")
    stale = recordings(root)
    assert len(stale) == 2
    make_project(pytester, CLIENTS)  # the default: answers only

    capsys.readouterr()
    assert main(["verify", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert out.count("a call that got no HTTP response") == 2
    assert "httpx2.ConnectError" in out
    assert (
        "re-record it with the upstream reachable (INFERENCE_MODE=record-if-missing pytest "
        "suite/test_app.py::test_call[httpx2] replaces it)"
    ) in out

    # the upstream still down: the file stays as it is, the test sees the real error
    result = pytester.runpytest("--inference-mode=record-if-missing", "-k", "httpx2 or requests")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*0 replayed, 0 recorded*; 2 calls not recorded: no response*"])
    assert recordings(root) == stale

    with FakeUpstream() as upstream:
        monkeypatch.setenv("FAKE_URL", upstream.url)
        result = pytester.runpytest(
            "--inference-mode=record-if-missing", "-k", "httpx2 or requests"
        )
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 2 recorded, 0 missed *"])
    assert sorted(recordings(root)) == sorted(stale)  # the same files, now with answers
    assert [r["status"] for r in responses(root)] == [200, 200]
    pytester.runpytest("-k", "httpx2 or requests").assert_outcomes(passed=2)
    assert main(["verify", "--root", str(root)]) == 0
