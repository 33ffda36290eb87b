"""The usage log (`.hashreplay/usage.json`) and `--hashreplay-prune` for the pytest plugin:
which tests ran to completion and which recording files each used, merged across xdist
workers (`plugin/run.py` carries each worker's piece to the controller), written once by the
controller (or the only process).

`collect_test_ids`: which test ids the project's suite has, for `hashreplay import vcr`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hashreplay.engine.session import Session
from hashreplay.engine.usage import RunUsage, UsageCollector, relative, scrubbed_usage, write_usage


class UsageTracker:
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
        # a miss report names a recording of a test id this run does not know (a renamed
        # test's) with the `hashreplay mv` command (docs/design.md §14)
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


def worker_piece(engine: Session, collector: UsageCollector) -> Any:
    """A pytest-xdist worker's whole view (outcomes and files), for its controller."""
    collector.add_files(engine.usage, engine.config.root)
    return engine.seen_secrets.scrubber.value(collector.piece_json())


def merge_worker_piece(collector: UsageCollector, piece: Any, worker: str) -> None:
    """Add a finished worker's view to the controller's; a worker that sent none (it
    crashed) makes the run partial, so prune spares its tests."""
    if piece is None:
        collector.note(f"worker {worker} ended without reporting its usage")
    else:
        collector.merge_worker(piece)


def finish_usage(session: pytest.Session, engine: Session, collector: UsageCollector) -> None:
    """The controller (or the only process) writes the run's usage log and, with
    `--hashreplay-prune`, prunes."""
    config = session.config
    root = engine.config.root
    collector.add_files(engine.usage, root)
    run = collector.finish(root=root, mode=engine.config.mode, reasons=_partial_reasons(session))
    # test ids as recordings store them (docs/design.md §7): written, and pruned with
    run = scrubbed_usage(run, engine.seen_secrets.scrubber, engine.redactor.text)
    lines: list[str] = []
    try:
        write_usage(run, root)
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
    from hashreplay.engine.prune import (  # only with --hashreplay-prune
        kept_line,
        prune_project,
    )

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
        f"hashreplay: cannot delete {_unresolved(path, root)}: {why}"
        for path, why in result.failed.items()
    )
    lines.extend(
        f"hashreplay: will not touch {_unresolved(path, root)}: {why}"
        for path, why in result.refused.items()
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
    """`path` relative to the root without following links: a symlink is named as the
    link, never as where it leads."""
    for base in (root, root.resolve()):
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            continue
    return str(path)


class _CollectProbe:
    """Stands in for the hashreplay plugin in a `--collect-only` run that must write nothing
    (no usage log, no placeholders): registers the markers and hookspecs the project may use
    (so `--strict-markers` and its conftest hooks still load) and keeps the collected ids."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.rootdir = ""

    def pytest_addhooks(self, pluginmanager: pytest.PytestPluginManager) -> None:
        from hashreplay.plugin import markers

        pluginmanager.add_hookspecs(markers)

    def pytest_configure(self, config: pytest.Config) -> None:
        from hashreplay.plugin.markers import MARKER_LINES, VCR_MARKER_LINE

        for line in MARKER_LINES:
            config.addinivalue_line("markers", line)
        if not config.pluginmanager.has_plugin("recording"):
            config.addinivalue_line("markers", VCR_MARKER_LINE)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ids = [item.nodeid for item in session.items]
        self.rootdir = str(session.config.rootpath)


def collect_test_ids(out: str) -> int:
    """Collect the suite of the current directory's project with the hashreplay plugin off
    and write `{"rootdir", "ids", "exit"}` to `out` (run by `hashreplay import vcr` in a
    subprocess: the project's conftest files never load in the CLI's process)."""
    probe = _CollectProbe()
    args = ["--collect-only", "-q", "-p", "no:hashreplay", "-p", "no:cacheprovider"]
    code = pytest.main(args, plugins=[probe])
    result = {"rootdir": probe.rootdir, "ids": probe.ids, "exit": int(code)}
    Path(out).write_text(json.dumps(result), encoding="utf-8")
    return 0
