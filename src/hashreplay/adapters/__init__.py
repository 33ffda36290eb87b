"""Client adapters: each one plugs a client library into the engine through one seam.

`activate(session)` turns every adapter on for a session (the pytest plugin and
`hashreplay.install()` call it); `deactivate()` restores everything.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from hashreplay.adapters import _state
from hashreplay.adapters._post_import import cancel_all, when_imported

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

active_session = _state.active_session


def activate(session: Session) -> None:
    """Intercept httpx/httpx2 (and aiohttp when installed) and patch the configured
    call-layer targets. A bad `callables` entry raises a ConfigError naming it, and nothing
    stays patched."""
    from hashreplay.adapters import callables, httpx, network_guard

    httpx.install(session)
    network_guard.install(session)
    try:
        if "aiohttp" in sys.modules or _has_aiohttp():
            when_imported("aiohttp", _install_aiohttp)
        callables.patch_callables(session.config.callables)
    except BaseException:
        deactivate()
        raise


def deactivate() -> None:
    from hashreplay.adapters import callables, httpx, network_guard

    cancel_all()
    network_guard.uninstall()
    callables.unpatch_callables()
    if "hashreplay.adapters.aiohttp" in sys.modules:
        from hashreplay.adapters import aiohttp

        aiohttp.uninstall()
    httpx.uninstall()


def _install_aiohttp(_: ModuleType) -> None:
    """aiohttp was imported (or is already): patch it for the active session."""
    session = _state.active_session()
    if session is not None:
        from hashreplay.adapters import aiohttp

        aiohttp.install(session)


def _has_aiohttp() -> bool:
    return importlib.util.find_spec("aiohttp") is not None
