"""The session the adapters route through: one per process at a time, owned by the registry
(`hashreplay.adapters.activate` / `deactivate`).

An adapter installed on its own (tests, a server's `install()`) holds the session until it
is uninstalled; the session is forgotten only when no holder is left, so one adapter's
`uninstall` never takes it from another that is still installed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

_lock = threading.Lock()
_active: list[Session | None] = [None]
_holders: set[str] = set()


def active_session() -> Session | None:
    return _active[0]


def attach(holder: str, session: Session) -> None:
    """`holder` (an adapter, or the registry) routes through `session` from now on."""
    with _lock:
        _holders.add(holder)
        _active[0] = session


def detach(holder: str) -> None:
    """`holder` is done; the session is forgotten once nobody holds it."""
    with _lock:
        _holders.discard(holder)
        if not _holders:
            _active[0] = None


def detach_all() -> None:
    with _lock:
        _holders.clear()
        _active[0] = None
