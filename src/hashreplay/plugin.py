"""The pytest plugin (`pytest11` entry point `hashreplay`; `-p no:hashreplay` turns it off).

A thin shell: one option group, one marker, state in `config.stash`, and per test no more
than setting the test id context. Every test runs with its node id as test id; a replay
miss fails the test even when the code under test swallowed the error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

import pytest

from hashreplay import adapters
from hashreplay.core.config import load_config
from hashreplay.core.constants import FAULT_MARKER, FIXTURE_MARK, MODE_ENV, MODE_OPTION
from hashreplay.core.context import process_test_id, set_process_test_id, test_context
from hashreplay.core.errors import ConfigError, RecordingError, RecordingWriteError, ReplayFailure
from hashreplay.core.mode import Mode
from hashreplay.engine.session import Session, Stats
from hashreplay.engine.usage_collector import UsageCollector
from hashreplay.keyless import Placeholders
from hashreplay.pytest_scenarios import HashReplayFixture, apply_markers, report_leftovers
from hashreplay.pytest_usage import UsageTracker, finish_usage, merge_worker_usage

SESSION_KEY = pytest.StashKey[Session]()
WORKER_STATS_KEY = pytest.StashKey[Stats]()
USAGE_KEY = pytest.StashKey[UsageCollector]()
PLACEHOLDERS_KEY = pytest.StashKey[Placeholders]()
#: connections that nothing recorded, reported by xdist workers (label -> openers)
UNRECORDED_KEY = pytest.StashKey[dict[str, set[str]]]()
#: recorded responses that tests left unused (this process and its xdist workers)
UNCONSUMED_KEY = pytest.StashKey[list[int]]()
_MODES = ", ".join(m.value for m in Mode)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hashreplay", "hashreplay: record and replay LLM/HTTP calls")
    group.addoption(
        MODE_OPTION,
        dest="hashreplay_mode",
        default=None,
        metavar="MODE",
        help=f"one of {_MODES} (default: ${MODE_ENV}, then [tool.hashreplay] mode, then replay)",
    )
    group.addoption(
        "--hashreplay-prune",
        dest="hashreplay_prune",
        action="store_true",
        default=False,
        help="at the end of the run, delete the recordings it shows to be unused "
        "(as `hashreplay prune` does)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"hashreplay(mode=None, timing=None, pace=None, unconsumed=None): run this test in "
        f"another hashreplay mode ({_MODES}), record timing, pace its replay "
        '("instant", "recorded", "fixed:<ms>"), treat unused recordings ("warn", "fail", '
        '"ignore")',
    )
    config.addinivalue_line(
        "markers",
        f"{FAULT_MARKER}(status=None, headers=None, body=None, endpoint=None, times=None, "
        "call=None, error=None, after_chunks=None, hang=False): answer matching requests with "
        'a fault instead of their recording (error: "read_timeout", "connect_error", '
        '"disconnect")',
    )
    try:
        settings = load_config(config.rootpath, mode=config.getoption("hashreplay_mode"))
    except ConfigError as exc:
        raise pytest.UsageError(f"hashreplay: {exc}") from None
    # write-behind: a record-mode call costs no disk latency; flushed at session end
    session = Session(settings, write_behind=True)
    session.store.sweep_temp_files()  # what writers killed earlier left behind
    config.stash[SESSION_KEY] = session
    config.stash[WORKER_STATS_KEY] = Stats()
    config.stash[UNRECORDED_KEY] = {}
    config.stash[UNCONSUMED_KEY] = [0]
    placeholders = config.stash[PLACEHOLDERS_KEY] = Placeholders(settings)
    placeholders.apply(settings.mode)
    try:
        adapters.activate(session)
    except ConfigError as exc:
        placeholders.remove()
        raise pytest.UsageError(f"hashreplay: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and adapters.active_session() is session:
        adapters.deactivate()
    if session is not None:
        with contextlib.suppress(RecordingError):  # reported at session finish already
            session.close()
    placeholders = config.stash.get(PLACEHOLDERS_KEY, None)
    if placeholders is not None:
        placeholders.remove()


def _flush_recordings(session: pytest.Session, hr: Session) -> None:
    """Every recording of the run on disk before usage is written or anything is pruned; a
    write that failed (disk full, no permission) fails the run, naming the file."""
    try:
        hr.flush()
    except RecordingError as exc:
        if isinstance(exc, RecordingWriteError):
            # the summary counts files that exist: each failure was one counted recording
            hr.stats.recorded = max(0, hr.stats.recorded - len(exc.failures))
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            for line in f"hashreplay: {exc}".splitlines():
                reporter.write_line(line, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _marker_mode(marker: pytest.Mark | None) -> Mode | None:
    if marker is None:
        return None
    value = marker.kwargs.get("mode", marker.args[0] if marker.args else None)
    if value is None:
        return None
    return Mode.parse(value, source="@pytest.mark.hashreplay mode")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    session = item.config.stash.get(SESSION_KEY, None)
    if session is None:
        return (yield)
    session.begin_test(item.nodeid)
    set_process_test_id(item.nodeid)
    try:
        with test_context(item.nodeid):
            return (yield)
    finally:
        set_process_test_id(None)
        session.end_test(item.nodeid)
        item.config.stash[PLACEHOLDERS_KEY].apply(session.config.mode)


def fixture_test_id(fixturedef: pytest.FixtureDef[Any]) -> str:
    """The id a class-, module-, package- or session-scoped fixture records under: its own,
    so its calls do not belong to whichever test happened to set it up first (with `-k`,
    another test would, and replay would miss). Its file part names where it is defined, so
    its recordings sit in that directory's `recordings/`."""
    base = fixturedef.baseid
    if ".py" not in base:
        base = f"{base}/conftest.py" if base else "conftest.py"
    return f"{base}{FIXTURE_MARK}{fixturedef.argname}"


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    session = request.config.stash.get(SESSION_KEY, None)
    if session is None or fixturedef.scope == "function":
        return (yield)
    fixture_id = fixture_test_id(fixturedef)
    session.begin_test(fixture_id)
    outer = process_test_id()
    set_process_test_id(fixture_id)
    try:
        with test_context(fixture_id):
            result = yield
    finally:
        set_process_test_id(outer)
    misses = session.take_misses(fixture_id)
    if misses:
        # fail the setup of the test that needed the fixture, with the report
        pytest.fail("\n\n".join(miss.report for miss in misses), pytrace=False)
    return result


