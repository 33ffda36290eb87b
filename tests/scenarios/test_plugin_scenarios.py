"""Scenarios in real pytest sessions (pytester): unconsumed recordings warn or fail, fault
markers, the `hashreplay` fixture's `wait_hanging`, the timing marker, bad marker values."""

from __future__ import annotations

import json

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.sdks import preload, sdk

preload("requests")  # in pytester's baseline where installed (see tests/conftest.py)

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest"
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"

# the project opts in to hashreplay (docs/design.md §16 Activation)
[tool.hashreplay]
"""

TESTS = """
import asyncio, os
import httpx2, pytest

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
CALLS = int(os.environ.get("CALLS", "3"))

def ask(text="same"):
    return httpx2.post(URL, json={"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}]})

def test_warns():
    for _ in range(CALLS):
        assert ask().status_code == 200

@pytest.mark.hashreplay(unconsumed="fail")
def test_strict():
    for _ in range(CALLS):
        assert ask().status_code == 200

@pytest.mark.hashreplay(unconsumed="ignore")
def test_quiet():
    for _ in range(CALLS):
        assert ask().status_code == 200

@pytest.mark.hashreplay_fault(status=429, times=1, endpoint="/chat/completions")
@pytest.mark.hashreplay(timing=True)
def test_fault_then_recorded():
    assert ask("f").status_code == 429
    assert ask("f").json()["choices"][0]["message"]["content"] == "echo: f"

@pytest.mark.hashreplay_fault(hang=True)
async def test_hang(hashreplay):
    async with httpx2.AsyncClient(timeout=None) as c:
        task = asyncio.ensure_future(c.post(URL, json={"model": "m"}))
        await hashreplay.wait_hanging(timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_app=TESTS)
    return pytester


def test_unconsumed_faults_hangs_and_timing_in_a_real_session(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = project.runpytest("--inference-mode=record")
    recorded.assert_outcomes(passed=5)
    files = {
        json.loads(p.read_text())["test_id"]: json.loads(p.read_text())
        for p in project.path.rglob("recordings/*.json")
    }
    faulted = files["test_app.py::test_fault_then_recorded"]
    assert "later_responses" not in faulted  # the 429 was never recorded
    assert faulted["response"]["status"] == 200
    assert "timing" in faulted["response"]  # the marker's timing=True
    assert "timing" not in files["test_app.py::test_warns"]["response"]

    upstream.stop()
    monkeypatch.setenv("CALLS", "1")
    replayed = project.runpytest("-W", "always")
    replayed.assert_outcomes(passed=4, failed=1)
    replayed.stdout.fnmatch_lines(
        [
            "*hashreplay: test_app.py::test_strict left 2 recorded response(s) unused",
            "*recordings/*.json: 1 of 3 recorded response(s) used, 2 not",
            "*re-record it with INFERENCE_MODE=record*",
        ]
    )
    replayed.stdout.fnmatch_lines(
        ["*HashReplayWarning: hashreplay: test_app.py::test_warns left 2 recorded response(s)*"]
    )
    assert "test_quiet left" not in replayed.stdout.str()
    # test_quiet's (unconsumed="ignore") are not counted
    replayed.stdout.fnmatch_lines(["hashreplay: *; 4 recorded response(s) left unused"])


def test_bad_scenario_markers_are_usage_errors_naming_the_valid_forms(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.hashreplay_fault(error="explode")
        def test_fault():
            pass

        @pytest.mark.hashreplay(pace="soon")
        def test_pace():
            pass

        @pytest.mark.hashreplay_fault(status=500, endpoint="/nowhere")
        def test_unmatched():
            pass
        """
    )
    result = project.runpytest("test_bad.py", "-W", "always")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.hashreplay_fault: unknown fault kind error='explode'; valid forms: *",
            "*@pytest.mark.hashreplay pace: 'soon' is not a pace; use *fixed:<ms>*",
            "*hashreplay_fault(status=500, endpoint='/nowhere') matched no request of this test*",
        ]
    )


OTHER_CLIENTS = """
import asyncio, json, os, time, urllib.request
import aiohttp, pytest, requests

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
REPLAY = os.environ.get("REPLAY") == "1"
H = {"content-type": "application/json"}
def body(text, stream=False):
    return json.dumps({"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}],
                       "stream": stream}).encode()

@pytest.mark.hashreplay_fault(status=429, times=1)
def test_requests_429_then_200():
    assert requests.post(URL, data=body("r"), headers=H).status_code == 429
    assert requests.post(URL, data=body("r"), headers=H).json()["choices"][0]["message"]["content"] == "echo: r"

# a fault that breaks a recorded stream needs the recording: it is marked on replay only
@(pytest.mark.hashreplay_fault(error="read_timeout", after_chunks=1) if REPLAY else lambda f: f)
def test_urllib_stream_breaks():
    req = urllib.request.Request(URL, body("u", stream=True), H, method="POST")
    with urllib.request.urlopen(req) as r:
        assert r.read1(65536).startswith(b"data: ")
        if REPLAY:
            with pytest.raises(TimeoutError):
                r.read()
        else:
            assert b"[DONE]" in r.read()  # recorded whole

@pytest.mark.hashreplay_fault(hang=True)
async def test_aiohttp_hang(hashreplay):
    async with aiohttp.ClientSession() as s:
        task = asyncio.ensure_future(s.post(URL, data=body("h"), headers=H))
        await hashreplay.wait_hanging(timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

@pytest.mark.hashreplay(pace="fixed:30")
async def test_aiohttp_paced():
    start = time.monotonic()
    async with aiohttp.ClientSession() as s, s.post(URL, data=body("p", stream=True), headers=H) as r:
        chunks = [c async for c in r.content.iter_any()]
    if REPLAY:
        assert time.monotonic() - start >= 0.03 * len(chunks) * 0.9
"""


def test_fault_and_pace_markers_with_requests_urllib_and_aiohttp(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk("requests")  # the inner suite drives it (the `sdks` extra)
    project.makepyfile(test_others=OTHER_CLIENTS)
    recorded = project.runpytest("test_others.py", "--inference-mode=record")
    recorded.assert_outcomes(passed=4)
    upstream.stop()
    monkeypatch.setenv("REPLAY", "1")
    replayed = project.runpytest("test_others.py")
    replayed.assert_outcomes(passed=4)
