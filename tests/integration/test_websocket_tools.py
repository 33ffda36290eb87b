"""The tools on a WebSocket connection's file (docs/design.md §17, "The tools see these files as
they see others"), through real pytest sessions: a suite on aiohttp's `ws_connect` records
against a local fake realtime server, replays with it stopped; the fixture's `calls` lists the
connection as one call; `verify`, `rehash`, `show`, `textconv`, `mv`, `prune` (by the usage
log), `status --older-than` (age, `recorded_on`) and a stale recording failing its test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hashreplay.cli import main
from tests.fakes.aio_realtime import FakeRealtime

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:randomly -p no:cassetter"

[tool.hashreplay]
"""

SUITE = """
import asyncio
import os

import aiohttp

URL = os.environ["FAKE_WS_URL"]
TALK = os.environ.get("TALK", "1") == "1"


async def talk():
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(
            URL + "/v1/realtime?model=gpt-realtime",
            headers={"Authorization": "Bearer sk-proj-Tools0123456789abcdefABCDEF"},
        ) as ws:
            first = await ws.receive_json()
            await ws.send_json({"type": "session.update", "session": {"instructions": "be brief"}})
            second = await ws.receive_json()
            return first["type"], second["type"]


def test_voice(hashreplay):
    if not TALK:
        return
    assert asyncio.run(talk()) == ("session.created", "session.updated")
    [call] = hashreplay.calls
    assert (call.method, call.endpoint, call.status) == ("GET", "/v1/realtime?model=gpt-realtime", 101)
    print("SOURCE", call.source)
"""

TEST_ID = "test_suite.py::test_voice"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().out


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if ".hashreplay" not in p.parts)


@pytest.fixture
def recorded(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The suite recorded once against the fake, which is then stopped."""
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_suite=SUITE)
    with FakeRealtime() as fake:
        monkeypatch.setenv("FAKE_WS_URL", fake.url)
        result = pytester.runpytest("--inference-mode=record", "-s")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["*SOURCE recorded*"])
    [path] = files(pytester.path)
    return path


def test_a_connection_replays_as_one_call_with_the_server_stopped(
    pytester: pytest.Pytester, recorded: Path
) -> None:
    before = recorded.read_bytes()
    result = pytester.runpytest("--inference-mode=replay", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SOURCE replayed*"])
    assert recorded.read_bytes() == before


def test_verify_rehash_show_and_textconv_read_a_connection_file(
    pytester: pytest.Pytester, recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "verify") == (0, "Summary: 0/1 files with problems\n")
    assert cli(capsys, "rehash") == (0, "Summary: 0/1 files re-keyed\n")
    code, shown = cli(capsys, "show", str(recorded))
    assert code == 0
    assert "frames (4):" in shown
    assert '→ sent [1]: {"session":{"instructions":"be brief"},"type":"session.update"}' in shown
    assert "← received [0]: " in shown and '"type":"session.created"' in shown
    assert "→ sent [3]: close 1000" in shown
    code, text = cli(capsys, "textconv", str(recorded))
    assert code == 0
    lines = text.splitlines()
    assert "response: 101" in lines
    assert lines[-1] == "end: closed"
    assert [ln.split(" [")[0] for ln in lines if ln.startswith(("→", "←"))] == [
        "← received",
        "→ sent",
        "← received",
        "→ sent",
    ]
    assert "sk-proj-Tools" not in text


def test_verify_names_a_hand_broken_frame_and_its_test_fails_alone(
    pytester: pytest.Pytester, recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(recorded.read_text())
    data["response"]["frames"][1]["direction"] = "sideways"
    recorded.write_text(json.dumps(data, indent=2))
    broken = recorded.read_bytes()
    code, out = cli(capsys, "verify")
    assert code != 0
    assert "response.frames[1].direction" in out and recorded.name in out
    result = pytester.runpytest("--inference-mode=replay")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*response.frames[[]1[]].direction*"])
    assert recorded.read_bytes() == broken  # never rewritten


def test_mv_rekeys_a_connection_under_a_renamed_test(
    pytester: pytest.Pytester, recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = cli(capsys, "mv", TEST_ID, "test_suite.py::test_speech")
    assert code == 0
    [moved] = files(pytester.path)
    assert json.loads(moved.read_text())["test_id"] == "test_suite.py::test_speech"
    pytester.makepyfile(test_suite=SUITE.replace("def test_voice", "def test_speech"))
    result = pytester.runpytest("--inference-mode=replay", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SOURCE replayed*"])


def test_prune_keeps_a_used_connection_and_drops_an_unused_one(
    pytester: pytest.Pytester,
    recorded: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytester.runpytest("--inference-mode=replay").assert_outcomes(passed=1)
    code, out = cli(capsys, "prune")
    assert code == 0 and recorded.exists(), out
    monkeypatch.setenv("TALK", "0")  # the test no longer opens the connection
    pytester.runpytest("--inference-mode=replay").assert_outcomes(passed=1)
    code, out = cli(capsys, "prune")
    assert code == 0, out
    assert not recorded.exists()


def test_age_lists_and_a_stale_connection_fails_its_test(
    pytester: pytest.Pytester, recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data: dict[str, Any] = json.loads(recorded.read_text())
    assert data["response"]["recorded_on"]
    data["response"]["recorded_on"] = "2020-01-01"
    recorded.write_text(json.dumps(data, indent=2))
    _, out = cli(capsys, "status", "--older-than", "90d")
    assert recorded.name in out, out
    pytester.makepyprojecttoml(PYPROJECT + 'max_age = "180d"\nstale = "fail"\n')
    result = pytester.runpytest("--inference-mode=replay")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*2020-01-01*"])


def test_drift_compares_the_live_frames_shapes_with_the_recorded_ones(
    pytester: pytest.Pytester, recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = recorded.read_bytes()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-drift-ws-0123456789abcdef")  # drift needs keys
    with FakeRealtime() as fake:  # the same API: fresh ids and times are no drift
        monkeypatch.setenv("FAKE_WS_URL", fake.url)
        same = pytester.runpytest("--hashreplay-drift", "-s")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*SOURCE live*"])
    assert same.ret == 0
    with FakeRealtime(drifted=True) as fake:  # a newer API: session.updated grew a field
        monkeypatch.setenv("FAKE_WS_URL", fake.url)
        changed = pytester.runpytest("--hashreplay-drift")
    assert changed.ret == 1
    drift = json.loads((pytester.path / ".hashreplay" / "drift.json").read_text())
    text = json.dumps(drift)
    assert TEST_ID in text
    assert "frame received session.updated: field added usage" in text
    assert recorded.read_bytes() == before  # a drift run writes nothing
