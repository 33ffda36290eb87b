"""MCP servers over streamable HTTP through the HTTP adapters (docs/recordings.md, "MCP over
streamable HTTP"): the real `mcp` client against a real `MCPServer` under uvicorn
(`tests/fakes/mcp_http.py`, fresh uuids and times per call, progress over SSE, a failing
tool), in real pytest sessions. Recorded, replayed with the server stopped (and with a fresh
one that must see nothing), re-recorded to a zero git diff although the server hands out a
fresh `mcp-session-id` and fresh ids each time; a changed argument is a named miss."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp.client.client  # noqa: F401  (in pytester's baseline: tests/conftest.py)
import pytest

from hashreplay.cli import main as cli_main
from tests.fakes.mcp_http import McpHttpServer

pytest_plugins = ["pytester"]

TOKEN = "sk-proj-bearerbearerbearerbearer0001"

APP = """
import asyncio
import os

import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["MCP_URL"]
MODE = os.environ.get("MCP_MODE", "legacy")
QUERY = os.environ.get("MCP_QUERY", "otters")


def server():
    token = os.environ.get("MCP_TOKEN")
    if token is None:
        return URL
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    return streamable_http_client(URL, http_client=http)


def test_agent_tools():
    async def run():
        seen = []

        async def progress(done, total, message):
            seen.append((done, total, message))

        async with Client(server(), mode=MODE) as client:
            hit = await client.call_tool("search", {"query": QUERY})
            crawled = await client.session.call_tool(
                "crawl", {"pages": 3}, progress_callback=progress
            )
            failed = None
            if os.environ.get("MCP_EXPLODE", "1") == "1":
                failed = await client.call_tool("explode", {"reason": "no fuel"})
        return hit, crawled, failed, seen

    hit, crawled, failed, seen = asyncio.run(run())
    found = hit.structured_content
    print("HIT", found["id"], found["created_at"], found["token"], hit.content[0].text)
    assert found["query"] == QUERY
    assert hit.content[0].text == f"hit {found['id']} for {QUERY}"
    assert crawled.content[0].text == "crawled 3 pages"
    # a JSON-response server answers with the result alone: no progress reaches the client
    progress = [(1, 3, "page 1"), (2, 3, "page 2"), (3, 3, "page 3")]
    assert seen == (progress if os.environ.get("MCP_SSE", "1") == "1" else [])
    if failed is not None:
        assert failed.is_error
        assert "explode" in failed.content[0].text
"""

SERVERS = {
    "sse": {},
    "json": {"json_response": True},
    "stateless": {"stateless": True},
    "no-get-stream": {"get_stream": False},
}


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("MCP_TOKEN", raising=False)
    pytester.makepyprojecttoml(
        # cassetter, where installed, registers a `--record-mode` of its own
        "[tool.pytest.ini_options]\n"
        'addopts = "-p no:hypothesispytest -p no:asyncio -p no:cassetter"\n'
        "[tool.hashreplay]\n"
    )
    pytester.makepyfile(test_agent=APP)
    return pytester


@pytest.fixture
def git(project: pytest.Pytester) -> Iterator[Any]:
    def run(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=project.path,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    run("init", "-q")
    yield run


def recordings(project: pytest.Pytester) -> list[dict[str, Any]]:
    files = sorted((project.path / "recordings").glob("*.json"))
    return [json.loads(p.read_text()) for p in files]


def _tool_called(path: Path) -> str | None:
    """The tool a recording's request calls (`tools/call`), else None."""
    body = json.loads(path.read_text())["request"]["body"]
    if isinstance(body, dict) and body.get("method") == "tools/call":
        return str(body["params"]["name"])
    return None


def record(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, server: McpHttpServer, mode: str
) -> pytest.RunResult:
    monkeypatch.setenv("MCP_URL", server.url)
    return project.runpytest("-s", f"--inference-mode={mode}")


