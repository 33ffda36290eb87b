from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpcore  # noqa: F401
import httpcore2  # noqa: F401
import pytest
import yaml  # noqa: F401

from hashreplay import Mode
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.core.config import load_config
from hashreplay.engine.session import Session
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

# httpx/httpx2 import httpcore lazily, inside their transports. In-process pytester runs
# restore sys.modules afterwards, so a first import inside one of them would leave later
# tests with a second copy of httpcore whose exceptions the transports no longer map.
# Importing both here puts them in pytester's baseline. The same holds for PyYAML (its C
# loader keeps the first copy's classes), which vcrpy imports inside pytester runs.


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture
def connect_guard() -> Iterator[ConnectGuard]:
    with ConnectGuard() as guard:
        yield guard


class Recorder:
    """Installs the httpx adapter with a session rooted in a temporary project."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.session: Session | None = None

    def start(self, mode: Mode | str, **overrides: object) -> Session:
        config = load_config(self.root, env={}, mode=str(mode), **overrides)
        if self.session is not None:
            self.session.close()
        # write-behind, as the pytest plugin runs it
        self.session = Session(config, write_behind=True)
        httpx_adapter.install(self.session)
        return self.session

    def files(self) -> list[Path]:
        if self.session is not None:
            self.session.flush()
        return sorted(p for p in self.root.rglob("*.json") if ".hashreplay" not in p.parts)


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    rec = Recorder(tmp_path)
    try:
        yield rec
    finally:
        httpx_adapter.uninstall()


RecorderFactory = Callable[[Mode | str], Session]
