"""Client adapters: each one plugs a client library into the engine through one seam.

`activate(session)` turns every adapter on for a session (the pytest plugin and
`hashreplay.install()` call it); `deactivate()` restores everything. An adapter whose library
is not installed is skipped, and one whose library is not imported yet is installed when the
library is first imported (`_post_import`), so activation imports no client library.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from hashreplay.adapters import _state
from hashreplay.adapters._post_import import cancel_all, when_imported

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

active_session = _state.active_session

#: Adapter modules (under hashreplay.adapters) and the library each one patches; httpx and
#: httpx2 are the httpx adapter's own business (one adapter for both, patched lazily too).
_LIBRARY_ADAPTERS: tuple[tuple[str, str], ...] = (
    ("aiohttp", "aiohttp"),
    ("urllib3", "urllib3"),
    ("stdlib", "http.client"),
)


def activate(session: Session) -> None:
    """Intercept httpx/httpx2, aiohttp, urllib3 and http.client, guard the network, and
    patch the configured call-layer targets. A bad `callables` entry raises a ConfigError
    naming it, and nothing stays patched."""
    from hashreplay.adapters import httpx, network_guard

    httpx.install(session)
    network_guard.install(session)
    try:
        for adapter, library in _LIBRARY_ADAPTERS:
            if "." in library:  # a submodule (the stdlib's): cheap, and bound to its package
                # only after its import returns, so it is imported and patched now
                _installer(adapter)(importlib.import_module(library))
            elif library in sys.modules or _installed(library):
                when_imported(library, _installer(adapter))
        if session.config.callables:  # the call layer loads only when something is named
            from hashreplay.adapters import callables

            callables.patch_callables(session.config.callables)
    except BaseException:
        deactivate()
        raise


def deactivate() -> None:
    from hashreplay.adapters import httpx, network_guard

    cancel_all()
    network_guard.uninstall()
    callables = sys.modules.get("hashreplay.adapters.callables")
    if callables is not None:  # nothing is patched by name unless it was loaded
        callables.unpatch_callables()
    for adapter, _ in _LIBRARY_ADAPTERS:
        module = sys.modules.get(f"hashreplay.adapters.{adapter}")
        if module is not None:
            module.uninstall()
    httpx.uninstall()


def _installer(adapter: str) -> Callable[[ModuleType], None]:
    def install(_: ModuleType) -> None:
        """The library was imported (or was already): patch it for the active session."""
        session = _state.active_session()
        if session is not None:
            importlib.import_module(f"hashreplay.adapters.{adapter}").install(session)

    return install


def _installed(library: str) -> bool:
    try:
        return importlib.util.find_spec(library) is not None
    except (ImportError, ValueError):
        return False
