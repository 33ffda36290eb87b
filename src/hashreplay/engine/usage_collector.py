"""One process's view of a pytest run for the usage log, collected into its pydantic models.

Every run feeds a `UsageCollector` and writes `.hashreplay/usage.json` at its end. The
collector fills the log's own models (`hashreplay.engine.usage_log`: `UsagePiece`,
`TestUsage`, `RunUsage`), so the log has one definition; a test's entry is made with
`model_construct` (its values come from pytest's hooks, not from a file), which keeps the
per-test cost to setting a few attributes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hashreplay.core.mode import Mode
from hashreplay.engine.usage_format import PHASES, relative
from hashreplay.engine.usage_log import RunUsage, TestUsage, UsagePiece


class UsageCollector:
    """Collects one process's view of a run; fed by the pytest plugin's hooks."""

    def __init__(self) -> None:
        #: This process's view; `collected` holds the tests selected to run (the finished
        #: log adds the deselected ones).
        self.piece = UsagePiece()
        self._passthrough_at_start: dict[str, int] = {}

    @property
    def tests(self) -> dict[str, TestUsage]:
        return self.piece.tests

    def piece_json(self) -> dict[str, Any]:
        """An xdist worker's report: its piece as JSON."""
        return self.piece.model_dump(mode="json")

    def note_collected(self, test_ids: Iterable[str]) -> None:
        self.piece.collected = sorted({*self.piece.collected, *test_ids})

    def note_deselected(self, test_ids: Iterable[str]) -> None:
        self.piece.deselected = sorted({*self.piece.deselected, *test_ids})

    def note_collection_errors(self, count: int) -> None:
        self.piece.collection_errors += count

    def note(self, reason: str) -> None:
        if reason not in self.piece.notes:
            self.piece.notes.append(reason)

    def _test(self, test_id: str) -> TestUsage:
        found = self.piece.tests.get(test_id)
        if found is None:
            found = self.piece.tests[test_id] = TestUsage.model_construct(files=[])
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
                self.piece.outside_tests = sorted({*self.piece.outside_tests, *names})
            else:
                test = self.tests[test_id]
                test.files = sorted({*test.files, *names})

    def merge_worker(self, data: Any) -> None:
        """Add what a pytest-xdist worker sent (`piece_json()`)."""
        try:
            other = UsagePiece.model_validate(data)
        except ValidationError:
            self.note("a worker sent an unreadable usage report")
            return
        self.piece.merge(other)

    def finish(self, *, root: Path, mode: Mode, reasons: Iterable[str]) -> RunUsage:
        """The run as a whole; `reasons` are what the plugin found partial in the options.

        `collected` of the result holds every test that exists (selected or deselected).
        """
        piece = self.piece
        why = [*reasons, *piece.notes]
        if piece.deselected:
            why.append(f"deselected: {_tests(len(piece.deselected))}")
        if piece.collection_errors:
            why.append(f"collection errors: {piece.collection_errors}")
        if not piece.collected:
            why.append("no tests collected")
        not_run = [t for t in piece.collected if not self._ran(t)]
        if not_run:
            why.append(f"did not run: {_tests(len(not_run))} (stopped early, or a worker crashed)")
        # the run shares no state with the collector (a later `finish` starts afresh)
        fields: dict[str, Any] = {name: getattr(piece, name) for name in UsagePiece.model_fields}
        fields.update(
            collected=sorted({*piece.collected, *piece.deselected}),
            deselected=[*piece.deselected],
            tests={test_id: test.copied() for test_id, test in piece.tests.items()},
            outside_tests=[*piece.outside_tests],
            notes=[*piece.notes],
        )
        return RunUsage(
            **fields,
            root=str(root),
            finished=time.time(),
            mode=mode.value,
            full_suite=not why,
            partial_reasons=why,
        )

    def _ran(self, test_id: str) -> bool:
        test = self.piece.tests.get(test_id)
        return test is not None and test.setup is not None


def _tests(count: int) -> str:
    return f"{count} test" if count == 1 else f"{count} tests"
