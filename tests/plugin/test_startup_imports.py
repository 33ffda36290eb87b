"""A run loads only what it uses (docs/design.md §11, the replay path). The plugin's import
and its activation leave the CLI, the proxy server, the maintenance tools, the record path
and every HTTP client library unloaded until something needs them (benchmarks/startup.py
times it; nothing here is timed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

#: Never loaded by `import hashreplay.plugin`, nor by activating it in a replay run of a
#: project that uses no client.
NOT_AT_START_UP = (
    "hashreplay.cli",
    "hashreplay.server",
    "hashreplay.adapters.callables",
    # the maintenance tools
    "hashreplay.engine.files",
    "hashreplay.engine.prune",
    "hashreplay.engine.rehash",
    "hashreplay.engine.importing",
    "hashreplay.engine.import_vcr",
    # the miss report and the request diff, loaded on the first miss or mismatch
    "hashreplay.engine.miss",
    "hashreplay.core.diff",
    # the response shapes a drift run compares
    "hashreplay.core.shape",
    # the record path, built on the first recording
    "hashreplay.engine.record",
    "hashreplay.engine.record",
    "hashreplay.core.normalise_response",
    "aiofiles",
    # the event loop (~12 ms with the `ssl` it loads): awaited only by async code, whose
    # running loop has imported it already
    "asyncio",
    "httpx",
    "httpx2",
    "aiohttp",
    "requests",
    "urllib3",
)

LOADED = (
    "import sys\n"
    f"heavy = {NOT_AT_START_UP!r}\n"
    "print(sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + '.' for h in heavy))))\n"
)


def test_importing_the_plugin_loads_no_cli_server_maintenance_or_client() -> None:
    code = "import hashreplay.plugin\n" + LOADED
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_check_sees_a_module_that_is_loaded() -> None:
    """The check above is not vacuous: a loaded module on the list is reported."""
    code = "import hashreplay.plugin, hashreplay.core.diff\n" + LOADED
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['hashreplay.core.diff']"


def test_an_active_replay_run_that_uses_no_client_loads_none_of_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # only this plugin: another one installed here (vcrpy's) may import a client itself
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(
        test_plain=f"""
import sys

def test_modules_after_activation():
    heavy = {NOT_AT_START_UP!r}
    prefixes = tuple(h + "." for h in heavy)
    assert sorted(m for m in sys.modules if m in heavy or m.startswith(prefixes)) == []
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "hashreplay.plugin", "-p", "no:cacheprovider", "--inference-mode=replay"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 0 recorded, 0 missed (replay)"])


def test_importing_the_plugin_creates_no_dataclass() -> None:
    """Classes on the import path are plain classes or NamedTuples (docs/design.md §11): a
    `@dataclass` compiles its generated methods when its module loads, ~1 ms each."""
    code = (
        "import dataclasses, sys\n"
        "import hashreplay.plugin\n"
        "found = sorted(\n"
        "    f'{name}.{value.__qualname__}'\n"
        "    for name, module in list(sys.modules.items()) if name.startswith('hashreplay')\n"
        "    for value in vars(module).values()\n"
        "    if isinstance(value, type) and value.__module__ == name\n"
        "    and dataclasses.is_dataclass(value)\n"
        ")\n"
        "print(found)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


#: Loaded only once a project opts in (docs/design.md §16 Activation): the configuration's
#: and the formats' pydantic models, the engine and the run's state.
OPTED_IN_ONLY = (
    "pydantic",
    "hashreplay.core.config",
    "hashreplay.core.format",
    "hashreplay.engine",
    "hashreplay.plugin.run",
)


def test_a_project_that_has_not_opted_in_loads_no_engine_and_no_model(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyfile(
        test_plain=f"""
import sys

def test_modules_of_a_project_without_the_table():
    found = {OPTED_IN_ONLY!r}
    prefixes = tuple(m + "." for m in found)
    assert sorted(m for m in sys.modules if m in found or m.startswith(prefixes)) == []
"""
    )
    result = pytester.runpytest_subprocess("-p", "hashreplay.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "hashreplay:" not in result.stdout.str()


def test_an_opted_in_run_loads_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above is not vacuous: the same test fails once the project opts in."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml("[tool.hashreplay]\n")
    pytester.makepyfile(
        test_plain=f"""
import sys

def test_modules_of_an_opted_in_project():
    found = {OPTED_IN_ONLY!r}
    assert all(m in sys.modules for m in found), sorted(set(found) - set(sys.modules))
"""
    )
    result = pytester.runpytest_subprocess("-p", "hashreplay.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
