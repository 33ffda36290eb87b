"""Every way http.client and urllib let a caller read a response nothing names
(`urlopen(req).read()`, `conn.getresponse().read()`, `json.load(urlopen(url))`, iterating
`urlopen(url)`, ...) records the whole answer and replays it (docs/design.md §11, §15): the
response stays alive while one of its own methods reads it. A re-record through such an
idiom replaces a good recording with the same good one, never with an empty, abandoned one."""

from __future__ import annotations

import gc
import http.client
import io
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hashreplay import Mode, test_context
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.integration.three_phases import TEST_ID, AllAdapters, adapters, three_phases

__all__ = ["adapters"]

LINES = b"first line\nsecond line\nthird line\n"
DOC = {"answer": "Paris", "n": [1, 2, 3]}


def _conn(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    assert parts.hostname is not None
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)


def _getresponse_read(url: str) -> Any:
    conn = _conn(url)
    conn.request("GET", "/lines")
    return conn.getresponse().read()


def _getresponse_readlines(url: str) -> Any:
    conn = _conn(url)
    conn.request("GET", "/lines")
    return conn.getresponse().readlines()


def _readinto(url: str) -> Any:
    buffer = bytearray(len(LINES))
    size = urllib.request.urlopen(f"{url}/lines").readinto(buffer)
    return bytes(buffer[:size])


def _text_wrapper(url: str) -> Any:
    return io.TextIOWrapper(urllib.request.urlopen(f"{url}/lines"), encoding="utf-8").read()


def _post_read(url: str) -> Any:
    request = urllib.request.Request(
        f"{url}/doc", data=b'{"q": 1}', headers={"content-type": "application/json"}
    )
    return json.loads(urllib.request.urlopen(request).read())


IDIOMS: dict[str, Callable[[str], Any]] = {
    "urlopen(req).read()": _post_read,
    "urlopen(url).read()": lambda url: urllib.request.urlopen(f"{url}/lines").read(),
    "urlopen(url).read(n) to the end": lambda url: urllib.request.urlopen(f"{url}/lines").read(
        10_000
    ),
    "urlopen(url).read1()": lambda url: urllib.request.urlopen(f"{url}/lines").read1(),
    "urlopen(url).readlines()": lambda url: urllib.request.urlopen(f"{url}/lines").readlines(),
    "json.load(urlopen(url))": lambda url: json.load(urllib.request.urlopen(f"{url}/doc")),
    "for line in urlopen(url)": lambda url: [
        line for line in urllib.request.urlopen(f"{url}/lines")
    ],
    "list(urlopen(url))": lambda url: list(urllib.request.urlopen(f"{url}/lines")),
    "urlopen(url).readinto(buf)": _readinto,
    "TextIOWrapper(urlopen(url)).read()": _text_wrapper,
    "conn.getresponse().read()": _getresponse_read,
    "conn.getresponse().readlines()": _getresponse_readlines,
}


def _script(upstream: FakeUpstream) -> None:
    upstream.script("GET", "/lines", Scripted(body=LINES, headers={"content-type": "text/plain"}))
    doc = Scripted(json=DOC)
    upstream.script("GET", "/doc", doc)
    upstream.script("POST", "/doc", doc)


def _ended(files: list[Path]) -> list[Any]:
    return [json.loads(f.read_text())["response"].get("ended") for f in files]


@pytest.mark.parametrize("idiom", IDIOMS)
def test_an_unnamed_response_is_recorded_whole_and_replays(
    idiom: str, upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    _script(upstream)
    run = IDIOMS[idiom]
    gc.disable()  # the response goes by reference counting alone, as in a real program
    try:
        phases = three_phases(upstream, adapters, run)
    finally:
        gc.enable()
    assert phases.live in (LINES, LINES.splitlines(keepends=True), DOC, LINES.decode())
    assert phases.live == phases.offline == phases.fresh
    assert phases.recorded_files == phases.live_calls == 1
    assert _ended(adapters.files()) == [None]  # complete: no `ended` state


def test_an_unnamed_response_read_in_part_is_recorded_as_abandoned_and_replays(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    _script(upstream)
    gc.disable()
    try:
        phases = three_phases(
            upstream, adapters, lambda url: urllib.request.urlopen(f"{url}/lines").readline()
        )
    finally:
        gc.enable()
    assert phases.live == phases.offline == phases.fresh == b"first line\n"
    assert _ended(adapters.files()) == [{"after_chunks": 1, "state": "abandoned"}]


def test_a_re_record_through_an_unnamed_response_keeps_the_good_recording(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    _script(upstream)
    adapters.start(Mode.RECORD)
    with test_context(TEST_ID), urllib.request.urlopen(f"{upstream.url}/lines") as response:
        assert response.read() == LINES
    assert adapters.session is not None
    adapters.session.flush()
    (file,) = adapters.files()
    good = file.read_bytes()

    _script(upstream)
    adapters.start(Mode.RECORD)
    gc.disable()
    try:
        with test_context(TEST_ID):
            body = IDIOMS["urlopen(url).read()"](upstream.url)  # not in an assert: pytest's
        adapters.session.flush()  # rewriting would keep the response alive
        assert body == LINES
    finally:
        gc.enable()
    assert adapters.files() == [file]
    assert file.read_bytes() == good
