"""WebSocket connections through real pytest runs (docs/design.md §17): a test's connection
is recorded in record mode and replays with the server gone; a recording whose frame list
is malformed fails only its own test, naming the file and the frame, and is left as it
was; a changed client frame fails its test with the miss report even when the code
swallows the error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import websockets.asyncio.client  # imported here, in pytester's baseline
import websockets.sync.client  # noqa: F401

from tests.fakes.realtime import FakeRealtime

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio"

[tool.hashreplay]
"""

APP = """
import json, os
from websockets.sync.client import connect

URL = os.environ["WS_URL"]
SAID = os.environ.get("SAID", "hi")


def talk(path):
    with connect(URL + path) as ws:
        first = json.loads(ws.recv())["type"]
        ws.send(json.dumps({"say": SAID}))
        echo = json.loads(ws.recv())
        return first, echo["got"]["say"]


def test_voice():
    assert talk("/echo") == ("hello", "hi")


def test_other_voice():
    assert talk("/echo?other=1") == ("hello", "hi")


def test_swallowed():
    try:
        talk("/echo?swallowed=1")
    except Exception:
        pass  # the code under test hides the failure: the test still fails


def test_no_connection():
    pass  # opens no connection: passes in every mode, and has no file
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "SAID"):
        monkeypatch.delenv(name, raising=False)
    pytester.makefile(".toml", pyproject=PYPROJECT)
    pytester.makepyfile(test_app=APP)
    return pytester


def recordings(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if ".hashreplay" not in p.parts)


def record(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    with FakeRealtime() as server:
        monkeypatch.setenv("WS_URL", server.url)
        project.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    files = recordings(project.path)
    assert len(files) == 3
    return {json.loads(p.read_text())["request"]["url"]: p for p in files}


def test_connections_replay_with_the_server_gone(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(project, monkeypatch)  # WS_URL still names the stopped server's port
    result = project.runpytest()
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*hashreplay: 3 replayed*"])


def test_a_malformed_frame_list_fails_only_its_test(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = record(project, monkeypatch)
    broken = next(p for url, p in files.items() if url.endswith("/echo"))
    data = json.loads(broken.read_text())
    data["response"]["frames"][2]["type"] = "video"
    broken.write_text(json.dumps(data, indent=2))
    before = broken.read_bytes()
    result = project.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*{broken.name}*response.frames[[]2[]].type: expected one of 'text', 'binary', "
            "'close', found 'video'*",
            "*FAILED test_app.py::test_voice*",
        ]
    )
    assert broken.read_bytes() == before


def test_a_changed_client_frame_fails_its_test_even_when_swallowed(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = record(project, monkeypatch)
    swallowed = next(p for url, p in files.items() if "swallowed" in url)
    monkeypatch.setenv("SAID", "changed")
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*frames[[]1[]].say: recorded 'hi', incoming 'changed'*",
        ]
    )
    assert swallowed.name in result.stdout.str()
