"""The client SDKs of the `sdks` extra, for the tests that drive them.

Without the extra (a bare `pip install -e '.[dev]'`) such a test is skipped and says which
extra to install; `.ci/run` installs it and sets `HASHREPLAY_REQUIRE_SDKS=1`, so there a
missing SDK fails the run instead of silently skipping its tests.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def sdk(name: str) -> ModuleType:
    """Import `name`, or skip the calling test (module) when the `sdks` extra is absent."""
    if os.environ.get("HASHREPLAY_REQUIRE_SDKS") == "1":
        return importlib.import_module(name)
    return pytest.importorskip(
        name, reason=f"{name} is not installed: pip install -e '.[sdks]' to run this test"
    )