@pytest.mark.parametrize("kind", sorted(SERVERS))
@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_recorded_replayed_offline_and_rerecorded_to_a_zero_diff(
    project: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    git: Any,
    kind: str,
    protocol: str,
) -> None:
    """`legacy`: the initialize handshake, a session id, the GET stream and the DELETE;
    `auto`: the 2026 protocol's stateless requests (`server/discover`, no session)."""
    monkeypatch.setenv("MCP_MODE", protocol)
    monkeypatch.setenv("MCP_SSE", "0" if SERVERS[kind].get("json_response") else "1")
    with McpHttpServer(**SERVERS[kind]) as server:
        record(project, monkeypatch, server, "record").assert_outcomes(passed=1)
        live_calls = list(server.calls)
    session_ids = {c.session_id for c in live_calls} - {None}
    stateful = protocol == "legacy" and kind != "stateless"
    assert len(session_ids) == (1 if stateful else 0)
    files = recordings(project)
    stored = json.dumps(files)
    for live_id in session_ids:
        assert live_id not in stored  # only its stable form is written
    if stateful:
        methods = {f["request"]["method"] for f in files}
        assert methods == {"POST", "GET", "DELETE"}
        handed_out = {
            f["response"]["headers"]["mcp-session-id"]
            for f in files
            if "mcp-session-id" in f["response"]["headers"]
        }
        assert len(handed_out) == 1 and handed_out.pop().startswith("rec-")
    # every answer read to its end: none is stored as cut off
    assert all(f["response"].get("ended") is None for f in files)
    git("add", "-A")
    git("commit", "-qm", "recorded")

    # replay with the server stopped: nothing listens at its URL
    result = project.runpytest("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*0 recorded, 0 missed (replay)*"])
    result.stdout.no_fnmatch_line("*left unused*")
    with McpHttpServer(**SERVERS[kind]) as fresh:  # reachable, and nothing reaches it
        monkeypatch.setenv("MCP_URL", fresh.url)
        project.runpytest().assert_outcomes(passed=1)
        assert fresh.calls == []

    # re-recorded against a server handing out a fresh session id and fresh ids
    with McpHttpServer(**SERVERS[kind]) as again:
        record(project, monkeypatch, again, "record").assert_outcomes(passed=1)
        assert {c.session_id for c in again.calls} - {None} != session_ids or not stateful
    if kind != "no-get-stream":  # its GET retries after a second: how many is timing
        assert git("status", "--porcelain") == ""


