"""A server under test's own misses, as it reports them on its answers to `passthrough`
requests (`X-HashReplay-Server-Misses`, or a miss answer's `X-HashReplay-Miss`), are counted
in the run's summary through every HTTP client, not only httpx: requests (urllib3),
urllib.request (http.client) and aiohttp each hand the answer's headers to the session."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hashreplay import test_context
from hashreplay.adapters import activate, deactivate
from hashreplay.core.config import load_config
from hashreplay.engine.session import Session
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.sdks import sdk

TEST_ID = "tests/test_app.py::test_it"

requests = sdk("requests")
aiohttp = sdk("aiohttp")


def via_requests(url: str) -> int:
    status: int = requests.post(url, json={"q": 1}, timeout=10).status_code
    return status


def via_urllib(url: str) -> int:
    request = urllib.request.Request(url, data=b'{"q": 1}', method="POST")
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status: int = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    return status


def via_aiohttp(url: str) -> int:
    async def go() -> int:
        async with aiohttp.ClientSession() as s, s.post(url, json={"q": 1}) as response:
            await response.read()
            status: int = response.status
            return status

    return asyncio.run(go())


CLIENTS: dict[str, Callable[[str], int]] = {
    "requests": via_requests,
    "urllib": via_urllib,
    "aiohttp": via_aiohttp,
}


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture
def replaying(tmp_path: Path, upstream: FakeUpstream) -> Iterator[Session]:
    config = load_config(tmp_path, env={}, mode="replay", passthrough=[upstream.url + "/app"])
    session = Session(config)
    activate(session)
    try:
        yield session
    finally:
        deactivate()
        session.close()


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    ("headers", "status", "counted"),
    [
        ({"x-hashreplay-server-misses": "2"}, 500, 2),  # the in-process middleware's count
        ({"x-hashreplay-miss": "1"}, 599, 1),  # a miss answer the app passed on as it got it
        ({}, 200, 0),
    ],
    ids=["middleware-count", "miss-answer", "none"],
)
def test_a_servers_misses_are_counted_through_each_client(
    client: str,
    headers: dict[str, str],
    status: int,
    counted: int,
    upstream: FakeUpstream,
    replaying: Session,
) -> None:
    answer = {"content-type": "application/json", **headers}
    upstream.script("POST", "/app/chat", Scripted(status=status, json={"ok": 1}, headers=answer))
    with test_context(TEST_ID):
        assert CLIENTS[client](f"{upstream.url}/app/chat") == status
    assert replaying.stats.passed_through == 1
    assert replaying.stats.server_missed == counted
    assert replaying.stats.missed == 0  # the server's misses, not this process's
