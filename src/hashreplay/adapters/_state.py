"""The session the adapters route through (one per process at a time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

_active: list[Session | None] = [None]


def active_session() -> Session | None:
    return _active[0]


def set_active_session(session: Session | None) -> None:
    _active[0] = session
