"""One process's view of a pytest run for the usage log, kept without pydantic.

Every run feeds a `UsageCollector` and writes `.hashreplay/usage.json` at its end, so this
module is on every run's path: plain classes, the log written as the JSON dict that
`hashreplay.engine.usage_log.RunUsage` reads back (its pydantic models, which cost a run
several milliseconds to build, load only to read a log, to merge an xdist worker's report
or to prune).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.core.mode import Mode
from hashreplay.engine.usage_format import (
    PHASES,
    USAGE_VERSION,
    completed,
    outcome,
    relative,
)

if TYPE_CHECKING:
    from hashreplay.engine.usage_log import RunUsage, TestUsage, UsagePiece


class TestRecord:
    """One test as the collector sees it (the fields of `usage_log.TestUsage`)."""

    __test__ = False  # not a pytest test class
    __slots__ = ("call", "files", "mode", "passthrough", "setup", "teardown")

    def __init__(self) -> None:
        self.setup: str | None = None
        self.call: str | None = None
        self.teardown: str | None = None
        self.mode: str | None = None
        self.passthrough = False
        self.files: list[str] = []

    @classmethod
    def of(cls, test: TestUsage) -> TestRecord:
        record = cls()
        record.setup, record.call, record.teardown = test.setup, test.call, test.teardown
        record.mode, record.passthrough, record.files = test.mode, test.passthrough, [*test.files]
        return record

    def as_json(self) -> dict[str, Any]:
        """What `TestUsage.model_dump(mode="json")` gives, computed fields included."""
        return {
            "setup": self.setup,
            "call": self.call,
            "teardown": self.teardown,
            "mode": self.mode,
            "passthrough": self.passthrough,
            "files": [*self.files],
            "completed": completed(self.setup, self.call, self.teardown),
            "outcome": outcome(self.setup, self.call, self.teardown),
        }


class UsageCollector:
    """Collects one process's view of a run; fed by the pytest plugin's hooks."""

    def __init__(self) -> None:
        self.started = time.time()
        #: Tests selected to run (the finished log adds the deselected ones).
        self.collected: list[str] = []
        self.deselected: list[str] = []
        self.collection_errors = 0
        self.tests: dict[str, TestRecord] = {}
        #: Files used by requests made outside any test (session start-up, threads).
        self.outside_tests: list[str] = []
        #: Why this run may not be the full suite, beyond what the options say.
        self.notes: list[str] = []
        self._passthrough_at_start: dict[str, int] = {}

    @property
    def piece(self) -> UsagePiece:
        """This process's view as the pydantic model an xdist worker's report is read into."""
        from hashreplay.engine.usage_log import UsagePiece

        return UsagePiece.model_validate(self.piece_json())

    def piece_json(self) -> dict[str, Any]:
        """What `UsagePiece.model_dump(mode="json")` gives: an xdist worker's report."""
        return {
            "started": self.started,
            "collected": [*self.collected],
            "deselected": [*self.deselected],
            "collection_errors": self.collection_errors,
            "tests": {test_id: test.as_json() for test_id, test in self.tests.items()},
            "outside_tests": [*self.outside_tests],
            "notes": [*self.notes],
        }

    def note_collected(self, test_ids: Iterable[str]) -> None:
        self.collected = sorted({*self.collected, *test_ids})

    def note_deselected(self, test_ids: Iterable[str]) -> None:
        self.deselected = sorted({*self.deselected, *test_ids})

    def note_collection_errors(self, count: int) -> None:
        self.collection_errors += count

    def note(self, reason: str) -> None:
        if reason not in self.notes:
            self.notes.append(reason)

    def _test(self, test_id: str) -> TestRecord:
        found = self.tests.get(test_id)
        if found is None:
            found = self.tests[test_id] = TestRecord()
        return found

    def note_start(self, test_id: str, passed_through: int) -> None:
        self._passthrough_at_start[test_id] = passed_through

    def note_report(self, test_id: str, when: str, outcome: str) -> None:
        if when in PHASES:
            setattr(self._test(test_id), when, outcome)

    def note_finish(self, test_id: str, passed_through: int, mode: Mode) -> None:
        test = self._test(test_id)
        test.mode = mode.value
        start = self._passthrough_at_start.pop(test_id, passed_through)
        test.passthrough = test.passthrough or passed_through > start or not mode.intercepts

    def add_files(self, usage: Mapping[str | None, Iterable[Path]], root: Path) -> None:
        """Take the engine's `Session.usage` (test id → files it used). The engine's paths
        are resolved already (the store resolves its directories once), so names come from
        string operations against the resolved root, not a `resolve` per file."""
        prefix = str(root.resolve()) + os.sep
        cut = len(prefix)

        def name(path: Path) -> str:
            text = str(path)
            if text.startswith(prefix):
                return text[cut:].replace(os.sep, "/")
            return relative(path, root)

        for test_id, paths in usage.items():
            names = {name(p) for p in paths}
            if test_id is None or test_id not in self.tests:
                # Outside any test, or a test id a server received that pytest did not run
                # here: nobody's unused files, so always counted as used.
                self.outside_tests = sorted({*self.outside_tests, *names})
            else:
                test = self.tests[test_id]
                test.files = sorted({*test.files, *names})

    def merge_worker(self, data: Any) -> None:
        """Add what a pytest-xdist worker sent (`piece_json()`)."""
        from pydantic import ValidationError

        from hashreplay.engine.usage_log import UsagePiece

        try:
            other = UsagePiece.model_validate(data)
        except ValidationError:
            self.note("a worker sent an unreadable usage report")
            return
        self._merge(other)

    def _merge(self, other: UsagePiece) -> None:
        """`UsagePiece.merge`'s rules (one place for them), then its result taken back."""
        merged = self.piece
        merged.merge(other)
        self.started, self.collection_errors = merged.started, merged.collection_errors
        self.collected, self.deselected = merged.collected, merged.deselected
        self.tests = {test_id: TestRecord.of(test) for test_id, test in merged.tests.items()}
        self.outside_tests, self.notes = merged.outside_tests, merged.notes

    def finish_json(self, *, root: Path, mode: Mode, reasons: Iterable[str]) -> dict[str, Any]:
        """The run as a whole, as `RunUsage.model_dump(mode="json")` gives it; `reasons` are
        what the plugin found partial in the options.

        `collected` of the result holds every test that exists (selected or deselected).
        """
        why = [*reasons, *self.notes]
        if self.deselected:
            why.append(f"deselected: {_tests(len(self.deselected))}")
        if self.collection_errors:
            why.append(f"collection errors: {self.collection_errors}")
        if not self.collected:
            why.append("no tests collected")
        not_run = [t for t in self.collected if not self._ran(t)]
        if not_run:
            why.append(f"did not run: {_tests(len(not_run))} (stopped early, or a worker crashed)")
        return {
            **self.piece_json(),
            "collected": sorted({*self.collected, *self.deselected}),
            "version": USAGE_VERSION,
            "root": str(root),
            "finished": time.time(),
            "mode": mode.value,
            "full_suite": not why,
            "partial_reasons": why,
        }

    def finish(self, *, root: Path, mode: Mode, reasons: Iterable[str]) -> RunUsage:
        """`finish_json` as the pydantic model that pruning reads."""
        from hashreplay.engine.usage_log import RunUsage

        return RunUsage.model_validate(self.finish_json(root=root, mode=mode, reasons=reasons))

    def _ran(self, test_id: str) -> bool:
        test = self.tests.get(test_id)
        return test is not None and test.setup is not None


def _tests(count: int) -> str:
    return f"{count} test" if count == 1 else f"{count} tests"
