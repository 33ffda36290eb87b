"""Client adapters: each one plugs a client library into the engine through one seam.

Every adapter is a module that implements `Adapter` (docs/design.md §2), and `ADAPTERS` is
the one list of them. `activate(session)` turns every adapter on for a session (the pytest
plugin and `hashreplay.install()` call it) and owns the session they route through;
`deactivate()` restores everything. An adapter whose library is not installed is skipped, and
one whose library is not imported yet is installed when the library is first imported
(`_shared`), so activation imports no client library. Adding a client is one module,
one line in `ADAPTERS` and its tests.

What keeps activation's cost independent of how many adapters exist (docs/design.md §11):
an entry names the top-level library it patches, so activation only registers a post-import
callback (`when_imported`: a dict entry, and one `find_spec` to skip a library that is not
installed) and the adapter module itself loads when its library does. `library=None` (the
module is imported at every activation and waits for its libraries itself) and a dotted
library (imported and patched at activation) are for what every run pays anyway. An adapter
module imports at its top only what its patch needs on the replay path: no `asyncio` (its
coroutines find it loaded), no record or miss path, no dataclass or pydantic model, no
compiled pattern (compile on first use); its library joins `NOT_AT_START_UP` in
`tests/plugin/test_startup_imports.py`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import cancel_all, when_imported

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

active_session = _state.active_session


class Adapter(Protocol):
    """The seam of one client library, as a module: `install` patches the library for a
    session (idempotent: a second call only swaps the session), `uninstall` puts back what
    it patched, `is_installed` says whether anything is patched now. The bookkeeping behind
    the three (the lock, the installed flag, each replaced attribute and its original, the
    hold on the session) is one `_shared.Patches` per adapter."""

    def install(self, session: Session) -> None: ...

    def uninstall(self) -> None: ...

    def is_installed(self) -> bool: ...


class Registered(NamedTuple):
    """One adapter: its module under `hashreplay.adapters` and the library it patches (None:
    it waits for its libraries itself, as the httpx adapter does for httpx and httpx2)."""

    module: str
    library: str | None


#: Every adapter, in the order they are installed (and uninstalled in reverse).
ADAPTERS: tuple[Registered, ...] = (
    Registered("httpx", None),
    Registered("network_guard", None),
    Registered("aiohttp", "aiohttp"),
    Registered("aiohttp_ws", "aiohttp"),
    Registered("websockets", "websockets"),
    Registered("urllib3", "urllib3"),
    Registered("stdlib", "http.client"),
    Registered("mcp", "mcp"),
)

if TYPE_CHECKING:  # mypy checks that every adapter module implements the seam
    from hashreplay.adapters import (
        aiohttp,
        aiohttp_ws,
        httpx,
        mcp,
        network_guard,
        stdlib,
        urllib3,
        websockets,
    )

    _SEAMS: tuple[Adapter, ...] = (
        httpx,
        network_guard,
        aiohttp,
        aiohttp_ws,
        websockets,
        urllib3,
        stdlib,
        mcp,
    )


def adapter(name: str) -> Adapter:
    """The adapter module `name` (imports it, and so its library)."""
    return cast("Adapter", importlib.import_module(f"{__name__}.{name}"))


def loaded(name: str) -> Adapter | None:
    """The adapter module `name` if something imported it already (nothing is imported)."""
    return cast("Adapter | None", sys.modules.get(f"{__name__}.{name}"))


def activate(session: Session) -> None:
    """Intercept every registered client, guard the network, and patch the configured
    call-layer targets. A bad `callables` entry raises a ConfigError naming it, and nothing
    stays patched."""
    _state.attach("registry", session)
    try:
        for entry in ADAPTERS:
            if entry.library is None:
                adapter(entry.module).install(session)
            elif "." in entry.library:  # a submodule (the stdlib's): cheap, and bound to its
                # package only after its import returns, so it is imported and patched now
                _installer(entry.module)(importlib.import_module(entry.library))
            elif entry.library in sys.modules or _installed(entry.library):
                when_imported(entry.library, _installer(entry.module))
        if session.config.callables:  # the call layer loads only when something is named
            from hashreplay.adapters import callables

            callables.patch_callables(session.config.callables)
    except BaseException:
        deactivate()
        raise


def deactivate() -> None:
    """Put back everything any adapter patched, and forget the session."""
    cancel_all()
    callables = sys.modules.get("hashreplay.adapters.callables")
    if callables is not None:  # nothing is patched by name unless it was loaded
        callables.unpatch_callables()
    for entry in reversed(ADAPTERS):
        module = loaded(entry.module)
        if module is not None:
            module.uninstall()
    _state.detach_all()


def _installer(name: str) -> Callable[[ModuleType], None]:
    def install(_: ModuleType) -> None:
        """The library was imported (or was already): patch it for the active session."""
        session = _state.active_session()
        if session is not None:
            adapter(name).install(session)

    return install


def _installed(library: str) -> bool:
    try:
        return importlib.util.find_spec(library) is not None
    except (ImportError, ValueError):
        return False
