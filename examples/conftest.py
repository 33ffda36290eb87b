"""The example suite runs from the repository root, with the root as its project:

    INFERENCE_MODE=replay pytest -p hashreplay examples/

Its per-suite recordings live beside its tests (`examples/tests/recordings/`), the shared
model lists in the top-level `recordings/`. The repository's own `pyproject.toml` turns the
plugin off for hashreplay's own tests (`-p no:hashreplay`); `-p hashreplay` turns it back on
for this suite. That `pyproject.toml` is hashreplay's own and has no `[tool.hashreplay]`
table, so the mode given (`INFERENCE_MODE`) is what turns hashreplay on for the run
(docs/usage.md, Activation). This directory holds no `__init__.py`, so pytest puts it on
`sys.path` and the tests import `agent` directly.
"""

from __future__ import annotations

import pytest

COMMAND = "INFERENCE_MODE=replay pytest -p hashreplay examples/"


@pytest.hookimpl(trylast=True)  # after the plugin's own configure decided whether it is on
def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("hashreplay"):
        msg = (
            "the example suite replays through the hashreplay plugin, which this repository "
            f"turns off for its own tests: run `{COMMAND}`"
        )
        raise pytest.UsageError(msg)
    from hashreplay.plugin import RUN_KEY  # the plugin's state, there once it is on

    if config.stash.get(RUN_KEY, None) is None:
        msg = (
            "the example suite replays through hashreplay, which this repository does not "
            f"turn on without a mode: run `{COMMAND}`"
        )
        raise pytest.UsageError(msg)
