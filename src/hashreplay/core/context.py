"""The current test id: a ContextVar (concurrent asyncio tasks keep theirs) with a
process-wide fallback, so calls from threads an SDK starts still find their test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

_UNSET: Final = "\x00unset"
_current: ContextVar[str | None] = ContextVar("hashreplay_test_id", default=_UNSET)
_process_wide: list[str | None] = [None]


def current_test_id() -> str | None:
    """The test id of the calling context, else the process-wide one, else None."""
    value = _current.get()
    return _process_wide[0] if value == _UNSET else value


def process_test_id() -> str | None:
    return _process_wide[0]


def set_process_test_id(test_id: str | None) -> None:
    """Set the test id seen by threads and tasks that have no context of their own."""
    _process_wide[0] = test_id


@contextmanager
def test_context(test_id: str | None) -> Iterator[None]:
    """Run a block (and the tasks it creates) as test `test_id`; None means outside any test."""
    token = _current.set(test_id)
    try:
        yield
    finally:
        _current.reset(token)


test_context.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


_in_call: ContextVar[bool] = ContextVar("hashreplay_in_call", default=False)


def in_call() -> bool:
    """True while a recorded call-layer target runs live: the HTTP it makes underneath is
    part of that call's recording and is not recorded a second time."""
    return _in_call.get()


@contextmanager
def inside_call() -> Iterator[None]:
    token = _in_call.set(True)
    try:
        yield
    finally:
        _in_call.reset(token)


_adapter_io: ContextVar[bool] = ContextVar("hashreplay_adapter_io", default=False)


def in_adapter_io() -> bool:
    """True while an adapter sends a request the engine decided on (record, live,
    passthrough): the network guard lets its connections through."""
    return _adapter_io.get()


@contextmanager
def adapter_io() -> Iterator[None]:
    """Mark the connections made inside as handled by an adapter (not for the guard)."""
    token = _adapter_io.set(True)
    try:
        yield
    finally:
        _adapter_io.reset(token)
