"""`PluginRun`: what a pytest run of an opted-in project holds (docs/design.md §16 Activation)
and writes at the end (the usage log `.hashreplay/usage.json`, `--hashreplay-prune`, drift).
pytest-xdist: each worker sends its state in `workeroutput`; the controller adds it up."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hashreplay import adapters
from hashreplay.core.config import Config
from hashreplay.core.constants import FIXTURE_MARK
from hashreplay.core.context import process_test_id, set_process_test_id, test_context
from hashreplay.core.errors import ConfigError, RecordingError, RecordingWriteError, ReplayFailure
from hashreplay.core.modes import Mode
from hashreplay.engine.placeholders import Placeholders
from hashreplay.engine.session import Session, Stats
from hashreplay.engine.usage import (
    RunUsage,
    UsageCollector,
    relative,
    usage_json,
    write_usage_json,
)
from hashreplay.plugin.markers import MARKER, apply_markers, report_leftovers, report_stale

if TYPE_CHECKING:
    from hashreplay.engine.drift import DriftCheck

#: The `workeroutput` key a pytest-xdist worker sends its state under.
_WORKER_OUTPUT = "hashreplay"

#: What a recording run in a project without `[tool.hashreplay]` ends with.
INIT_HINT = (
    "hashreplay: this project has no [tool.hashreplay] table in pyproject.toml, so plain "
    "`pytest` will not replay these recordings: run `hashreplay init` once"
)


class PluginRun:
    """One pytest run's state. Each hook in `plugin/__init__.py` hands off to the method of its
    name; the hooks stay there to keep that module's place among pytest's plugins (a miss
    fails a test after `xfail` has had its say, conftest wrappers see the failed report)."""

    def __init__(self, config: pytest.Config, settings: Config, *, has_table: bool) -> None:
        self.config = config
        self.answers_recording = False  # pytest-recording's names (plugin/recording.py)
        self.session = Session(settings, write_behind=True)  # no disk latency per call
        if hasattr(config, "workerinput"):  # an xdist worker replays a share of a directory:
            self.session.store.ahead = None  # the rest, read ahead, would only be held
        self.placeholders = Placeholders(settings)
        self.has_table = has_table  # opted in with [tool.hashreplay], not only through a mode
        self.worker_stats = Stats()  # what xdist workers counted (this process: the session's)
        self.unconsumed = 0  # responses tests left unused (this process's and its workers')
        self.stale: list[str] = []  # a summary line per stale recording used (and workers')
        self.usage: UsageCollector | None = None  # tests run, files used; made at session start
        self.drift_written = False  # whether it wrote .hashreplay/drift.json (drift controller)
        if config.getoption("hashreplay_drift", False):
            self.session.drift = drift_check(config, self.session)

    def start(self) -> None:
        """Intercept: sweep what killed writers left, placeholders, adapters, guard. A
        ConfigError (a bad `callables` entry) leaves nothing changed."""
        self.session.store.sweep_temp_files()
        self._placeholders(self.session.config.mode)
        try:
            adapters.activate(self.session)
        except ConfigError:
            self.placeholders.remove()
            raise

    def unconfigure(self) -> None:
        if adapters.active_session() is self.session:
            adapters.deactivate()
        with contextlib.suppress(RecordingError):  # reported at session finish already
            self.session.close()
        self.placeholders.remove()

    def sessionstart(self, session: pytest.Session) -> None:
        self.usage = UsageCollector()
        tracker = UsageTracker(session.config, self.session, self.usage)
        session.config.pluginmanager.register(tracker, "hashreplay-usage")

    def runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        session = self.session
        session.begin_test(item.nodeid)
        set_process_test_id(item.nodeid)
        try:
            with test_context(item.nodeid):
                return (yield)
        finally:
            set_process_test_id(None)
            if session.drift is not None:
                session.drift.end_test(item.nodeid)
            session.end_test(item.nodeid)
            self._placeholders(session.config.mode)

    def fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Generator[None, object, object]:
        if fixturedef.scope == "function":
            return (yield)
        fixture_id = fixture_test_id(fixturedef)
        self.session.begin_test(fixture_id)
        outer = process_test_id()
        set_process_test_id(fixture_id)
        try:
            with test_context(fixture_id):
                result = yield
        finally:
            set_process_test_id(outer)
        misses = self.session.take_misses(fixture_id)
        if misses:
            # fail the setup of the test that needed the fixture, with the report
            pytest.fail("\n\n".join(miss.report for miss in misses), pytrace=False)
        return result

    def runtest_setup(self, item: pytest.Item) -> None:
        try:
            marker = item.get_closest_marker(MARKER)
            answers = self.answers_recording
            mode = apply_markers(item, self.session, marker, answers_recording=answers)
        except ConfigError as exc:
            raise pytest.UsageError(f"hashreplay: {item.nodeid}: {exc}") from None
        if mode is not None:
            self.session.set_test_mode(item.nodeid, mode)
            # placeholder keys only while replaying: a test marked record uses the real ones
            self._placeholders(mode)

    def _placeholders(self, mode: Mode) -> None:
        """Keyless replay's placeholders for `mode`; never in a drift run (real keys only)."""
        self.placeholders.apply(Mode.LIVE if self.session.drift is not None else mode)

    def runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> pytest.TestReport:
        """The report as pytest made it, failed for a miss, checked for leftovers."""
        misses = self.session.take_misses(item.nodeid)
        if misses:
            text = "\n\n".join(miss.report for miss in misses)
            own = call.excinfo.value if call.excinfo is not None else None
            if report.failed and report.longrepr is not None and not isinstance(own, ReplayFailure):
                text += (
                    "\n\n--- the test's own failure, likely caused by the miss ---\n"
                    f"{report.longrepr}"
                )
            report.outcome = "failed"
            report.longrepr = text
        if call.when == "call" and self.session.drift is None:  # drift reports leftovers
            self.unconsumed += report_leftovers(item, self.session, report)
            self.stale += report_stale(item, self.session, report)
        return report

    def sessionfinish(self, session: pytest.Session) -> None:
        self._flush_recordings(session)
        if self.usage is None:  # the session never started
            return
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # a pytest-xdist worker: the controller reports
            workeroutput[_WORKER_OUTPUT] = self._worker_output()
        else:
            finish_usage(session, self.session, self.usage)
            if self.session.drift is not None:
                self.drift_written = finish_drift(session, self.session.drift, self.session.config)

    def _flush_recordings(self, session: pytest.Session) -> None:
        """Every recording on disk before usage is written or anything pruned; a write that
        failed (disk full, no permission) fails the run, naming the file."""
        hr = self.session
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

    def _worker_output(self) -> dict[str, Any]:
        """What a pytest-xdist worker sends its controller (read by `testnodedown`)."""
        assert self.usage is not None
        hr = self.session
        self.usage.add_files(hr.usage, hr.config.root)  # its whole view: outcomes and files
        return {
            "stats": hr.stats.as_dict(),
            "unconsumed": self.unconsumed,
            "stale": self.stale,
            "unrecorded": {k: sorted(v) for k, v in hr.connections.unrecorded.items()},
            "usage": hr.seen_secrets.scrubber.value(self.usage.piece_json()),
            "drift": None if hr.drift is None else hr.drift.as_dict(),
        }

    def testnodedown(self, node: Any) -> None:
        """pytest-xdist: add a finished worker's state to the controller's."""
        sent: dict[str, Any] = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT) or {}
        if sent.get("stats"):
            self.worker_stats.merge(Stats(**sent["stats"]))
        self.unconsumed += sent.get("unconsumed", 0)
        self.stale += sent.get("stale", [])
        for label, openers in sent.get("unrecorded", {}).items():
            self.session.connections.unrecorded.setdefault(label, set()).update(openers)
        if self.session.drift is not None and sent.get("drift"):
            self.session.drift.merge(sent["drift"])
        if self.usage is not None:
            worker = getattr(getattr(node, "gateway", None), "id", "?")
            merge_worker_piece(self.usage, sent.get("usage"), worker)

    def terminal_summary(self, terminalreporter: Any) -> None:
        settings = self.session.config
        stats = Stats()
        stats.merge(self.session.stats)
        stats.merge(self.worker_stats)
        line = (
            f"hashreplay: {stats.replayed} replayed, {stats.recorded} recorded, "
            f"{stats.missed} missed ({settings.mode.value})"
        )
        if stats.passed_through:
            line += f"; {stats.passed_through} passed through"
        if stats.not_recorded:  # docs/design.md, "Only answers are recorded"
            calls = "call" if stats.not_recorded == 1 else "calls"
            line += f"; {stats.not_recorded} {calls} not recorded: no response"
        if self.unconsumed:
            line += f"; {self.unconsumed} recorded response(s) left unused"
        write = terminalreporter.write_line
        write(line)
        if stats.server_missed:  # docs/server.md, "Server mode: `hashreplay.install()`"
            write(
                f"hashreplay: {stats.server_missed} missed in a server under test (its log "
                "holds each report); to record them, restart the server with "
                "INFERENCE_MODE=record-if-missing in its environment and run the tests again",
                yellow=True,
            )
        unrecorded = self.session.connections.summary()  # workers' merged by testnodedown
        if unrecorded:
            write(f"hashreplay: {unrecorded}", yellow=True)
        if self.stale:  # docs/recordings.md, "Age"
            head = f"hashreplay: {len(self.stale)} recording(s) older than max_age used:"
            for line in [head, *(f"  {stale}" for stale in sorted(self.stale))]:
                write(line, yellow=True)
        if self.session.drift is not None:
            drift_summary(write, self.session.drift, settings, written=self.drift_written)
        if not self.has_table and settings.mode in (Mode.RECORD, Mode.RECORD_IF_MISSING):
            write(INIT_HINT, yellow=True)


