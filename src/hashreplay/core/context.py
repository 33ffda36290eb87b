"""Which test, conversation and call a request belongs to: context variables the front ends
set and every adapter reads (docs/design.md §3, the test id in the key).

The current test id is a ContextVar (concurrent asyncio tasks keep theirs) with a
process-wide fallback, so calls from threads an SDK starts still find their test. The
conversation (`hashreplay.conversation(name)`) and the two flags (a call-layer target
running live; an adapter's own connections, let through by the network guard) are
context-local too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Final

_UNSET: Final = "\x00unset"


_current: ContextVar[str | None] = ContextVar("hashreplay_test_id", default=_UNSET)


_process_wide: list[str | None] = [None]


def current_test_id() -> str | None:
    """The test id of the calling context, else the process-wide one, else None."""
    value = _current.get()
    return _process_wide[0] if value == _UNSET else value


def has_own_test_context() -> bool:
    """True when the calling context carries a test id of its own (set in it, or copied
    into a task or thread), not only the process-wide fallback: a thread pool's worker
    (asyncio's resolver) runs for whoever submitted the work, not for the current test."""
    return _current.get() != _UNSET


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


_conversation: ContextVar[str | None] = ContextVar("hashreplay_conversation", default=None)


def current_conversation() -> str | None:
    """The conversation of the calling context (`conversation(name)`), or None."""
    return _conversation.get()


@contextmanager
def conversation(name: str) -> Iterator[None]:
    """Run a block as conversation `name`: identical requests of different conversations in
    one test keep their own recorded sequences. Context-local: tasks and threads that copy
    the context inherit it."""
    if not isinstance(name, str) or not name:
        msg = f"hashreplay.conversation(name): name must be a non-empty string, got {name!r}"
        raise ValueError(msg)
    token = _conversation.set(name)
    try:
        yield
    finally:
        _conversation.reset(token)


class _Flag:
    """A context-local on/off flag, set for the duration of a `with` block."""

    def __init__(self, name: str) -> None:
        self._var: ContextVar[bool] = ContextVar(name, default=False)

    def is_set(self) -> bool:
        return self._var.get()

    @contextmanager
    def set(self) -> Iterator[None]:
        token = self._var.set(True)
        try:
            yield
        finally:
            self._var.reset(token)


_in_call = _Flag("hashreplay_in_call")


_adapter_io = _Flag("hashreplay_adapter_io")


def in_call() -> bool:
    """True while a recorded call-layer target runs live: the HTTP it makes underneath is
    part of that call's recording and is not recorded a second time."""
    return _in_call.is_set()


def inside_call() -> AbstractContextManager[None]:
    """Run a call-layer target's live body (its HTTP is not recorded on its own)."""
    return _in_call.set()


def in_adapter_io() -> bool:
    """True while an adapter sends a request the engine decided on (record, live,
    passthrough): the network guard lets its connections through."""
    return _adapter_io.is_set()


def adapter_io() -> AbstractContextManager[None]:
    """Mark the connections made inside as handled by an adapter (not for the guard)."""
    return _adapter_io.set()
