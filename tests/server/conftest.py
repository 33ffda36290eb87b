"""Helpers for server-mode tests: subprocess servers on free loopback ports, always stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import pytest

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A server subprocess whose output goes to a log file (a pipe nobody reads could fill
    up and stall it). `wait_ready` polls `ready_path` within a time limit."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ready_path: str = "/__hashreplay/health",
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log
        self.ready_path = ready_path
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            list(argv),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> ServerProcess:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx2.get(self.url + self.ready_path, timeout=1.0).status_code < 500:
                    return self
            except httpx2.TransportError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"server not ready within {START_TIMEOUT} s:\n{self.log()}")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self) -> int:
        """SIGTERM (graceful), then SIGKILL of the whole process group if it lingers."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_TIMEOUT)
        self._log.close()
        return self.proc.returncode


class Servers:
    """Starts servers for one test and stops every one of them at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[ServerProcess] = []

    def serve(
        self, *options: str, root: Path, env: dict[str, str] | None = None, ready: bool = True
    ) -> ServerProcess:
        """`python -m hashreplay.server` with `options`, rooted at `root`."""
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "hashreplay.server",
            "--port",
            str(port),
            "--root",
            str(root),
            "--upstream-timeout",
            "10",
            *options,
        ]
        return self.start(argv, port=port, env=env, ready=ready)

    def start(
        self,
        argv: Sequence[str],
        *,
        port: int,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ready: bool = True,
        ready_path: str = "/__hashreplay/health",
    ) -> ServerProcess:
        full_env = {k: v for k, v in os.environ.items() if k != "INFERENCE_MODE"}
        full_env.update(env or {})
        log = self.tmp / f"server-{len(self.started)}-{port}.log"
        server = ServerProcess(
            argv, port=port, log=log, env=full_env, cwd=cwd, ready_path=ready_path
        )
        self.started.append(server)
        return server.wait_ready() if ready else server

    def stop_all(self) -> None:
        for server in reversed(self.started):
            server.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    running = Servers(tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project


def recordings(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if ".hashreplay" not in p.parts)


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
async def make_app(root: Path) -> AsyncIterator[Callable[..., Any]]:
    """`make(mode, *upstream_specs, **serve_options)`: the proxy's ASGI app in-process over
    `root`, with its own session; every app made is closed at teardown."""
    from hashreplay.core.config import load_config
    from hashreplay.engine.session import Session
    from hashreplay.server.app import ProxyApp
    from hashreplay.server.cli import ServeSettings, parse_upstream

    apps: list[ProxyApp] = []

    def make(mode: str, *upstreams: str, **options: Any) -> ProxyApp:
        settings = ServeSettings(
            upstreams=tuple(parse_upstream(u) for u in upstreams), root=str(root), **options
        )
        config = load_config(root, env={}, mode=mode, recordings_dir=settings.recordings)
        app = ProxyApp(settings, session=Session(config))
        apps.append(app)
        return app

    yield make
    for app in apps:
        await app.aclose()
