"""hashreplay: deterministic, offline, free tests for LLM applications.

Records the HTTP calls a test suite makes into a content-addressed store of small JSON
files and replays them offline. The pytest plugin needs no import; this module holds what
code calls directly. See docs/design.md for how it works and README.md to start.
Internals stay importable from their own modules (`hashreplay.core.…`, `hashreplay.engine.…`)
but are not part of the public API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hashreplay.core.context import conversation, current_test_id, test_context
from hashreplay.core.errors import (
    BodyTooLarge,
    ConfigError,
    HashReplayError,
    HashReplayWarning,
    RecordingError,
    ReplayMiss,
)
from hashreplay.core.modes import Mode

if TYPE_CHECKING:
    from hashreplay.adapters.callables import record_callable, unpatch_callables
    from hashreplay.server_mode import (
        ASGITestIdMiddleware,
        WSGITestIdMiddleware,
        install,
        uninstall,
    )
    from hashreplay.server_mode import ASGITestIdMiddleware as TestIdMiddleware

    __version__: str

#: Names loaded on first use, so `import hashreplay` (which the pytest plugin's import runs)
#: stays light: `name -> (module, attribute)`.
_LAZY = {
    # the pair by server interface; `TestIdMiddleware` is the ASGI one, as `hashreplay.asgi`
    # names it (docs/design.md §8)
    "ASGITestIdMiddleware": ("hashreplay.server_mode", "ASGITestIdMiddleware"),
    "TestIdMiddleware": ("hashreplay.server_mode", "ASGITestIdMiddleware"),
    "WSGITestIdMiddleware": ("hashreplay.server_mode", "WSGITestIdMiddleware"),
    "install": ("hashreplay.server_mode", "install"),
    "record_callable": ("hashreplay.adapters.callables", "record_callable"),
    "uninstall": ("hashreplay.server_mode", "uninstall"),
    "unpatch_callables": ("hashreplay.adapters.callables", "unpatch_callables"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the package metadata is read on first use, not at import
        globals()[name] = value = _version()
        return value
    target = _LAZY.get(name)
    if target is None:
        msg = f"module 'hashreplay' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hashreplay")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree not installed
        return "0.0.0"


__all__ = [
    "ASGITestIdMiddleware",
    "BodyTooLarge",
    "ConfigError",
    "HashReplayError",
    "HashReplayWarning",
    "Mode",
    "RecordingError",
    "ReplayMiss",
    "TestIdMiddleware",
    "WSGITestIdMiddleware",
    "__version__",
    "conversation",
    "current_test_id",
    "install",
    "record_callable",
    "test_context",
    "uninstall",
    "unpatch_callables",
]
