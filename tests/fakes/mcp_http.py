"""A streamable-HTTP MCP server for tests: the real `mcp` SDK's `MCPServer` under uvicorn on
127.0.0.1 with a free port, whose tools answer as real tool servers do (fresh uuids and times
on every call, progress notifications streamed over SSE, a tool that fails)::

    with McpHttpServer(json_response=False) as server:
        async with Client(server.url, mode="legacy") as client:
            await client.call_tool("search", {"query": "x"})
        assert server.calls[-1].method == "DELETE"

`calls` lists every HTTP request the server saw (method, the JSON-RPC method of a POST, and
the `mcp-session-id` and `authorization` it carried), so a test can prove replay sent nothing.
`stateless=True` runs the SDK's stateless mode (no session id, so no GET stream and no
DELETE); `get_stream=False` answers the GET stream 405, as servers that offer none do.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

__all__ = ["McpCall", "McpHttpServer"]


class Hit(BaseModel):
    """What `search` returns: a fresh id and time per call, as a search backend's hits."""

    id: str
    created_at: float
    query: str
    token: str


@dataclass
class McpCall:
    method: str
    rpc_method: str | None
    session_id: str | None
    authorization: str | None


def _server() -> MCPServer:
    server = MCPServer("fake-tools")

    @server.tool()
    def search(query: str) -> CallToolResult:
        """A search whose hit has a fresh id and time; the text names the id, as tools do."""
        hit = Hit(
            id=str(uuid.uuid4()),
            created_at=time.time(),
            query=query,
            token=f"sk-proj-{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}",
        )
        return CallToolResult(
            content=[TextContent(type="text", text=f"hit {hit.id} for {query}")],
            structured_content=hit.model_dump(),
        )

    @server.tool()
    async def crawl(pages: int, ctx: Context) -> str:
        """Reports progress once per page (notifications on the request's SSE stream)."""
        for page in range(pages):
            await ctx.report_progress(page + 1, pages, f"page {page + 1}")
        return f"crawled {pages} pages"

    @server.tool()
    def explode(reason: str) -> str:
        """Always fails: the client gets a tool result with `isError`."""
        msg = f"exploded: {reason}"
        raise ValueError(msg)

    return server


class McpHttpServer:
    """The MCP server of `_server()` over streamable HTTP, on a thread, until `stop()`."""

    def __init__(
        self, *, json_response: bool = False, stateless: bool = False, get_stream: bool = True
    ) -> None:
        self.calls: list[McpCall] = []
        #: False: the GET stream is answered 405, as servers that offer none do
        self.get_stream = get_stream
        app = _server().streamable_http_app(json_response=json_response, stateless_http=stateless)
        self._app = app
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(self._logged, log_level="warning", lifespan="on", interface="asgi3")
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    async def _logged(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        call = McpCall(
            scope["method"], None, headers.get("mcp-session-id"), headers.get("authorization")
        )
        self.calls.append(call)
        if call.method == "GET" and not self.get_stream:
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return

        async def receive_logged() -> Any:
            message = await receive()
            if message.get("body") and call.rpc_method is None:
                with contextlib.suppress(ValueError, AttributeError):
                    call.rpc_method = json.loads(message["body"]).get("method")
            return message

        await self._app(scope, receive_logged, send)

    def start(self) -> McpHttpServer:
        self._thread.start()
        while not self._uvicorn.started:
            if not self._thread.is_alive():
                msg = "the MCP test server did not start"
                raise RuntimeError(msg)
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        self._thread.join()
        self._sock.close()

    def __enter__(self) -> McpHttpServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
