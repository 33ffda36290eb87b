"""The websockets adapter leaves alone the connections hashreplay itself dials inside
`adapter_io()` (the proxy's upstream dial, docs/design.md §17 "The proxy"), as it leaves
alone every connection while no session is active: they are neither recorded twice nor
replayed, and the originals are back after `uninstall`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hashreplay import test_context
from hashreplay.adapters import websockets as adapter
from hashreplay.core.config import load_config
from hashreplay.core.context import adapter_io
from hashreplay.engine.session import Session
from tests.sdks import sdk

client = sdk("websockets.asyncio.client")
server = sdk("websockets.asyncio.server")

TEST_ID = "tests/test_voice.py::test_echo"


async def echo_once(url: str) -> str:
    async with client.connect(url) as ws:
        await ws.send("hello")
        answer = await ws.recv()
    return str(answer)


async def talk(record: Session, *, inside: bool) -> str:
    async def echo(ws: object) -> None:
        async for message in ws:  # type: ignore[attr-defined]
            await ws.send(f"echo {message}")  # type: ignore[attr-defined]

    async with server.serve(echo, "127.0.0.1", 0) as live:
        port = live.sockets[0].getsockname()[1]
        with test_context(TEST_ID):
            if inside:
                with adapter_io():
                    return await echo_once(f"ws://127.0.0.1:{port}/v1/echo")
            return await echo_once(f"ws://127.0.0.1:{port}/v1/echo")


def recordings(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if ".hashreplay" not in p.parts)


def test_a_dial_inside_adapter_io_is_not_recorded(tmp_path: Path) -> None:
    session = Session(load_config(tmp_path, env={}, mode="record"))
    adapter.install(session)
    try:
        assert asyncio.run(talk(session, inside=True)) == "echo hello"
        session.end_test(TEST_ID)
        session.flush()
        assert recordings(tmp_path) == []
        assert session.stats.recorded == 0
        # the same dial outside adapter_io() is the test's own: recorded
        assert asyncio.run(talk(session, inside=False)) == "echo hello"
        session.end_test(TEST_ID)
        session.flush()
        assert len(recordings(tmp_path)) == 1
    finally:
        adapter.uninstall()
        session.close()
    assert not adapter.is_installed()
