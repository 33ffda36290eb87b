"""The client SDKs of the `sdks` extra, for the tests that drive them.

Without the extra (a bare `pip install -e '.[dev]'`) such a test is skipped and says which
extra to install; `.ci/run` installs it and sets `HASHREPLAY_REQUIRE_SDKS=1`, so there a
missing SDK fails the run instead of silently skipping its tests.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType

import pytest


def required() -> bool:
    """Whether a missing SDK fails the run (`.ci/run`) instead of skipping its tests."""
    return os.environ.get("HASHREPLAY_REQUIRE_SDKS") == "1"


def sdk(name: str) -> ModuleType:
    """Import `name`, or skip the calling test (module) when the `sdks` extra is absent."""
    if required():
        return importlib.import_module(name)
    return pytest.importorskip(
        name, reason=f"{name} is not installed: pip install -e '.[sdks]' to run this test"
    )


def preload(*names: str) -> None:
    """Import `names` where installed, for a module of which only some tests drive them.

    Imported at module level they are in pytester's baseline (see tests/conftest.py); the
    tests that need one call `sdk(name)` themselves, so they skip without the extra while the
    module's other tests still run.
    """
    for name in names:
        if required():
            importlib.import_module(name)
            continue
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
