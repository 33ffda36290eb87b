"""Client adapters: each one plugs a client library into the engine through one seam.

`activate(session)` turns every adapter on for a session (the pytest plugin and
`hashreplay.install()` call it); `deactivate()` restores everything. An adapter whose library
is not installed is skipped (its module is never imported).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import TYPE_CHECKING

from hashreplay.adapters import _state

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

active_session = _state.active_session

#: Adapter modules (under hashreplay.adapters) and the library each one needs.
_LIBRARY_ADAPTERS: tuple[tuple[str, str], ...] = (("urllib3", "urllib3"), ("stdlib", "http"))


def _library_adapters() -> list[ModuleType]:
    return [
        importlib.import_module(f"hashreplay.adapters.{module}")
        for module, library in _LIBRARY_ADAPTERS
        if importlib.util.find_spec(library) is not None
    ]


def activate(session: Session) -> None:
    """Intercept httpx/httpx2, urllib3 and http.client, and patch the configured
    call-layer targets. A bad `callables` entry raises a ConfigError naming it, and nothing
    stays patched."""
    from hashreplay.adapters import callables, httpx

    httpx.install(session)
    try:
        for adapter in _library_adapters():
            adapter.install(session)
        callables.patch_callables(session.config.callables)
    except BaseException:
        deactivate()
        raise


def deactivate() -> None:
    from hashreplay.adapters import callables, httpx

    callables.unpatch_callables()
    for adapter in _library_adapters():
        adapter.uninstall()
    httpx.uninstall()