def fixture_test_id(fixturedef: pytest.FixtureDef[Any]) -> str:
    """The id a class-, module-, package- or session-scoped fixture records under: its own, not
    that of whichever test set it up first (with `-k`, another would, and replay would miss);
    its file part names where it is defined, so its recordings sit in that `recordings/`."""
    base = fixturedef.baseid
    if ".py" not in base:
        base = f"{base}/conftest.py" if base else "conftest.py"
    return f"{base}{FIXTURE_MARK}{fixturedef.argname}"


# --- the usage log and --hashreplay-prune ---------------------------------------------------


class UsageTracker:
    """Feeds the run's `UsageCollector` from pytest's reporting hooks. A pytest-xdist
    controller records nothing itself: each worker sends its whole view (outcomes and files)
    at the end, so a worker that crashed leaves its tests out rather than half in."""

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
        # a miss report offers `hashreplay mv` for a renamed test's recording (docs/design.md §14)
        piece = self.collector.piece
        self.engine.replayer.known_tests = frozenset((*piece.collected, *piece.deselected))
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


def _partial_reasons(session: pytest.Session) -> list[str]:
    """Why this run is not the full suite, as the command line and the run tell: what selects or
    skips tests (paths or node ids, a run from a subdirectory without `testpaths`, the options
    below), a run that stopped or never started. (The collector adds deselection, collection
    errors, tests that never ran.)"""
    config = session.config
    reasons: list[str] = []
    source, invoked = config.args_source, config.invocation_params.dir
    if source is pytest.Config.ArgsSource.ARGS:
        reasons.append("paths or node ids given")
    elif source is pytest.Config.ArgsSource.INVOCATION_DIR and invoked != config.rootpath:
        reasons.append(f"run from {invoked}, not the root")
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
    status, code = session.exitstatus, pytest.ExitCode
    if status in (code.INTERRUPTED, code.INTERNAL_ERROR, code.USAGE_ERROR, code.NO_TESTS_COLLECTED):
        reasons.append(f"exit status {code(status).name}")
    return reasons


