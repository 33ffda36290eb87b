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
from hashreplay.core.constants import FIXTURE_MARK, MODE_ENV, MODE_OPTION
from hashreplay.core.context import process_test_id, set_process_test_id, test_context
from hashreplay.core.errors import ConfigError, RecordingError, RecordingWriteError
from hashreplay.core.mode import Mode
from hashreplay.engine.session import Session, Stats
from hashreplay.engine.usage_log import RunUsage, UsageCollector, relative, write_usage
from hashreplay.maintenance.prune import prune_project

SESSION_KEY = pytest.StashKey[Session]()
WORKER_STATS_KEY = pytest.StashKey[Stats]()
USAGE_KEY = pytest.StashKey[UsageCollector]()
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
        f"hashreplay(mode=None): run this test in another hashreplay mode ({_MODES})",
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
    try:
        adapters.activate(session)
    except ConfigError as exc:
        raise pytest.UsageError(f"hashreplay: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and adapters.active_session() is session:
        adapters.deactivate()
    if session is not None:
        with contextlib.suppress(RecordingError):  # reported at session finish already
            session.close()


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


def _marker_mode(item: pytest.Item) -> Mode | None:
    marker = item.get_closest_marker("hashreplay")
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
        mode = _marker_mode(item)
    except ConfigError as exc:
        raise pytest.UsageError(f"hashreplay: {item.nodeid}: {exc}") from None
    if mode is not None:
        session.set_test_mode(item.nodeid, mode)


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
        if report.failed and report.longrepr is not None:
            text += (
                f"\n\n--- the test's own failure, likely caused by the miss ---\n{report.longrepr}"
            )
        report.outcome = "failed"
        report.longrepr = text
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    hr = session.config.stash.get(SESSION_KEY, None)
    if hr is not None:
        _flush_recordings(session, hr)
    workeroutput = getattr(session.config, "workeroutput", None)
    if hr is not None and workeroutput is not None:  # a pytest-xdist worker
        workeroutput["hashreplay_stats"] = hr.stats.as_dict()
    _finish_usage(session)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: add a finished worker's counts to the controller's summary."""
    stats = getattr(node, "workeroutput", {}).get("hashreplay_stats")
    if stats:
        node.config.stash[WORKER_STATS_KEY].merge(Stats(**stats))
    _merge_worker_usage(node)


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
    terminalreporter.write_line(line)


# --- the usage log (`.hashreplay/usage.json`) and `--hashreplay-prune` ------------------------


class _UsageTracker:
    """Feeds the run's `UsageCollector` from pytest's reporting hooks.

    On a pytest-xdist controller it records nothing itself: the workers that ran the tests
    send their whole view (outcomes and files together) at the end, so a worker that
    crashed leaves its tests out rather than half in.
    """

    def __init__(self, config: pytest.Config, engine: Session, collector: UsageCollector) -> None:
        self.engine = engine
        self.collector = collector
        self.controller = config.pluginmanager.has_plugin("dsession")

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.collector.note_deselected(item.nodeid for item in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.controller:
            return
        self.collector.note_collected(item.nodeid for item in session.items)
        if session.testsfailed:  # nothing ran yet: these are collection errors
            self.collector.note_collection_errors(session.testsfailed)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if not self.controller:
            self.collector.note_start(nodeid, self.engine.stats.passed_through)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.controller:
            self.collector.note_report(report.nodeid, report.when, report.outcome)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if not self.controller:
            passed_through = self.engine.stats.passed_through
            self.collector.note_finish(nodeid, passed_through, self.engine.mode_for(nodeid))


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    engine = config.stash.get(SESSION_KEY, None)
    if engine is None:
        return
    collector = config.stash[USAGE_KEY] = UsageCollector()
    config.pluginmanager.register(_UsageTracker(config, engine, collector), "hashreplay-usage")


def _partial_reasons(session: pytest.Session) -> list[str]:
    """Why this run is not the full suite, as far as the command line and the run tell.

    Anything that selects or skips tests counts: paths or node ids as arguments, a run from
    a subdirectory without `testpaths`, `-k`, `-m`, `--lf`, `--sw`, `--deselect`,
    `--ignore(-glob)`, `--collect-only`, and a run that stopped or failed to start. (The
    collector adds deselection, collection errors and tests that never ran.)
    """
    config = session.config
    reasons: list[str] = []
    source = config.args_source
    if source is pytest.Config.ArgsSource.ARGS:
        reasons.append("paths or node ids given")
    elif (
        source is pytest.Config.ArgsSource.INVOCATION_DIR
        and config.invocation_params.dir != config.rootpath
    ):
        reasons.append(f"run from {config.invocation_params.dir}, not the root")
    for option, label in (
        ("keyword", "-k"),
        ("markexpr", "-m"),
        ("lf", "--lf"),
        ("stepwise", "--sw"),
        ("stepwise_skip", "--sw-skip"),
        ("deselect", "--deselect"),
        ("ignore", "--ignore"),
        ("ignore_glob", "--ignore-glob"),
        ("collectonly", "--collect-only"),
    ):
        value = config.getoption(option, None)
        if value:
            reasons.append(label if value is True else f"{label} {value!r}")
    if session.shouldstop:
        reasons.append(f"stopped early: {session.shouldstop}")
    if session.shouldfail:
        reasons.append(f"stopped: {session.shouldfail}")
    status = session.exitstatus
    if status in (
        pytest.ExitCode.INTERRUPTED,
        pytest.ExitCode.INTERNAL_ERROR,
        pytest.ExitCode.USAGE_ERROR,
        pytest.ExitCode.NO_TESTS_COLLECTED,
    ):
        reasons.append(f"exit status {pytest.ExitCode(status).name}")
    return reasons


def _finish_usage(session: pytest.Session) -> None:
    """Workers hand their view to the controller; the controller (or the only process)
    writes the run's usage log and, with `--hashreplay-prune`, prunes."""
    config = session.config
    engine = config.stash.get(SESSION_KEY, None)
    collector = config.stash.get(USAGE_KEY, None)
    if engine is None or collector is None:
        return
    root = engine.config.root
    collector.add_files(engine.usage, root)
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        piece = collector.piece.model_dump(mode="json")
        workeroutput["hashreplay_usage"] = engine.seen_secrets.scrubber.value(piece)
        return
    run = collector.finish(root=root, mode=engine.config.mode, reasons=_partial_reasons(session))
    lines: list[str] = []
    try:
        write_usage(run, root, engine.seen_secrets.scrubber)
    except OSError as exc:
        lines.append(f"hashreplay: could not write the usage log under {root}: {exc}")
    if config.getoption("hashreplay_prune"):
        lines.extend(_prune(engine, run))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and lines:
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line)


