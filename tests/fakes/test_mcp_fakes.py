"""Self-checks: the MCP stdio servers of tests/fakes/mcp_stdio.py behave like real ones with the
REAL mcp SDK's `ClientSession` (no hashreplay involved): fresh ids and times per call, a
sampling request answered by the client's callback, progress and log notifications, a crash
seen as a closed connection, a tool that never answers seen as the client's timeout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CreateMessageResult, TextContent

SERVER = Path(__file__).with_name("mcp_stdio.py")


def params(kind: str, *extra: str, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(SERVER), kind, *extra], env=env or None
    )


async def sampled(_context: Any, request: Any) -> CreateMessageResult:
    asked = request.messages[0].content.text
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text=f"model says {asked}"), model="m"
    )


def session(kind: str, body: Any, **env: str) -> Any:
    async def go() -> Any:
        async with (
            stdio_client(params(kind, **env)) as (read, write),
            ClientSession(read, write, sampling_callback=sampled) as client,
        ):
            await client.initialize()
            return await body(client)

    return anyio.run(go)


def test_tools_answer_fresh_ids_and_times(tmp_path: Path) -> None:
    marker = tmp_path / "started"

    async def body(client: ClientSession) -> Any:
        first = await client.call_tool("search", {"q": "cats"})
        second = await client.call_tool("search", {"q": "cats"})
        total = await client.call_tool("add", {"a": 2, "b": 3})
        return first, second, total

    first, second, total = session("tools", body, FAKE_MCP_MARKER=str(marker))
    a, b = first.structured_content, second.structured_content
    assert a["hits"] == b["hits"] == ["cats result 1", "cats result 2"]
    assert a["id"] != b["id"] and len(a["id"]) == 36
    assert a["created_at"] != b["created_at"]
    assert a["id"] in first.content[0].text  # the text carries the same fresh id
    assert total.structured_content == {"result": 5}
    assert marker.read_text().startswith("started tools ")


def test_sampling_asks_the_client() -> None:
    async def body(client: ClientSession) -> Any:
        return await client.call_tool("summarise", {"text": "a long story"})

    result = session("sampling", body)
    assert result.content[0].text.endswith(": model says sum: a long story")


def test_progress_and_log_notifications() -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def body(client: ClientSession) -> Any:
        return await client.call_tool("slow", {"n": 3}, progress_callback=on_progress)

    result = session("progress", body)
    assert result.content[0].text == "done after 3 steps"
    assert seen == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]


def test_crash_closes_the_connection() -> None:
    async def body(client: ClientSession) -> Any:
        assert (await client.call_tool("search", {"q": "x"})).structured_content["q"] == "x"
        with pytest.raises(MCPError, match="Connection closed"):
            await client.call_tool("crash", {})
        return True

    assert session("crash", body)


def test_silent_server_times_out() -> None:
    async def body(client: ClientSession) -> Any:
        with pytest.raises(MCPError, match="timed out"):
            await client.call_tool("hang", {}, read_timeout_seconds=0.5)
        return True

    assert session("silent", body)