def merge_worker_piece(collector: UsageCollector, piece: Any, worker: str) -> None:
    """Add a finished worker's view to the controller's; a worker that sent none (it
    crashed) makes the run partial, so prune spares its tests."""
    if piece is None:
        collector.note(f"worker {worker} ended without reporting its usage")
    else:
        collector.merge_worker(piece)


def finish_usage(session: pytest.Session, engine: Session, collector: UsageCollector) -> None:
    """Write the usage log and, with `--hashreplay-prune`, prune (xdist: the controller only)."""
    root = engine.config.root
    collector.add_files(engine.usage, root)
    run = collector.finish(root=root, mode=engine.config.mode, reasons=_partial_reasons(session))
    # test ids as recordings store them (docs/design.md §7): written, and pruned with
    data = usage_json(run, engine.seen_secrets.scrubber, engine.redactor.text)
    lines: list[str] = []
    try:
        write_usage_json(data, root)
    except OSError as exc:
        lines.append(f"hashreplay: could not write the usage log under {root}: {exc}")
    if session.config.getoption("hashreplay_prune"):  # read back as `prune` reads the log
        lines.extend(_prune(engine, RunUsage.model_validate(data)))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and lines:
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line)


def _prune(engine: Session, run: RunUsage) -> list[str]:
    from hashreplay.engine.prune import kept_line, prune_project  # only with --hashreplay-prune

    root = engine.config.root
    result = prune_project(engine.config, run, dry_run=False)
    lines = [
        f"hashreplay: {exc.path}: unreadable: {exc.problem}; skipped, left unchanged"
        for exc in result.unreadable
    ]
    pruned = [u for u in result.unused if u.path not in result.failed]
    lines.append(f"hashreplay: pruned {len(pruned)} unused recordings (of {result.total})")
    lines.extend(f"  {relative(u.path, root)} ({u.reason})" for u in pruned)
    for verb, problems in (("cannot delete", result.failed), ("will not touch", result.refused)):
        lines.extend(
            f"hashreplay: {verb} {_unresolved(p, root)}: {why}" for p, why in problems.items()
        )
    if result.kept:
        lines.append("hashreplay: " + kept_line(result.kept))
    if not run.full_suite:
        lines.append(
            "hashreplay: not the full suite (" + "; ".join(run.partial_reasons) + "): only "
            "recordings of tests that ran to completion were considered"
        )
    return lines


