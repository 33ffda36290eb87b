"""Adapters patch a client library when it is first imported: activation imports nothing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_activation_imports_no_client_and_patches_on_first_import(tmp_path: object) -> None:
    out = run(
        f"""
        import sys
        from hashreplay.adapters import activate, deactivate
        from hashreplay.core.config import load_config
        from hashreplay.engine.session import Session
        activate(Session(load_config({str(tmp_path)!r}, env={{}})))
        clients = ("httpx", "httpx2", "aiohttp", "urllib3", "grpc")
        print(sorted(m for m in clients if m in sys.modules))
        import httpx2, aiohttp
        print(hasattr(httpx2.HTTPTransport.handle_request, "__wrapped__"))
        from hashreplay.adapters import aiohttp as adapter
        print(adapter.is_installed() if hasattr(adapter, "is_installed") else "n/a")
        deactivate()
        print(hasattr(httpx2.HTTPTransport.handle_request, "__wrapped__"))
        """
    )
    lines = out.splitlines()
    assert lines[0] == "[]"
    assert lines[1] == "True"
    assert lines[2] in ("True", "n/a")
    assert lines[3] == "False"


def test_deactivate_before_the_import_patches_nothing(tmp_path: object) -> None:
    out = run(
        f"""
        from hashreplay.adapters import activate, deactivate
        from hashreplay.adapters._shared import waiting
        from hashreplay.core.config import load_config
        from hashreplay.engine.session import Session
        activate(Session(load_config({str(tmp_path)!r}, env={{}})))
        print(waiting())
        deactivate()
        print(waiting())
        import httpx2
        print(hasattr(httpx2.HTTPTransport.handle_request, "__wrapped__"))
        """
    )
    # grpc, when installed, waits for the network guard (channels are judged at creation);
    # urllib3 comes with the `sdks` extra (requests, boto3), not with `dev` alone;
    # websockets with `dev` (and the SDKs that use it); mcp waits for its MCP stdio adapter;
    # asyncio's event loops wait for the guard too (activation loads no asyncio)
    libraries = ("grpc", "mcp", "urllib3", "websockets")
    installed = [name for name in libraries if importlib.util.find_spec(name)]
    waiting = sorted(["aiohttp", "asyncio.base_events", "httpx", "httpx2", *installed])
    assert out.splitlines() == [str(waiting), "[]", "False"]


def test_the_guard_wraps_asyncio_imported_after_activation(tmp_path: object) -> None:
    """Activation loads no asyncio; the network guard wraps its event loops' resolvers when
    the code under test imports it, and puts them back on deactivation."""
    out = run(
        f"""
        import sys
        from hashreplay.adapters import activate, deactivate
        from hashreplay.core.config import load_config
        from hashreplay.engine.session import Session
        activate(Session(load_config({str(tmp_path)!r}, env={{}})))
        print("asyncio" in sys.modules)
        import asyncio
        print(hasattr(asyncio.BaseEventLoop.getaddrinfo, "__wrapped__"))
        deactivate()
        print(hasattr(asyncio.BaseEventLoop.getaddrinfo, "__wrapped__"))
        """
    )
    assert out.splitlines() == ["False", "True", "False"]
