"""The adapter seam as a type (docs/design.md §2): one registry of adapters, each a module that
implements `Adapter`, the registry owning the session, and every break kind mapped by every
adapter that raises its client's own exceptions."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from hashreplay import adapters
from hashreplay.adapters import ADAPTERS, _shared, activate, deactivate
from hashreplay.adapters import _shared as _state
from hashreplay.adapters import stdlib as stdlib_adapter
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
    importlib.import_module("mcp")  # the MCP adapter patches on mcp's import
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


#: Every attribute an adapter replaces, as `(module, owner path, attribute)`.
SEAMS = [
    ("httpx", "HTTPTransport", "handle_request"),
    ("httpx", "AsyncHTTPTransport", "handle_async_request"),
    ("httpx2", "HTTPTransport", "handle_request"),
    ("httpx2", "AsyncHTTPTransport", "handle_async_request"),
    ("aiohttp", "ClientSession", "_request"),
    ("aiohttp", "ClientSession", "_ws_connect"),
    ("urllib3", "HTTPConnectionPool", "urlopen"),
    *(("http.client", "HTTPConnection", name) for name in stdlib_adapter._PATCHED),
    ("grpc", "", "insecure_channel"),
    ("grpc", "", "secure_channel"),
    ("socket", "", "getaddrinfo"),
]


def _owner(module: str, path: str) -> object:
    owner: object = importlib.import_module(module)
    for part in filter(None, path.split(".")):
        owner = getattr(owner, part)
    return owner


def _seams() -> dict[tuple[str, str, str], object]:
    return {seam: inspect.getattr_static(_owner(seam[0], seam[1]), seam[2], None) for seam in SEAMS}


def test_activate_patches_every_seam_and_deactivate_puts_each_original_back(
    tmp_path: Path,
) -> None:
    for module in ("aiohttp", "httpx", "httpx2", "grpc"):
        importlib.import_module(module)
    sdk("urllib3")
    before = _seams()
    activate(_session(tmp_path))
    try:
        during = _seams()
        assert [seam for seam in SEAMS if during[seam] is before[seam]] == []
        activate(_session(tmp_path))  # a second activation only swaps the session
        assert _seams() == during
    finally:
        deactivate()
    after = _seams()
    assert [seam for seam in SEAMS if after[seam] is not before[seam]] == []


class _Base:
    def method(self) -> str:
        return "base"


class _Sub(_Base):
    own = staticmethod(lambda: "own")


def test_patches_put_back_an_attribute_as_it_was_stored() -> None:
    """An inherited attribute is deleted again (not copied onto the subclass), a static
    method goes back as the staticmethod object it was, the last patch is undone first."""
    patches = _shared.Patches(None)
    own = _Sub.__dict__["own"]
    assert patches.replace(_Sub, "method", lambda self: "patched") is _Base.__dict__["method"]
    assert patches.replace(_Sub, "own", staticmethod(lambda: "first")) is own
    patches.replace(_Sub, "own", staticmethod(lambda: "second"))
    assert (_Sub().method(), _Sub.own(), patches.patched) == ("patched", "second", True)
    patches.restore()
    assert "method" not in _Sub.__dict__
    assert _Sub.__dict__["own"] is own
    assert (_Sub().method(), _Sub.own(), patches.patched) == ("base", "own", False)


def test_a_patch_made_on_top_of_ours_is_left_in_place_when_asked() -> None:
    patches = _shared.Patches(None)
    original = _Base.__dict__["method"]
    patches.replace(_Base, "method", lambda self: "ours", if_ours=True)

    def theirs(self: _Base) -> str:
        return "theirs"

    _Base.method = theirs  # type: ignore[method-assign]
    try:
        patches.restore()
        assert _Base.__dict__["method"] is theirs
    finally:
        _Base.method = original  # type: ignore[method-assign]


def test_patches_install_once_and_hold_the_session_until_restored(tmp_path: Path) -> None:
    patches = _shared.Patches("test-holder")
    first, second = _session(tmp_path), _session(tmp_path)
    try:
        assert patches.attach(first) is True  # the first install patches
        assert patches.attach(second) is False  # a second one only swaps the session
        assert (patches.installed, _state.active_session()) == (True, second)
        patches.replace(_Sub, "method", lambda self: "patched", key="the key")
        found = patches.get("the key")
        assert found is not None and found.attr == "method"
    finally:
        patches.restore()
    assert (patches.installed, patches.get("the key"), _state.active_session()) == (
        False,
        None,
        None,
    )
    assert "method" not in _Sub.__dict__


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