def _prune(engine: Session, run: RunUsage) -> list[str]:
    root = engine.config.root
    result = prune_project(engine.config, run, dry_run=False)
    lines = [
        f"hashreplay: {exc.path}: unreadable: {exc.problem}; skipped, left unchanged"
        for exc in result.unreadable
    ]
    pruned = [u for u in result.unused if u.path not in result.failed]
    lines.append(f"hashreplay: pruned {len(pruned)} unused recordings (of {result.total})")
    lines.extend(f"  {relative(u.path, root)} ({u.reason})" for u in pruned)
    lines.extend(
        f"hashreplay: cannot delete {relative(path, root)}: {why}"
        for path, why in result.failed.items()
    )
    if not run.full_suite:
        lines.append(
            "hashreplay: not the full suite (" + "; ".join(run.partial_reasons) + "): only "
            "recordings of tests that ran to completion were considered"
        )
    return lines


def _merge_worker_usage(node: Any) -> None:
    collector = node.config.stash.get(USAGE_KEY, None)
    if collector is None:
        return
    data = getattr(node, "workeroutput", {}).get("hashreplay_usage")
    if data is None:
        worker = getattr(getattr(node, "gateway", None), "id", "?")
        collector.note(f"worker {worker} ended without reporting its usage")
    else:
        collector.merge_worker(data)
