"""What every adapter shares at run time: the session they route through (owned by the registry)
and patching a client library on its first import.

The session the adapters route through: one per process at a time, owned by the registry
(`hashreplay.adapters.activate` / `deactivate`).

An adapter installed on its own (tests, a server's `install()`) holds the session until it
is uninstalled; the session is forgotten only when no holder is left, so one adapter's
`uninstall` never takes it from another that is still installed.

Patch a client library when it is first imported, not before: activating the adapters
costs a run nothing for the libraries it never uses (importing httpx or aiohttp just to patch
them costs tens of milliseconds).

`when_imported(name, callback)` calls `callback(module)` now when `name` is imported already,
else right after its first import, on the importing thread. A meta-path finder wraps the
module's real loader for that one import; `cancel_all()` forgets callbacks still waiting.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hashreplay.engine.session import Session


_session_lock = threading.Lock()


_active: list[Session | None] = [None]


_holders: set[str] = set()


def active_session() -> Session | None:
    return _active[0]


def attach(holder: str, session: Session) -> None:
    """`holder` (an adapter, or the registry) routes through `session` from now on."""
    with _session_lock:
        _holders.add(holder)
        _active[0] = session


def detach(holder: str) -> None:
    """`holder` is done; the session is forgotten once nobody holds it."""
    with _session_lock:
        _holders.discard(holder)
        if not _holders:
            _active[0] = None


def detach_all() -> None:
    with _session_lock:
        _holders.clear()
        _active[0] = None


Callback = Callable[[ModuleType], None]


_lock = threading.RLock()


_waiting: dict[str, list[Callback]] = {}


def when_imported(name: str, callback: Callback) -> None:
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _waiting.setdefault(name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    callback(module)


def cancel_all() -> None:
    with _lock:
        _waiting.clear()
        if _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


def waiting() -> list[str]:
    with _lock:
        return sorted(_waiting)


class _Loader(importlib.abc.Loader):
    """The real loader, then the callbacks."""

    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        with _lock:
            callbacks = _waiting.pop(self._name, [])
            if not _waiting and _FINDER in sys.meta_path:
                sys.meta_path.remove(_FINDER)
        for callback in callbacks:
            callback(module)

    def __getattr__(self, name: str) -> Any:  # resource readers and the like
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None
            )
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_FINDER = _Finder()
