"""Server mode end to end: a pytest suite calls an app that runs in its own process.

The app (Starlette under uvicorn, in a subprocess) calls the fake upstream with the openai
SDK, calls `hashreplay.install()` at start-up and is wrapped in `TestIdMiddleware`. The
suite (pytester, with the app's URL in `passthrough`) sends it requests; the plugin adds
the test id and run headers, so the app's upstream calls are stored per test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx2
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import Servers, free_port, load

APP = """
import os

import openai
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

import hashreplay
from hashreplay.asgi import TestIdMiddleware

SESSION = hashreplay.install()
LLM = openai.AsyncOpenAI(
    base_url=os.environ["UPSTREAM_URL"] + "/v1", api_key="sk-app-0123456789abcdefghij", max_retries=0
)


def user(text):
    return [{"role": "user", "content": text}]


async def ask(request):
    question = (await request.json())["q"]
    answer = await LLM.chat.completions.create(model="gpt-fake-1", messages=user(question))
    return JSONResponse({"answer": answer.choices[0].message.content})


async def stream(request):
    question = (await request.json())["q"]

    async def words():
        chunks = await LLM.chat.completions.create(
            model="gpt-fake-1", messages=user(question), stream=True
        )
        async for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    return StreamingResponse(words(), media_type="text/plain")


async def stats(request):
    return JSONResponse(
        {"same_session": hashreplay.install() is SESSION, "mode": SESSION.config.mode.value,
         **SESSION.stats.as_dict()}
    )


app = TestIdMiddleware(
    Starlette(routes=[
        Route("/ask", ask, methods=["POST"]),
        Route("/stream", stream, methods=["POST"]),
        Route("/stats", stats),
    ])
)
"""

SUITE = """
import os

import httpx2

APP = os.environ["APP_URL"]


def ask(question):
    return httpx2.post(APP + "/ask", json={"q": question}, timeout=10).json()


def test_first():
    assert ask("the same question") == {"answer": "echo: the same question"}


def test_second():
    assert ask("the same question") == {"answer": "echo: the same question"}


def test_streamed():
    with httpx2.stream("POST", APP + "/stream", json={"q": "stream it"}, timeout=10) as r:
        assert "".join(r.iter_text()) == "echo: stream it"
"""


def start_app(servers: Servers, project: Path, port: int, mode: str, upstream_url: str) -> str:
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "app:app",
        "--port",
        str(port),
        "--app-dir",
        str(project),
    ]
    env = {"HASHREPLAY_ROOT": str(project), "INFERENCE_MODE": mode, "UPSTREAM_URL": upstream_url}
    return servers.start(argv, port=port, env=env, cwd=project, ready_path="/stats").url


def test_a_server_under_test_records_per_test_and_replays_offline(
    pytester: pytest.Pytester,
    servers: Servers,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = pytester.path
    port = free_port()
    app_url = f"http://127.0.0.1:{port}"
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nasyncio_default_fixture_loop_scope = "function"\n'
        f'[tool.hashreplay]\npassthrough = ["{app_url}"]\n'
    )
    (project / "app.py").write_text(APP)
    (project / "suite").mkdir()
    (project / "suite" / "test_service.py").write_text(SUITE)
    monkeypatch.setenv("APP_URL", app_url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)

    start_app(servers, project, port, "record", upstream.url)
    recorded = pytester.runpytest("suite")
    recorded.assert_outcomes(passed=3)
    recorded.stdout.fnmatch_lines(
        ["hashreplay: 0 replayed, 0 recorded, 0 missed (replay); 3 passed through"]
    )
    app_stats = httpx2.get(app_url + "/stats").json()
    assert app_stats == {
        "same_session": True,
        "mode": "record",
        "replayed": 0,
        "recorded": 3,
        "missed": 0,
        "passed_through": 0,
        "not_recorded": 0,
        "server_missed": 0,
    }

    files = sorted((project / "suite" / "recordings").glob("*.json"))
    assert len(files) == 3
    assert sorted(p for p in project.rglob("*.json") if ".hashreplay" not in p.parts) == files
    by_test = {load(f)["test_id"]: load(f) for f in files}
    assert set(by_test) == {
        "suite/test_service.py::test_first",
        "suite/test_service.py::test_second",
        "suite/test_service.py::test_streamed",
    }
    first = by_test["suite/test_service.py::test_first"]["request"]
    second = by_test["suite/test_service.py::test_second"]["request"]
    assert first["body"] == second["body"]  # the same request, stored once per test
    assert by_test["suite/test_service.py::test_streamed"]["response"]["is_streaming"] is True
    recorded_bytes = [f.read_bytes() for f in files]

    servers.stop_all()
    upstream.stop()
    start_app(servers, project, port, "replay", upstream.url)
    for _ in range(2):  # a re-run against the same app replays again (X-HashReplay-Run)
        replayed = pytester.runpytest("suite")
        replayed.assert_outcomes(passed=3)
    app_stats = httpx2.get(app_url + "/stats").json()
    assert app_stats == {
        "same_session": True,
        "mode": "replay",
        "replayed": 6,
        "recorded": 0,
        "missed": 0,
        "passed_through": 0,
        "not_recorded": 0,
        "server_missed": 0,
    }
    assert [f.read_bytes() for f in files] == recorded_bytes


MISSING = """
import os

import httpx2

APP = os.environ["APP_URL"]


def test_never_recorded():
    response = httpx2.post(APP + "/ask", json={"q": "never recorded"}, timeout=10)
    assert response.status_code == 500  # the app's SDK got the miss answer
"""


def test_a_miss_in_the_server_says_to_restart_it_recording_and_the_suite_counts_it(
    pytester: pytest.Pytester,
    servers: Servers,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server's mode comes from its own environment: its miss report says to restart
    it with INFERENCE_MODE=record-if-missing (not the pytest command, which would change
    nothing there), and the test side's summary counts the miss its answer reported."""
    project = pytester.path
    port = free_port()
    app_url = f"http://127.0.0.1:{port}"
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nasyncio_default_fixture_loop_scope = "function"\n'
        f'[tool.hashreplay]\npassthrough = ["{app_url}"]\n'
    )
    (project / "app.py").write_text(APP)
    (project / "suite").mkdir()
    (project / "suite" / "test_gap.py").write_text(MISSING)
    monkeypatch.setenv("APP_URL", app_url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    upstream.stop()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    env = {"HASHREPLAY_ROOT": str(project), "INFERENCE_MODE": "replay", "UPSTREAM_URL": "x"}
    server = servers.start(
        [*argv, "--app-dir", str(project)], port=port, env=env, cwd=project, ready_path="/stats"
    )

    run = pytester.runpytest("suite")
    run.assert_outcomes(passed=1)
    run.stdout.fnmatch_lines(
        [
            "hashreplay: 0 replayed, 0 recorded, 0 missed (replay); 1 passed through",
            "hashreplay: 1 missed in a server under test (its log holds each report); to "
            "record them, restart the server with INFERENCE_MODE=record-if-missing in its "
            "environment and run the tests again",
        ]
    )
    log = server.log()
    assert "hashreplay: no recording for POST" in log
    assert (
        "  to record it: restart the server with INFERENCE_MODE=record-if-missing in its "
        "environment (the mode given to pytest does not reach it), then run the test again: "
        "pytest suite/test_gap.py::test_never_recorded"
    ) in log
    assert "INFERENCE_MODE=record-if-missing pytest suite/" not in log
