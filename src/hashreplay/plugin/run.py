"""The plugin's one state object: everything a pytest run of an opted-in project holds, and
the hooks that use it (as syrupy's `SnapshotSession`).

It exists only in a project that opted in (docs/design.md §16 Activation). The hooks in
`plugin/__init__.py` each hand off to the method of the same name here; they stay in the
module so that they keep the module's place among pytest's plugins (a miss fails a test
after `xfail` has had its say, conftest wrappers see the failed report). Per test it does no
more than set the test id context and hand the test's markers to the engine. pytest-xdist:
each worker sends its counts, usage and unrecorded connections in `workeroutput`; the
controller adds them up in `testnodedown`, both below.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from hashreplay import adapters
from hashreplay.core.config import Config
from hashreplay.core.constants import FIXTURE_MARK
from hashreplay.core.errors import ConfigError, RecordingError, RecordingWriteError, ReplayFailure
from hashreplay.core.keys import process_test_id, set_process_test_id, test_context
from hashreplay.core.modes import Mode
from hashreplay.engine.lifecycle import Placeholders
from hashreplay.engine.session import Session, Stats
from hashreplay.engine.usage import UsageCollector
from hashreplay.plugin.markers import MARKER, apply_markers, report_leftovers, report_stale
from hashreplay.plugin.usage import UsageTracker, finish_usage, merge_worker_piece, worker_piece

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
    """The state of one pytest run of an opted-in project, and the hooks that use it."""

    def __init__(self, config: pytest.Config, settings: Config, *, has_table: bool) -> None:
        self.config = config
        # write-behind: a record-mode call costs no disk latency; flushed at session end
        self.session = Session(settings, write_behind=True)
        self.placeholders = Placeholders(settings)
        #: whether the project opted in with `[tool.hashreplay]` (else only through a mode)
        self.has_table = has_table
        #: the counts pytest-xdist workers reported (this process's are the session's own)
        self.worker_stats = Stats()
        #: connections that nothing recorded, reported by workers (label -> openers)
        self.worker_unrecorded: dict[str, set[str]] = {}
        #: recorded responses that tests left unused (this process and its workers)
        self.unconsumed = 0
        #: stale recordings tests used, a summary line each (this process and its workers)
        self.stale: list[str] = []
        #: which tests ran and which files each used; made when the session starts
        self.usage: UsageCollector | None = None
        #: whether this run wrote `.hashreplay/drift.json` (a drift run's controller)
        self.drift_written = False
        if config.getoption("hashreplay_drift", False):
            self.session.drift = drift_check(config, self.session)

    # --- start and end --------------------------------------------------------------------

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

    # --- per test ---------------------------------------------------------------------------

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
            mode = apply_markers(item, self.session, item.get_closest_marker(MARKER))
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

    # --- end of the run ---------------------------------------------------------------------

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
                self.drift_written = finish_drift(session, self.session)

    def _flush_recordings(self, session: pytest.Session) -> None:
        """Every recording of the run on disk before usage is written or anything is
        pruned; a write that failed (disk full, no permission) fails the run, naming the
        file."""
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
        return {
            "stats": self.session.stats.as_dict(),
            "unconsumed": self.unconsumed,
            "stale": self.stale,
            "unrecorded": {
                label: sorted(openers)
                for label, openers in self.session.connections.unrecorded.items()
            },
            "usage": worker_piece(self.session, self.usage),
            "drift": None if self.session.drift is None else self.session.drift.as_dict(),
        }

    def testnodedown(self, node: Any) -> None:
        """pytest-xdist: add a finished worker's state to the controller's."""
        sent: dict[str, Any] = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT) or {}
        if sent.get("stats"):
            self.worker_stats.merge(Stats(**sent["stats"]))
        self.unconsumed += sent.get("unconsumed", 0)
        self.stale += sent.get("stale", [])
        for label, openers in sent.get("unrecorded", {}).items():
            self.worker_unrecorded.setdefault(label, set()).update(openers)
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
        terminalreporter.write_line(line)
        connections = self.session.connections
        for label, openers in self.worker_unrecorded.items():
            connections.unrecorded.setdefault(label, set()).update(openers)
        unrecorded = connections.summary()
        if unrecorded:
            terminalreporter.write_line(f"hashreplay: {unrecorded}", yellow=True)
        if self.stale:  # docs/recordings.md, "Age"
            terminalreporter.write_line(
                f"hashreplay: {len(self.stale)} recording(s) older than max_age used:",
                yellow=True,
            )
            for line in sorted(self.stale):
                terminalreporter.write_line(f"  {line}", yellow=True)
        if self.session.drift is not None:
            drift_summary(terminalreporter, self.session, written=self.drift_written)
        if not self.has_table and settings.mode in (Mode.RECORD, Mode.RECORD_IF_MISSING):
            terminalreporter.write_line(INIT_HINT, yellow=True)


def fixture_test_id(fixturedef: pytest.FixtureDef[Any]) -> str:
    """The id a class-, module-, package- or session-scoped fixture records under: its own,
    so its calls do not belong to whichever test happened to set it up first (with `-k`,
    another test would, and replay would miss). Its file part names where it is defined, so
    its recordings sit in that directory's `recordings/`."""
    base = fixturedef.baseid
    if ".py" not in base:
        base = f"{base}/conftest.py" if base else "conftest.py"
    return f"{base}{FIXTURE_MARK}{fixturedef.argname}"


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
    from hashreplay.engine.drift import DriftCheck, keys_problem  # drift runs only

    settings = hr.config
    if settings.mode is Mode.LIVE:
        raise ConfigError(
            "--hashreplay-drift compares live answers with recordings, and live mode looks "
            "at none: run it in replay mode (unset INFERENCE_MODE / --inference-mode)"
        )
    problem = keys_problem(settings.replay_env, os.environ)
    if problem is not None:
        raise ConfigError(problem)
    return DriftCheck(hr)


def finish_drift(session: pytest.Session, hr: Session) -> bool:
    """Write `.hashreplay/drift.json` (not after an interrupted run: a partial result would
    read as a clean one) and fail the run when a test drifted (`drift_fail`)."""
    from hashreplay.engine.drift import write_result

    drift = hr.drift
    assert drift is not None
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        return False
    write_result(hr.config.root, drift.result())
    if drift.drifted and hr.config.drift_fail and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return True


def drift_summary(terminalreporter: Any, hr: Session, *, written: bool) -> None:
    """The drift table (test, endpoint, first differences), or why no result was written."""
    from hashreplay.engine.drift import drift_path, render

    drift = hr.drift
    assert drift is not None
    shown = os.path.relpath(drift_path(hr.config.root), hr.config.root)
    if not written:
        terminalreporter.write_line(
            f"hashreplay drift: the run was interrupted, so {shown} was not written "
            "(a partial result would hide what was not checked); run it again",
            yellow=True,
        )
        return
    result = drift.result()
    for i, line in enumerate(render(result, where=shown)):
        terminalreporter.write_line(line, red=drift.drifted and i == 0, bold=i == 0)
    if drift.drifted and not hr.config.drift_fail:
        terminalreporter.write_line(
            "hashreplay drift: drift_fail = false, so drift does not fail this run"
        )