def _unresolved(path: Path, root: Path) -> str:
    """`path` relative to the root without following links (a symlink named as the link)."""
    for base in (root, root.resolve()):
        with contextlib.suppress(ValueError):
            return path.relative_to(base).as_posix()
    return str(path)


# --- drift (docs/design.md §15, "Drift") ------------------------------------------------------


def drift_check(config: pytest.Config, hr: Session) -> DriftCheck:
    """A drift run's check, or a ConfigError before any call: with `--hashreplay-prune`
    (a drift run uses no recording as replay would), in `live` mode (no recording is looked
    at), or without a real key (every call would go out with a placeholder)."""
    if config.getoption("hashreplay_prune", False):
        raise ConfigError(
            "--hashreplay-drift and --hashreplay-prune cannot be combined: a drift run "
            "does not replay, so it cannot tell which recordings are unused"
        )
    from hashreplay.engine.drift import DriftCheck, clear_result, keys_problem  # drift only

    settings = hr.config
    if settings.mode is Mode.LIVE:
        raise ConfigError(
            "--hashreplay-drift compares live answers with recordings, and live mode looks "
            "at none: run it in replay mode (unset INFERENCE_MODE / --inference-mode)"
        )
    problem = keys_problem(settings.replay_env, os.environ)
    if problem is not None:
        raise ConfigError(problem)
    clear_result(settings.root)  # an interrupted run must not leave the last one's result
    return DriftCheck(hr)


def finish_drift(session: pytest.Session, drift: DriftCheck, settings: Config) -> bool:
    """Write `.hashreplay/drift.json` (not after an interrupted run: a partial result would
    read as a clean one) and fail the run when a test drifted (`drift_fail`)."""
    from hashreplay.engine.drift import write_result

    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        return False
    write_result(settings.root, drift.result())
    if drift.drifted and settings.drift_fail and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return True


def drift_summary(
    write: Callable[..., None], drift: DriftCheck, settings: Config, *, written: bool
) -> None:
    """The drift table (test, endpoint, first differences), or why no result was written."""
    from hashreplay.engine.drift import drift_path, render

    shown = os.path.relpath(drift_path(settings.root), settings.root)
    if not written:
        write(
            f"hashreplay drift: the run was interrupted, so {shown} was not written "
            "(a partial result would hide what was not checked) and the previous run's was "
            "removed; run it again",
            yellow=True,
        )
        return
    for i, line in enumerate(render(drift.result(), where=shown)):
        write(line, red=drift.drifted and i == 0, bold=i == 0)
    if drift.drifted and not settings.drift_fail:
        write("hashreplay drift: drift_fail = false, so drift does not fail this run")
