"""The adapter seam as a type (docs/design.md §2): one registry of adapters, each a module that
implements `Adapter`, the registry owning the session, and every break kind mapped by every
adapter that raises its client's own exceptions."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from hashreplay import adapters
from hashreplay.adapters import ADAPTERS, activate, deactivate
from hashreplay.adapters import _shared as _state
from hashreplay.core.config import load_config
from hashreplay.engine.http import BreakKind, ReplayPlan
from hashreplay.engine.session import Session
from tests.sdks import sdk


def _session(root: Path) -> Session:
    return Session(load_config(root, env={}))


def test_every_registered_adapter_is_a_module_with_the_seam() -> None:
    sdk("urllib3")  # the urllib3 adapter imports it (the `sdks` extra brings it)
    names = [entry.module for entry in ADAPTERS]
    assert len(names) == len(set(names))
    for name in names:
        module = importlib.import_module(f"hashreplay.adapters.{name}")
        for method in ("install", "uninstall", "is_installed"):
            assert callable(getattr(module, method, None)), f"{name} lacks {method}"


def test_activate_installs_and_deactivate_restores_every_registered_adapter(
    tmp_path: Path,
) -> None:
    importlib.import_module("aiohttp")
    sdk("urllib3")
    session = _session(tmp_path)
    activate(session)
    try:
        assert _state.active_session() is session
        for entry in ADAPTERS:
            assert adapters.adapter(entry.module).is_installed(), entry.module
    finally:
        deactivate()
    assert _state.active_session() is None
    for entry in ADAPTERS:
        assert not adapters.adapter(entry.module).is_installed(), entry.module


def test_one_adapters_uninstall_leaves_another_its_session(tmp_path: Path) -> None:
    sdk("urllib3")
    urllib3_adapter = adapters.adapter("urllib3")
    stdlib_adapter = adapters.adapter("stdlib")
    session = _session(tmp_path)
    urllib3_adapter.install(session)
    stdlib_adapter.install(session)
    try:
        urllib3_adapter.uninstall()
        assert not urllib3_adapter.is_installed()
        assert stdlib_adapter.is_installed()
        assert _state.active_session() is session
    finally:
        stdlib_adapter.uninstall()
    assert _state.active_session() is None


def test_deactivate_forgets_the_session_even_when_an_adapter_holds_it(tmp_path: Path) -> None:
    stdlib_adapter = adapters.adapter("stdlib")
    stdlib_adapter.install(_session(tmp_path))
    deactivate()
    assert not stdlib_adapter.is_installed()
    assert _state.active_session() is None


def _plan(kind: BreakKind) -> ReplayPlan:
    return ReplayPlan(None, [], [], False, None, "stopped", None, kind)


@pytest.mark.parametrize("kind", list(BreakKind))
async def test_every_adapter_raises_its_clients_own_exception_for_every_break_kind(
    kind: BreakKind,
) -> None:
    urllib3 = sdk("urllib3")  # the `sdks` extra brings it
    u3exc = sdk("urllib3.exceptions")
    import aiohttp
    from yarl import URL

    from hashreplay.adapters import _shared
    from hashreplay.adapters import aiohttp as aiohttp_adapter
    from hashreplay.adapters import httpx as httpx_adapter
    from hashreplay.adapters import urllib3 as urllib3_adapter

    plan = _plan(kind)
    assert isinstance(httpx_adapter.error_class(kind), str)
    for in_body in (False, True):
        assert isinstance(_shared.kind_exception(plan, in_body=in_body), Exception)
    request = aiohttp.ClientRequest("GET", URL("http://127.0.0.1:9/x"))
    raised = aiohttp_adapter.kind_exception(plan, request, in_body=False)
    assert isinstance(raised, aiohttp.ClientError)
    pool = urllib3.HTTPConnectionPool("127.0.0.1", 9)
    call = urllib3_adapter._Call(pool, {"method": "GET", "url": "/x"})
    assert isinstance(urllib3_adapter._kind_exception(plan, call), u3exc.HTTPError)
