"""The pytest plugin (`pytest11` entry point `hashreplay`; `-p no:hashreplay` turns it off).

A thin shell: one option group, two markers, one fixture, and the decision whether this
project opted in (docs/design.md §16 Activation). A project opts in with a
`[tool.hashreplay]` table in the `pyproject.toml` at pytest's rootdir, or by giving a mode
(`INFERENCE_MODE`, `--inference-mode`). Until then the plugin only registers its options,
markers and fixture: no adapter, no network guard, no placeholders, no files, no summary.
Once opted in, one `PluginRun` (`plugin/run.py`) holds the run's state under one
`config.stash` key, and each hook below hands off to it.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hashreplay.core.constants import MODE_ENV, MODE_OPTION, RECORDINGS_DIRNAME
from hashreplay.core.errors import ConfigError
from hashreplay.core.modes import Mode
from hashreplay.core.paths import has_hashreplay_table
from hashreplay.plugin import markers, recording
from hashreplay.plugin.markers import MARKER_LINES

if TYPE_CHECKING:
    from hashreplay.plugin.markers import HashReplayFixture
    from hashreplay.plugin.run import PluginRun

__all__ = ["RUN_KEY", "PluginRun", "hashreplay"]

#: The one `config.stash` key of the plugin: the run's `PluginRun`, in an opted-in project.
#: The configuration, the engine and the run's state load only there (`pytest_configure`),
#: so a project that has not opted in pays for none of them (docs/design.md §16 Activation).
RUN_KEY = pytest.StashKey["PluginRun"]()


def __getattr__(name: str) -> Any:
    """`PluginRun`, imported when asked for (it loads the engine)."""
    if name == "PluginRun":
        from hashreplay.plugin.run import PluginRun

        return PluginRun
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MODES = ", ".join(m.value for m in Mode)

#: Why the plugin does nothing here, and how to turn it on.
NOT_OPTED_IN = (
    "hashreplay is not active in this project: run `hashreplay init` (adds [tool.hashreplay] "
    f"to pyproject.toml), or give a mode ({MODE_ENV}=replay or {MODE_OPTION}=replay)"
)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if not recording.recording_installed(pluginmanager):  # its options are its own otherwise
        recording.add_options(parser)
    group = parser.getgroup("hashreplay", "hashreplay: record and replay LLM/HTTP calls")
    group.addoption(
        MODE_OPTION,
        dest="hashreplay_mode",
        default=None,
        metavar="MODE",
        help=f"one of {_MODES} (default: ${MODE_ENV}, then [tool.hashreplay] mode, then "
        "replay); giving a mode turns hashreplay on in a project without [tool.hashreplay]",
    )
    group.addoption(
        "--hashreplay-prune",
        dest="hashreplay_prune",
        action="store_true",
        default=False,
        help="at the end of the run, delete the recordings it shows to be unused "
        "(as `hashreplay prune` does)",
    )
    group.addoption(
        "--hashreplay-drift",
        dest="hashreplay_drift",
        action="store_true",
        default=False,
        help="send every intercepted call live (needs the real keys), write nothing, and "
        "compare each answer with its recording by shape; results in .hashreplay/drift.json",
    )


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """`pytest_hashreplay_request` and `pytest_hashreplay_before_record` (`plugin/markers.py`)."""
    pluginmanager.add_hookspecs(markers)  # its `pytest_hashreplay_*` hookspecs


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    option = config.getoption("hashreplay_mode")
    try:
        has_table = has_hashreplay_table(config.rootpath)
    except ConfigError as exc:
        raise pytest.UsageError(f"hashreplay: {exc}") from None
    answers_recording = not recording.recording_installed(config.pluginmanager)
    try:
        legacy = recording.Options(config) if answers_recording else None
    except ConfigError as exc:
        raise pytest.UsageError(f"hashreplay: {exc}") from None
    if not (has_table or option or os.environ.get(MODE_ENV)):
        for flag in ("prune", "drift"):
            if config.getoption(f"hashreplay_{flag}"):
                raise pytest.UsageError(f"hashreplay: --hashreplay-{flag}: {NOT_OPTED_IN}")
        if legacy is not None and legacy.given:
            raise pytest.UsageError(f"hashreplay: {', '.join(legacy.given)}: {NOT_OPTED_IN}")
        return
    from hashreplay.core.config import load_config
    from hashreplay.plugin.run import PluginRun

    overrides = {} if legacy is None else legacy.overrides()
    if option is None and not os.environ.get(MODE_ENV) and legacy and legacy.mode:
        option = legacy.mode.value  # hashreplay's own names win over pytest-recording's
    try:
        settings = load_config(config.rootpath, mode=option, **overrides)
        run = PluginRun(config, settings, has_table=has_table)
        run.answers_recording = answers_recording
        markers.plug_in(config, run.session.keyer.hooks)
        if answers_recording:
            recording.plug_in(config, run.session)
        run.start()
    except ConfigError as exc:
        raise pytest.UsageError(f"hashreplay: {exc}") from None
    config.stash[RUN_KEY] = run


def pytest_report_header(config: pytest.Config) -> str | None:
    """Once a run: in an opted-in project where pytest-recording is installed, which of
    its names stay its own and how to hand them to hashreplay."""
    run = config.stash.get(RUN_KEY, None)
    if run is None or run.answers_recording:
        return None
    return recording.RECORDING_INSTALLED


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """pytest does not walk a recordings directory (docs/design.md §4): it holds one file per
    recorded call and no test, and each file would cost collection its hooks. A directory of
    that name that holds a Python file is left to pytest (a test package called so): None,
    not False, so that pytest's own `--ignore` and `norecursedirs` still have their say."""
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return None
    name, common = collection_path.name, run.session.store.common_dir
    if name != RECORDINGS_DIRNAME and (name != common.name or collection_path != common):
        return None
    try:
        with os.scandir(collection_path) as entries:
            holds_tests = any(entry.name.endswith(".py") for entry in entries)
    except OSError:  # a file of that name, or not readable: pytest decides
        return None
    return None if holds_tests else True


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.unconfigure()


def pytest_sessionstart(session: pytest.Session) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    if run is not None:
        run.sessionstart(session)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    run = item.config.stash.get(RUN_KEY, None)
    if run is None:
        return (yield)
    return (yield from run.runtest_protocol(item))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    run = request.config.stash.get(RUN_KEY, None)
    if run is None:
        return (yield)
    return (yield from run.fixture_setup(fixturedef))


def pytest_runtest_setup(item: pytest.Item) -> None:
    run = item.config.stash.get(RUN_KEY, None)
    if run is not None:
        run.runtest_setup(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    run = item.config.stash.get(RUN_KEY, None)
    return report if run is None else run.runtest_makereport(item, call, report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    if run is not None:
        run.sessionfinish(session)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any) -> None:
    """pytest-xdist: a worker finished (the controller adds up its state)."""
    run = node.config.stash.get(RUN_KEY, None)
    if run is not None:
        run.testnodedown(node)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.terminal_summary(terminalreporter)


@pytest.fixture
def hashreplay(request: pytest.FixtureRequest) -> HashReplayFixture:
    """hashreplay inside a test: `mode`, `test_id`, `calls`, `conversation(name)`, `wait_hanging()`.

    Fails the test, saying how to turn hashreplay on, in a project that has not opted in
    (there is nothing to wait for or record under)."""
    run = request.config.stash.get(RUN_KEY, None)
    if run is None:
        pytest.fail(f"the hashreplay fixture: {NOT_OPTED_IN}", pytrace=False)
    return markers.HashReplayFixture(run.session, request.node.nodeid)
