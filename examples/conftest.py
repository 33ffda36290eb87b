"""The example suite runs from the repository root, with the root as its project:

    INFERENCE_MODE=replay pytest -p hashreplay examples/

Its per-suite recordings live beside its tests (`examples/tests/recordings/`), the shared
model lists in the top-level `recordings/`. The repository's own `pyproject.toml` turns the
plugin off for hashreplay's own tests (`-p no:hashreplay`); `-p hashreplay` turns it back on
for this suite. This directory holds no `__init__.py`, so pytest puts it on `sys.path` and
the tests import `agent` directly.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("hashreplay"):
        msg = (
            "the example suite replays through the hashreplay plugin, which this repository "
            "turns off for its own tests: run `pytest -p hashreplay examples/`"
        )
        raise pytest.UsageError(msg)
