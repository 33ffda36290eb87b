"""The MCP stdio adapter (adapters/mcp.py) with a session of its own: the patch behind every
name of `stdio_client` and its undoing, `Client` and `ClientSessionGroup`, sessions of one key
in order, a spawn that fails, a session with no recording, secrets in the environment,
arguments and results."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.client.client
import mcp.client.stdio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.session_group import ClientSessionGroup
from mcp.shared.exceptions import MCPError

from hashreplay import Mode, test_context
from hashreplay.adapters import mcp as adapter
from hashreplay.core.config import load_config
from hashreplay.core.errors import BodyTooLarge, ReplayMiss
from hashreplay.engine.session import Session
from tests.fakes import mcp_stdio

TEST_ID = "tests/test_agent.py::test_tools"
SERVER = Path(mcp_stdio.__file__)
EARLY = mcp.client.stdio.stdio_client  # bound before hashreplay started, as a conftest may


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "pyproject.toml").write_text("[tool.hashreplay]\n")
        (root / "fake_mcp.py").write_text(SERVER.read_text())
        self.session: Session | None = None
        self.marker = root / "started.txt"

    def start(self, mode: Mode, **overrides: object) -> Session:
        if self.session is not None:
            self.session.close()
        self.session = Session(load_config(self.root, env={}, mode=str(mode), **overrides))
        adapter.install(self.session)
        return self.session

    def params(
        self, kind: str = "tools", *extra: str, python: str | None = None, **env: str
    ) -> Any:
        return StdioServerParameters(
            command=python or sys.executable,
            args=["fake_mcp.py", kind, *extra],
            env={"FAKE_MCP_MARKER": str(self.marker), **env},
            cwd=str(self.root),
        )

    def missing_python(self) -> str:
        return str(self.root / "gone" / Path(sys.executable).name)

    def starts(self) -> int:
        count = len(self.marker.read_text().splitlines()) if self.marker.exists() else 0
        self.marker.unlink(missing_ok=True)
        return count

    def files(self) -> list[Path]:
        assert self.session is not None
        self.session.flush()
        return sorted(self.root.rglob("recordings/*.json"))


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    p = Project(tmp_path)
    try:
        yield p
    finally:
        adapter.uninstall()
        if p.session is not None:
            p.session.close()


def search(params: Any, q: str = "cats", stdio: Any = EARLY) -> Any:
    async def go() -> Any:
        async with stdio(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            found = await client.call_tool("search", {"q": q})
            return found.structured_content

    with test_context(TEST_ID):
        return anyio.run(go)


def test_every_name_is_intercepted_and_the_original_restored(project: Project) -> None:
    cell = mcp.client.stdio.stdio_client.__closure__[0]
    original = cell.cell_contents
    assert mcp.stdio_client is mcp.client.client.stdio_client is EARLY
    project.start(Mode.RECORD)
    assert adapter.is_installed()
    assert cell.cell_contents is not original  # the one function every name calls
    assert mcp.client.stdio.stdio_client is EARLY  # no name was rebound
    found = search(project.params(), stdio=EARLY)  # bound before: still recorded
    assert found["q"] == "cats" and len(project.files()) == 1
    adapter.uninstall()
    assert not adapter.is_installed()
    assert cell.cell_contents is original
    assert search(project.params())["q"] == "cats"  # live again: nothing more written
    assert len(project.files()) == 1


def test_without_the_closure_the_module_names_are_patched_and_restored(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter, "_closure_cell", lambda wrapper: None)
    names = (mcp.client.stdio, mcp, mcp.client.client)
    project.start(Mode.RECORD)
    assert all(m.stdio_client is not EARLY for m in names)
    assert search(project.params(), stdio=mcp.client.stdio.stdio_client)["q"] == "cats"
    adapter.uninstall()
    assert all(m.stdio_client is EARLY for m in names)
    project.start(Mode.REPLAY)
    replayed = search(project.params(python=project.missing_python()), stdio=mcp.stdio_client)
    assert replayed["hits"] == ["cats result 1", "cats result 2"]


def test_client_and_session_group_replay_with_no_server(project: Project) -> None:
    async def with_client(params: Any) -> Any:
        async with mcp.client.client.Client(params) as client:
            return (await client.call_tool("add", {"a": 1, "b": 2})).structured_content

    async def with_group(params: Any) -> Any:
        async with ClientSessionGroup() as group:
            await group.connect_to_server(params)
            return (await group.call_tool("add", {"a": 4, "b": 5})).structured_content

    def both(params: Any) -> list[Any]:
        with test_context(TEST_ID):
            return [anyio.run(with_client, params), anyio.run(with_group, params)]

    project.start(Mode.RECORD)
    assert both(project.params()) == [{"result": 3}, {"result": 9}]
    assert project.starts() == 2
    session = project.start(Mode.REPLAY)
    assert both(project.params(python=project.missing_python())) == [{"result": 3}, {"result": 9}]
    assert project.starts() == 0
    assert session.take_misses(TEST_ID) == []
    assert session.stats.replayed == 2


def test_sessions_of_one_key_replay_in_order(project: Project) -> None:
    project.start(Mode.RECORD)
    first, second = search(project.params(), "one"), search(project.params(), "two")
    assert len(project.files()) == 1  # one key: one file, its sessions in order
    session = project.start(Mode.REPLAY)
    params = project.params(python=project.missing_python())
    assert search(params, "one")["hits"] == first["hits"]
    assert search(params, "two")["hits"] == second["hits"]
    assert session.take_misses(TEST_ID) == []
    with pytest.raises(ReplayMiss, match="MCP mcp\\+stdio:python"):
        search(params, "three")  # a third session was never recorded


def test_a_spawn_that_fails_records_nothing(project: Project) -> None:
    session = project.start(Mode.RECORD)
    with pytest.raises(OSError):
        search(project.params(python=project.missing_python()))
    assert project.files() == []
    assert session.stats.not_recorded == 1


def test_a_session_with_no_recording_is_a_miss_naming_the_command(project: Project) -> None:
    session = project.start(Mode.REPLAY)
    with pytest.raises(ReplayMiss) as missed:
        search(project.params())
    report = str(missed.value)
    assert "MCP mcp+stdio:python" in report and TEST_ID in report
    assert "INFERENCE_MODE=record-if-missing pytest" in report
    assert project.starts() == 0
    [noted] = session.take_misses(TEST_ID)
    assert noted.report == report


def test_secrets_in_environment_arguments_and_results_are_never_written(
    project: Project,
) -> None:
    env_key = "sk-envsecretenvsecretenvsecret0001"
    arg_key = "sk-argsecretargsecretargsecret0002"

    async def go(params: Any) -> Any:
        async with EARLY(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            return (await client.call_tool("whoami", {})).content[0].text

    def whoami(python: str | None = None) -> str:
        params = project.params(
            "tools", f"--api-key={arg_key}", python=python, FAKE_MCP_TOKEN=env_key
        )
        with test_context(TEST_ID):
            return str(anyio.run(go, params))

    project.start(Mode.RECORD)
    assert env_key in whoami()  # the live result carries it
    [file] = project.files()
    stored = file.read_text()
    assert env_key not in stored and arg_key not in stored
    assert "FAKE_MCP_TOKEN" not in stored and "FAKE_MCP_MARKER" not in stored  # no env at all
    assert "[secret removed]" in stored
    session = project.start(Mode.REPLAY)  # the key is the same without the secret's value
    assert env_key not in whoami(python=project.missing_python())
    assert session.take_misses(TEST_ID) == []


def test_an_answer_gated_on_messages_never_sent_is_given_up_not_awaited(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.start(Mode.RECORD)
    search(project.params())
    [file] = project.files()
    stored = json.loads(file.read_text())
    frames = stored["response"]["frames"]
    answer = next(
        f for f in frames if f["direction"] == "received" and "structuredContent" in str(f)
    )
    answer["after_sent"] += 5  # as if the client had sent five messages more before it, live
    file.write_text(json.dumps(stored))
    monkeypatch.setattr(adapter, "STALL_TIMEOUT", 0.1)
    session = project.start(Mode.REPLAY)

    async def go() -> str:
        params = project.params(python=project.missing_python())
        async with EARLY(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            with pytest.raises(MCPError) as waited:
                await client.call_tool("search", {"q": "cats"})  # never hangs
            return str(waited.value)

    with test_context(TEST_ID):
        said = anyio.run(go)
    assert "the recorded answer to tools/call came after" in said
    [failure] = session.take_misses(TEST_ID)
    assert failure.report == said
    assert "this client has sent" in failure.report and file.name in failure.report


def test_a_session_past_max_body_bytes_fails_its_test_and_writes_nothing(
    project: Project,
) -> None:
    session = project.start(Mode.RECORD, max_body_bytes=600)
    with pytest.raises(BaseException) as failed:  # raised in the SDK's reader task
        search(project.params())
    assert any(isinstance(e, BodyTooLarge) for e in leaves(failed.value))
    assert project.files() == []
    [noted] = session.take_misses(TEST_ID)
    assert "max_body_bytes" in noted.report


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    inner = getattr(error, "exceptions", None)  # an exception group (3.11, or anyio's backport)
    if isinstance(inner, tuple):
        return [leaf for each in inner for leaf in leaves(each)]
    return [error]