def pytest_runtest_setup(item: pytest.Item) -> None:
    session = item.config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    try:
        marker = item.get_closest_marker("hashreplay")
        mode = _marker_mode(marker)
        apply_markers(item, session, marker)
    except ConfigError as exc:
        raise pytest.UsageError(f"hashreplay: {item.nodeid}: {exc}") from None
    if mode is not None:
        session.set_test_mode(item.nodeid, mode)
        # placeholder keys only while replaying: a test marked record uses the real ones
        item.config.stash[PLACEHOLDERS_KEY].apply(mode)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    session = item.config.stash.get(SESSION_KEY, None)
    if session is None:
        return report
    misses = session.take_misses(item.nodeid)
    if misses:
        text = "\n\n".join(miss.report for miss in misses)
        own = call.excinfo.value if call.excinfo is not None else None
        if report.failed and report.longrepr is not None and not isinstance(own, ReplayFailure):
            text += (
                f"\n\n--- the test's own failure, likely caused by the miss ---\n{report.longrepr}"
            )
        report.outcome = "failed"
        report.longrepr = text
    if call.when == "call":
        item.config.stash[UNCONSUMED_KEY][0] += report_leftovers(item, session, report)
    return report


@pytest.fixture
def hashreplay(request: pytest.FixtureRequest) -> HashReplayFixture:
    """Scenario helpers for the running test (`wait_hanging`)."""
    session = request.config.stash.get(SESSION_KEY, None)
    if session is None:
        pytest.skip("the hashreplay plugin is not active (-p no:hashreplay)")
    return HashReplayFixture(session, request.node.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    hr = session.config.stash.get(SESSION_KEY, None)
    if hr is not None:
        _flush_recordings(session, hr)
    workeroutput = getattr(session.config, "workeroutput", None)
    if hr is not None and workeroutput is not None:  # a pytest-xdist worker
        workeroutput["hashreplay_stats"] = hr.stats.as_dict()
        workeroutput["hashreplay_unconsumed"] = session.config.stash[UNCONSUMED_KEY][0]
        workeroutput["hashreplay_unrecorded"] = {
            label: sorted(openers) for label, openers in hr.connections.unrecorded.items()
        }
    finish_usage(session, SESSION_KEY, USAGE_KEY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: add a finished worker's counts to the controller's summary."""
    stats = getattr(node, "workeroutput", {}).get("hashreplay_stats")
    if stats:
        node.config.stash[WORKER_STATS_KEY].merge(Stats(**stats))
    node.config.stash[UNCONSUMED_KEY][0] += getattr(node, "workeroutput", {}).get(
        "hashreplay_unconsumed", 0
    )
    unrecorded = node.config.stash[UNRECORDED_KEY]
    for label, openers in (
        getattr(node, "workeroutput", {}).get("hashreplay_unrecorded", {}).items()
    ):
        unrecorded.setdefault(label, set()).update(openers)
    merge_worker_usage(node, USAGE_KEY)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    stats = Stats()
    stats.merge(session.stats)
    stats.merge(config.stash[WORKER_STATS_KEY])
    line = (
        f"hashreplay: {stats.replayed} replayed, {stats.recorded} recorded, "
        f"{stats.missed} missed ({session.config.mode.value})"
    )
    if stats.passed_through:
        line += f"; {stats.passed_through} passed through"
    if stats.not_recorded:  # docs/design.md, "Only answers are recorded"
        calls = "call" if stats.not_recorded == 1 else "calls"
        line += f"; {stats.not_recorded} {calls} not recorded: no response"
    unconsumed = config.stash[UNCONSUMED_KEY][0]
    if unconsumed:
        line += f"; {unconsumed} recorded response(s) left unused"
    terminalreporter.write_line(line)
    connections = session.connections
    for label, openers in config.stash[UNRECORDED_KEY].items():
        connections.unrecorded.setdefault(label, set()).update(openers)
    unrecorded = connections.summary()
    if unrecorded:
        terminalreporter.write_line(f"hashreplay: {unrecorded}", yellow=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    engine = config.stash.get(SESSION_KEY, None)
    if engine is None:
        return
    collector = config.stash[USAGE_KEY] = UsageCollector()
    config.pluginmanager.register(UsageTracker(config, engine, collector), "hashreplay-usage")
