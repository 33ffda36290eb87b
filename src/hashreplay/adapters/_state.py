"""State the adapters share: the active session, and whether a call-layer target is running
(its HTTP underneath must not be recorded a second time)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

_active: list[Session | None] = [None]
_in_call: ContextVar[bool] = ContextVar("hashreplay_in_call", default=False)


def active_session() -> Session | None:
    return _active[0]


def set_active_session(session: Session | None) -> None:
    _active[0] = session


def in_call() -> bool:
    """True while a recorded call-layer target runs live (record modes)."""
    return _in_call.get()


@contextmanager
def inside_call() -> Iterator[None]:
    token = _in_call.set(True)
    try:
        yield
    finally:
        _in_call.reset(token)
