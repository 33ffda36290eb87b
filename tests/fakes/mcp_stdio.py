"""MCP servers over stdio, for the tests of the MCP adapter: run as a script,
``python mcp_stdio.py <kind> [options]``, on the real SDK's `MCPServer` (mcp 2.x; `FastMCP`
in 1.x).

Like real tool servers they answer with fresh values on every call (a uuid `id`, a
`created_at` time, a uuid inside text), while the content follows from the arguments, so a
re-record that normalises them is a zero diff. The kinds:

- ``tools``: `search(q)` (structured result with a fresh id and time; with `FAKE_MCP_SCORES`
  set, a `score` field more: a drifted API), `add(a, b)`, `whoami()` (returns the
  `FAKE_MCP_TOKEN` of its environment: a secret in a result);
- ``sampling``: `summarise(text)` asks the client for a completion (`sampling/createMessage`)
  and answers with what the client's sampling callback returned; `confirm(action)` asks the
  user through the client (`elicitation/create`) and answers with what they said;
- ``progress``: `slow(n)` sends `n` progress notifications and log messages before its answer;
- ``crash``: `search` as ``tools``, and `crash()`, which ends the process (exit status 3)
  before answering; with ``--crash-at-start`` the process exits before it reads anything;
- ``silent``: `search` as ``tools``, and `hang()`, which never answers.

Every server appends a line to the file named by `FAKE_MCP_MARKER` (when set) as it starts,
so a test can prove that replay started none. Arguments after the kind are accepted and
ignored (a test passes a key-looking one to check it is never written).
"""

from __future__ import annotations

import datetime
import os
import sys
import uuid
from typing import Any

import anyio
from pydantic import BaseModel

KINDS = ("tools", "sampling", "progress", "crash", "silent")


class Found(BaseModel):
    """What `search` answers: fresh per call, as a real search service's result is."""

    id: str
    q: str
    created_at: str
    hits: list[str]


class FoundScored(Found):
    """`search`'s answer from a newer version of the service (`FAKE_MCP_SCORES` set): a
    field more, as an API that drifted."""

    score: float


def _server_class() -> Any:
    try:
        from mcp.server import MCPServer  # mcp 2.x

        return MCPServer
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP

        return FastMCP


def _context_class() -> Any:
    try:
        from mcp.server.mcpserver import Context  # mcp 2.x
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import Context
    return Context


Context = _context_class()


def _search(q: str) -> Found:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    return Found(
        id=str(uuid.uuid4()), q=q, created_at=now, hits=[f"{q} result {i}" for i in (1, 2)]
    )


def build(kind: str) -> Any:
    app = _server_class()(f"fake-{kind}")
    if kind in ("tools", "crash", "silent"):
        scored = bool(os.environ.get("FAKE_MCP_SCORES"))
        app.tool(name="search")(_scored_search_tool if scored else _search_tool)
    if kind == "tools":
        app.tool()(add)
        app.tool()(whoami)
    elif kind == "sampling":
        app.tool()(summarise)
        app.tool()(confirm)
    elif kind == "progress":
        app.tool()(slow)
    elif kind == "crash":
        app.tool()(crash)
    elif kind == "silent":
        app.tool()(hang)
    return app


def _search_tool(q: str) -> Found:
    """Search for `q`: a fresh id and time on every call."""
    return _search(q)


def _scored_search_tool(q: str) -> FoundScored:
    """Search for `q`, with a score per answer."""
    return FoundScored(**_search(q).model_dump(), score=0.5)


def add(a: int, b: int) -> int:
    """The sum of two numbers."""
    return a + b


def whoami() -> str:
    """The token this server was started with (a secret in a result)."""
    return f"token={os.environ.get('FAKE_MCP_TOKEN', '')} session={uuid.uuid4()}"


async def summarise(text: str, ctx: Context) -> str:  # type: ignore[valid-type]
    """Ask the client's model for a summary of `text` (a sampling request to the client)."""
    from mcp.types import SamplingMessage, TextContent

    message = SamplingMessage(role="user", content=TextContent(type="text", text=f"sum: {text}"))
    result = await ctx.session.create_message(messages=[message], max_tokens=32)
    content = result.content
    said = content.text if isinstance(content, TextContent) else str(content)
    return f"summary[{uuid.uuid4()}]: {said}"


class Consent(BaseModel):
    """What `confirm` asks the user for."""

    ok: bool


async def confirm(action: str, ctx: Context) -> str:  # type: ignore[valid-type]
    """Ask the user (through the client's elicitation callback) whether to `action`."""
    answer = await ctx.elicit(f"may I {action}?", Consent)
    data = getattr(answer, "data", None)
    return f"{action}: {answer.action} ok={getattr(data, 'ok', None)} ref={uuid.uuid4()}"


async def slow(n: int, ctx: Context) -> str:  # type: ignore[valid-type]
    """Report progress `n` times (with a log message each), then answer."""
    for i in range(n):
        await ctx.report_progress(i + 1, n, f"step {i + 1} of {n}")
        await ctx.info(f"working on step {i + 1}")
    return f"done after {n} steps"


def crash() -> str:
    """End the server before answering, as a crashing server does."""
    sys.stdout.flush()
    os._exit(3)


async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "never"


def main(argv: list[str]) -> None:
    kind = argv[0] if argv else "tools"
    if kind not in KINDS:
        raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    marker = os.environ.get("FAKE_MCP_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as out:
            out.write(f"started {kind} {os.getpid()}\n")
    if "--crash-at-start" in argv:
        os._exit(3)
    import warnings

    warnings.simplefilter("ignore")  # the SDK's deprecation notes on sampling and logging
    build(kind).run()


if __name__ == "__main__":
    main(sys.argv[1:])
