"""A pytester project whose tests use MCP stdio servers (tests/fakes/mcp_stdio.py) through the
real mcp SDK, for the MCP adapter's end-to-end tests: the server script is copied in, the
command the tests start comes from `MCP_PYTHON` (so a replay can name an executable that
does not exist: it never runs), and every server start is appended to `FAKE_MCP_MARKER`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import mcp_stdio

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:randomly -p no:asyncio"

[tool.hashreplay]
"""

#: Helpers the project's tests import (`from mcp_app import ...`).
APP = """
import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CreateMessageResult, ElicitResult, TextContent

PYTHON = os.environ.get("MCP_PYTHON", sys.executable)
OUT = os.environ.get("MCP_OUT")


def server(kind, *extra, env=None):
    env = {"FAKE_MCP_MARKER": os.environ["FAKE_MCP_MARKER"], **(env or {})}
    if os.environ.get("FAKE_MCP_SCORES"):  # the server's newer version (a drift)
        env["FAKE_MCP_SCORES"] = "1"
    return StdioServerParameters(command=PYTHON, args=["fake_mcp.py", kind, *extra], env=env)


def write_out(name, value):
    if OUT:
        with open(os.path.join(OUT, name + ".json"), "w") as out:
            json.dump(value, out, sort_keys=True, default=str)


async def sampled(context, params):
    SAMPLED.append(params.messages[0].content.text)
    text = "model says " + params.messages[0].content.text
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text=text), model="fake-model"
    )


SAMPLED = []
ELICITED = []


async def elicited(context, params):
    ELICITED.append(params.message)
    return ElicitResult(action="accept", content={"ok": True})


def run(kind, body, *extra, env=None, **session_options):
    async def go():
        async with stdio_client(server(kind, *extra, env=env)) as (read, write):
            async with ClientSession(
                read, write, sampling_callback=sampled, elicitation_callback=elicited,
                **session_options
            ) as client:
                await client.initialize()
                return await body(client)

    return anyio.run(go)
"""


def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, **tests: str) -> Path:
    """The project, with `tests` (file name → source) as its test files."""
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("MCP_PYTHON", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "fake_mcp.py").write_text(Path(mcp_stdio.__file__).read_text())
    (pytester.path / "mcp_app.py").write_text(APP)
    out = pytester.path / "out"
    out.mkdir()
    monkeypatch.setenv("MCP_OUT", str(out))
    monkeypatch.setenv("FAKE_MCP_MARKER", str(pytester.path / "started.txt"))
    pytester.makepyfile(**tests)
    monkeypatch.chdir(pytester.path)
    return pytester.path


def starts(root: Path) -> list[str]:
    """The server starts the marker file lists (and forget them)."""
    marker = root / "started.txt"
    if not marker.exists():
        return []
    lines = marker.read_text().splitlines()
    marker.unlink()
    return lines


def unable_to_start(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """From now on the tests' command names an executable that does not exist, with the
    same name as the real one (the key holds the name, not the path)."""
    missing = root / "no-such-dir" / Path(sys.executable).name
    assert not missing.exists()
    monkeypatch.setenv("MCP_PYTHON", str(missing))


def outputs(root: Path) -> dict[str, Any]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((root / "out").glob("*.json"))}


def recordings(root: Path) -> dict[str, bytes]:
    """Every recording file of the project, by path relative to it."""
    return {
        os.fspath(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("recordings/*.json"))
    }
