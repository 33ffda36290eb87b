"""The tools treat MCP session recordings as all others (docs/usage.md, "MCP servers"):
verify, rehash, mv, prune, textconv (a conversation of calls), show, the usage log, age,
drift by shape and the fixture's `calls`, each on sessions a real pytest run recorded with
the real mcp SDK (tests/integration/mcp_project.py)."""

from __future__ import annotations

import json
from pathlib import Path

import mcp  # noqa: F401  (in pytester's baseline: one copy of the SDK for every run)
import pytest

from hashreplay.cli import main
from tests.integration.mcp_project import project, recordings, starts, unable_to_start

pytest_plugins = ["pytester"]

SUITE = """
import os
import pytest
from mcp_app import run


def test_search(hashreplay):
    async def body(client):
        found = await client.call_tool("search", {"q": "cats"})
        return found.structured_content

    found = run("tools", body)
    assert found["hits"] == ["cats result 1", "cats result 2"]
    calls = hashreplay.calls
    assert [(c.method, c.source) for c in calls] == [("MCP", os.environ["EXPECTED_SOURCE"])]
    assert calls[0].body == {"command": calls[0].body["command"], "args": ["fake_mcp.py", "tools"]}


def test_add():
    async def body(client):
        return (await client.call_tool("add", {"a": 1, "b": 2})).structured_content

    assert run("tools", body) == {"result": 3}
    if os.environ.get("ALSO_PROGRESS"):  # a second server this test once used

        async def slow(client):
            return (await client.call_tool("slow", {"n": 1})).content[0].text

        assert run("progress", slow) == "done after 1 steps"
"""


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().out


@pytest.fixture
def recorded(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = project(pytester, monkeypatch, test_tools=SUITE)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("EXPECTED_SOURCE", "recorded")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    assert len(starts(root)) == 2
    monkeypatch.setenv("EXPECTED_SOURCE", "replayed")
    unable_to_start(monkeypatch, root)
    return root


def file_of(root: Path, test_id: str) -> str:
    for name, data in recordings(root).items():
        if json.loads(data)["test_id"] == test_id:
            return name
    raise AssertionError(f"no recording of {test_id}")


def test_textconv_and_show_tell_the_session_as_calls(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = file_of(recorded, "test_tools.py::test_search")
    code, out = cli(capsys, "textconv", name)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("MCP ") and lines[0].endswith(" fake_mcp.py tools")
    assert '→ tools/call search {"q":"cats"}' in lines
    [answer] = [line for line in lines if line.startswith('← result {"created_at"')]
    assert '"hits":["cats result 1","cats result 2"]' in answer and '"id":"rec-' in answer
    assert "end: closed by the client" in lines
    code, out = cli(capsys, "show", name)
    assert code == 0 and "messages (" in out and '→ tools/call search {"q":"cats"}' in out


def test_verify_and_rehash_find_nothing_to_do_and_mv_keeps_a_renamed_test(
    recorded: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(capsys, "verify")
    assert code == 0 and "0/2 files with problems" in out
    code, out = cli(capsys, "rehash")
    assert code == 0 and "0/2 files re-keyed" in out
    before = recordings(recorded)
    assert recordings(recorded) == before
    code, out = cli(capsys, "mv", "test_tools.py", "test_renamed.py")
    assert code == 0, out
    (recorded / "test_tools.py").rename(recorded / "test_renamed.py")
    pytester.runpytest().assert_outcomes(passed=2)  # replayed under the new name
    assert starts(recorded) == []
    code, out = cli(capsys, "verify")
    assert code == 0 and "0/2 files with problems" in out


def test_a_broken_session_file_is_named_by_verify(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = file_of(recorded, "test_tools.py::test_add")
    stored = json.loads((recorded / name).read_text())
    stored["response"]["frames"][0]["type"] = "sideways"
    (recorded / name).write_text(json.dumps(stored))
    code, out = cli(capsys, "verify")
    assert code == 1 and name in out and "response.frames[0].type" in out


def test_the_usage_log_and_prune(
    recorded: Path,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytester.runpytest().assert_outcomes(passed=2)
    usage = json.loads((recorded / ".hashreplay" / "usage.json").read_text())
    used = [Path(p).name for test in usage["tests"].values() for p in test["files"]]
    assert sorted(Path(p).name for p in recordings(recorded)) == sorted(used)

    monkeypatch.delenv("MCP_PYTHON")  # test_add once used a second server too
    monkeypatch.setenv("ALSO_PROGRESS", "1")
    monkeypatch.setenv("EXPECTED_SOURCE", "recorded")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    assert len(recordings(recorded)) == 3 and len(starts(recorded)) == 3
    monkeypatch.delenv("ALSO_PROGRESS")  # and no longer does
    monkeypatch.setenv("EXPECTED_SOURCE", "replayed")
    unable_to_start(monkeypatch, recorded)
    pytester.runpytest().assert_outcomes(passed=2)
    progress = [
        name
        for name, data in recordings(recorded).items()
        if b"fake_mcp.py" in data and b'"progress"' in data
    ]
    assert len(progress) == 1
    code, out = cli(capsys, "prune")
    assert code == 0, out
    assert not (recorded / progress[0]).exists()
    assert len(recordings(recorded)) == 2
    pytester.runpytest().assert_outcomes(passed=2)  # what was kept still replays
    assert starts(recorded) == []


def test_age_and_stale_sessions(
    recorded: Path,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HASHREPLAY_TODAY", "2099-01-01")
    code, out = cli(capsys, "status", "--older-than", "90d")
    assert code == 0
    assert file_of(recorded, "test_tools.py::test_search") in out
    with open(recorded / "pyproject.toml", "a") as config:
        config.write('\nmax_age = "30d"\nstale = "fail"\n')
    run = pytester.runpytest()
    run.assert_outcomes(failed=2)
    assert file_of(recorded, "test_tools.py::test_add") in run.stdout.str()
    assert starts(recorded) == []


def test_drift_compares_the_session_by_shape(
    recorded: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_PYTHON")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-realkeyrealkeyrealkey0001")  # drift needs a key
    monkeypatch.setenv("EXPECTED_SOURCE", "live")
    pytester.runpytest("--hashreplay-drift").assert_outcomes(passed=2)  # same server: no drift
    assert len(starts(recorded)) == 2
    monkeypatch.setenv("FAKE_MCP_SCORES", "1")  # the server answers with a field more
    run = pytester.runpytest("--hashreplay-drift")
    assert run.ret == 1
    drifted = json.loads((recorded / ".hashreplay" / "drift.json").read_text())["drifted"]
    [search] = drifted["test_tools.py::test_search"]
    assert (
        "frame received result of tools/call search: field added structuredContent.score "
        "(number)" in search["differences"]
    )
    assert search["endpoint"].startswith("MCP ")
    # test_add called no search, but the server's tool list changed under it: drift too
    [add] = drifted["test_tools.py::test_add"]
    assert add["differences"] and all("result of tools/list" in d for d in add["differences"])
    run.stdout.fnmatch_lines(["*2 test(s) drifted*"])
