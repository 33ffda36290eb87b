"""Client adapters: each one plugs a client library into the engine through one seam.

`activate(session)` turns every adapter on for a session (the pytest plugin and
`hashreplay.install()` call it); `deactivate()` restores everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hashreplay.adapters import _state

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

active_session = _state.active_session


def activate(session: Session) -> None:
    """Intercept httpx/httpx2 and patch the configured call-layer targets. A bad
    `callables` entry raises a ConfigError naming it, and nothing stays patched."""
    from hashreplay.adapters import callables, httpx, network_guard

    httpx.install(session)
    network_guard.install(session)
    try:
        callables.patch_callables(session.config.callables)
    except BaseException:
        deactivate()
        raise


def deactivate() -> None:
    from hashreplay.adapters import callables, httpx, network_guard

    network_guard.uninstall()
    callables.unpatch_callables()
    httpx.uninstall()
