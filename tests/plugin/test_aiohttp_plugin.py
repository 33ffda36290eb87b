"""The pytest plugin turns the aiohttp adapter on: an aiohttp suite records, then replays
with its upstream stopped; a request never recorded fails its test with the miss report."""

from __future__ import annotations

import aiohttp  # noqa: F401  # see below
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.plugin.test_plugin import GUARD_CONFTEST, PYPROJECT, recordings

pytest_plugins = ["pytester"]

# In-process pytester runs restore sys.modules afterwards: an aiohttp first imported inside
# one run would leave the next run a second aiohttp, while the adapter module (kept as an
# attribute of its package) patches the first. Importing it here puts it in the baseline.

AIOHTTP_TESTS = """
import os
import aiohttp

URL = os.environ["FAKE_URL"]

async def test_json():
    async with aiohttp.ClientSession() as s:
        async with s.post(URL + "/v1/chat/completions",
                          json={"model": "m", "messages": [{"role": "user", "content": "aio"}]}) as r:
            body = await r.json()
    print("TEXT:", body["choices"][0]["message"]["content"])
    assert body["choices"][0]["message"]["content"] == "echo: aio"

async def test_stream():
    body = {"model": "m", "messages": [{"role": "user", "content": "aio stream"}], "stream": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(URL + "/v1/chat/completions", json=body) as r:
            lines = [line async for line in r.content if line.startswith(b"data: {")]
    print("LINES:", len(lines))
    assert lines
"""


@pytest.fixture
def project(pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makeconftest(GUARD_CONFTEST)
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_aio.py").write_text(AIOHTTP_TESTS)
    return pytester


def test_aiohttp_suite_records_then_replays_offline(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = project.runpytest("--inference-mode=record", "-s")
    recorded.assert_outcomes(passed=2)
    recorded.stdout.fnmatch_lines(["hashreplay: 0 replayed, 2 recorded, 0 missed (record)"])
    assert len(recordings(project.path)) == 2
    live = sorted(line for line in recorded.outlines if line.startswith(("TEXT:", "LINES:")))

    upstream.stop()
    monkeypatch.setenv("GUARD", "1")
    replayed = project.runpytest("-s")
    replayed.assert_outcomes(passed=2)
    replayed.stdout.fnmatch_lines(
        ["connect attempts: 0", "hashreplay: 2 replayed, 0 recorded, 0 missed (replay)"]
    )
    assert (
        sorted(line for line in replayed.outlines if line.startswith(("TEXT:", "LINES:"))) == live
    )


def test_an_unrecorded_aiohttp_request_fails_its_test(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GUARD", "1")
    result = project.runpytest("suite/test_aio.py::test_json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*connect attempts: 0*", "*0 replayed, 0 recorded, 1 missed*"])