def test_replayed_answers_are_the_stable_forms_the_client_sends_back(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replayed client sees the stable session id and ids, sends the session id back,
    and gets the progress notifications of the SSE answer event for event."""
    monkeypatch.setenv("MCP_MODE", "legacy")
    project.makeconftest(
        """
        def pytest_hashreplay_request(request):
            print("SENT", request["method"], request["headers"].get("mcp-session-id"))
        """
    )
    with McpHttpServer() as server:
        recorded = record(project, monkeypatch, server, "record")
        recorded.assert_outcomes(passed=1)
        (live_id,) = {c.session_id for c in server.calls} - {None}
    # in record mode the live id goes upstream
    assert f"SENT DELETE {live_id}" in recorded.stdout.str()
    replayed = project.runpytest("-s")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.re_match_lines([r".*HIT rec-[0-9a-f]{12} 0 \[secret removed\] hit rec-\S+ for"])
    # in replay the client got the stable id and sends it back on every later request
    sent = [line for line in replayed.stdout.lines if "SENT " in line]
    stable = {line.split()[-1] for line in sent if not line.endswith("None")}
    assert len(stable) == 1 and stable.pop().startswith("rec-")
    assert any("SENT GET rec-" in line for line in sent)
    assert any("SENT DELETE rec-" in line for line in sent)
    crawl = next(
        f
        for f in recordings(project)
        if isinstance(f["request"]["body"], dict)
        and f["request"]["body"].get("params", {}).get("name") == "crawl"
    )
    events = crawl["response"]["body"]
    assert [e["data"].get("method") for e in events] == ["notifications/progress"] * 3 + [None]
    assert [e["data"]["params"]["progressToken"] for e in events[:3]] == [4, 4, 4]
    assert crawl["request"]["body"]["params"]["_meta"] == {"progressToken": 4}


def test_a_changed_argument_is_a_named_miss(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_MODE", "legacy")
    with McpHttpServer() as server:
        record(project, monkeypatch, server, "record").assert_outcomes(passed=1)
    monkeypatch.setenv("MCP_QUERY", "badgers")
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*no recording for POST http://127.0.0.1:*/mcp (replay mode)*",
            "*differs:*body.params.arguments.query: recorded 'otters', incoming 'badgers'*",
            "*to record it: INFERENCE_MODE=record-if-missing pytest test_agent.py::test_agent_tools*",
        ]
    )


def test_a_session_with_no_recordings_fails_at_once_with_the_miss_report(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No recording at all: the first request (initialize) misses; the client gets the miss
    answer instead of waiting, and the test fails with the report."""
    monkeypatch.setenv("MCP_URL", "http://127.0.0.1:9/mcp")
    monkeypatch.setenv("MCP_MODE", "legacy")
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no recording for POST http://127.0.0.1:9/mcp (replay mode)*"])


def test_a_bearer_token_and_key_looking_results_are_never_written(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_MODE", "legacy")
    monkeypatch.setenv("MCP_TOKEN", TOKEN)
    with McpHttpServer() as server:
        result = record(project, monkeypatch, server, "record")
        result.assert_outcomes(passed=1)
        assert {c.authorization for c in server.calls} == {f"Bearer {TOKEN}"}
    live_token = next(
        line.split()[4] for line in result.stdout.lines if line.startswith("test_agent.py HIT ")
    )
    assert live_token.startswith("sk-proj-")
    written = b"".join(p.read_bytes() for p in (project.path / "recordings").rglob("*"))
    assert TOKEN.encode() not in written
    assert live_token.encode() not in written
    assert b"[secret removed]" in written
    # replayed with another token, and with none
    monkeypatch.setenv("MCP_TOKEN", "sk-proj-anotheranotheranother0002")
    project.runpytest().assert_outcomes(passed=1)
    monkeypatch.delenv("MCP_TOKEN")
    project.runpytest().assert_outcomes(passed=1)


def test_the_tools_treat_these_files_as_all_others(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_MODE", "legacy")
    with McpHttpServer() as server:
        record(project, monkeypatch, server, "record").assert_outcomes(passed=1)
    root = project.path
    monkeypatch.chdir(root)
    files = sorted((root / "recordings").glob("*.json"))
    before = {p.name: p.read_bytes() for p in files}

    assert cli_main(["verify"]) == 0
    assert cli_main(["rehash"]) == 0
    assert {p.name: p.read_bytes() for p in sorted((root / "recordings").glob("*.json"))} == before
    capsys.readouterr()

    call = next(p for p in files if _tool_called(p) == "crawl")
    assert cli_main(["textconv", str(call)]) == 0
    view = capsys.readouterr().out
    assert "tools/call crawl" in view
    assert "notifications/progress" in view
    assert cli_main(["show", str(call)]) == 0
    assert "crawl" in capsys.readouterr().out

    # age: every response carries its day; a later "today" makes them old
    assert cli_main(["status", "--older-than", "30d"]) == 0
    assert "test_agent.py" not in capsys.readouterr().out
    monkeypatch.setenv("HASHREPLAY_TODAY", "2099-01-01")
    assert cli_main(["status", "--older-than", "30d"]) == 0
    assert str(call.name) in capsys.readouterr().out
    monkeypatch.delenv("HASHREPLAY_TODAY")

    assert cli_main(["mv", "test_agent.py::test_agent_tools", "test_agent.py::test_renamed"]) == 0
    capsys.readouterr()
    renamed = APP.replace("def test_agent_tools", "def test_renamed")
    project.makepyfile(test_agent=renamed)
    replayed = project.runpytest("--hashreplay-prune")
    replayed.assert_outcomes(passed=1)
    assert len(list((root / "recordings").glob("*.json"))) == len(files)  # all used, none pruned
    # the usage log names every file the session used
    assert cli_main(["used"]) == 0
    used = capsys.readouterr().out
    assert all(p.name in used for p in (root / "recordings").glob("*.json"))

    # drift by shape against the live server, whose ids and times differ: no drift
    monkeypatch.setenv("OPENAI_API_KEY", "sk-drift-realrealrealreal0001")
    with McpHttpServer() as again:
        monkeypatch.setenv("MCP_URL", again.url)
        drift = project.runpytest("--hashreplay-drift")
        drift.assert_outcomes(passed=1)
        drift.stdout.fnmatch_lines(["*hashreplay drift: 0 test(s) drifted*"])
        assert again.calls  # it was live
    monkeypatch.delenv("OPENAI_API_KEY")

    # a tool call the test no longer makes leaves its recording unused: pruned
    moved = {p.name for p in (root / "recordings").glob("*.json")}
    exploded = next(n for n in moved if _tool_called(root / "recordings" / n) == "explode")
    monkeypatch.setenv("MCP_EXPLODE", "0")
    project.runpytest("--hashreplay-prune").assert_outcomes(passed=1)
    assert {p.name for p in (root / "recordings").glob("*.json")} == moved - {exploded}
