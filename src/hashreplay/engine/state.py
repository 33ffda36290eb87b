"""Per-test state: each test's mode, run id, identical-request sequences, the ids it received,
its misses, and the files it used; and the run's counters.

One lock guards all of it: adapters call in from threads and event loops at once.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from hashreplay.core.errors import ReplayFailure
from hashreplay.core.mode import Mode
from hashreplay.core.normalise import IdRegistry
from hashreplay.core.recording import RecordedResponse
from hashreplay.engine.options import TestOptions


class Stats:
    __slots__ = ("missed", "not_recorded", "passed_through", "recorded", "replayed")

    def __init__(
        self,
        replayed: int = 0,
        recorded: int = 0,
        missed: int = 0,
        passed_through: int = 0,
        not_recorded: int = 0,
    ) -> None:
        self.replayed = replayed
        self.recorded = recorded
        self.missed = missed
        self.passed_through = passed_through
        #: calls of a recording mode that got no HTTP response, so wrote nothing
        #: (docs/design.md, "Only answers are recorded")
        self.not_recorded = not_recorded

    def merge(self, other: Stats) -> None:
        self.replayed += other.replayed
        self.recorded += other.recorded
        self.missed += other.missed
        self.passed_through += other.passed_through
        self.not_recorded += other.not_recorded

    def as_dict(self) -> dict[str, int]:
        return {
            "replayed": self.replayed,
            "recorded": self.recorded,
            "missed": self.missed,
            "passed_through": self.passed_through,
            "not_recorded": self.not_recorded,
        }


class RecordedSequence:
    """The responses of one hash within one test run, and their id registry."""

    __slots__ = ("calls", "ids", "path", "responses")

    def __init__(self, responses: list[RecordedResponse], ids: IdRegistry, path: Path) -> None:
        self.responses = responses
        self.ids = ids
        self.path = path
        self.calls = 0


class TestState:
    __slots__ = ("id_map", "misses", "mode", "options", "passed_through", "run_id", "sequences")

    def __init__(self, mode: Mode | None = None, run_id: str | None = None) -> None:
        self.mode = mode
        #: identifies this execution of the test (sent to servers under test)
        self.run_id = run_id  # made on first use: most tests never call a server
        self.sequences: dict[str, RecordedSequence] = {}
        #: original → stable ids this test received while recording (never written).
        self.id_map: dict[str, str] = {}
        self.misses: list[ReplayFailure] = []
        #: scenario options of this test (markers, fault headers)
        self.options = TestOptions()
        #: it sent requests to a server under test, which replays this test's files itself
        self.passed_through = False


class Tests:
    """Every test's state, by test id (None: requests outside any test)."""

    def __init__(self, default_mode: Mode) -> None:
        self.default_mode = default_mode
        self.lock = threading.RLock()
        self.stats = Stats()
        #: recording files each test id used (replayed or wrote), for `hashreplay prune`
        self.usage: dict[str | None, set[Path]] = {}
        self._tests: dict[str | None, TestState] = {}

    def begin(self, test_id: str | None, mode: Mode | None = None) -> None:
        with self.lock:
            self._tests[test_id] = TestState(mode=mode)

    def set_mode(self, test_id: str | None, mode: Mode) -> None:
        with self.lock:
            self.state(test_id).mode = mode

    def mode_for(self, test_id: str | None) -> Mode:
        state = self._tests.get(test_id)
        if state is not None and state.mode is not None:
            return state.mode
        return self.default_mode

    def run_id_for(self, test_id: str | None) -> str:
        with self.lock:
            state = self.state(test_id)
            if state.run_id is None:
                state.run_id = uuid.uuid4().hex
            return state.run_id

    def enter_run(self, test_id: str | None, run_id: str | None) -> None:
        """A new run id of a test starts it afresh (its identical-request counters and id
        mappings), as `begin` does in-process."""
        if run_id is None:
            return
        with self.lock:
            state = self._tests.get(test_id)
            if state is None or state.run_id != run_id:
                self._tests[test_id] = TestState(run_id=run_id)

    def get(self, test_id: str | None) -> TestState | None:
        return self._tests.get(test_id)

    def end(self, test_id: str | None) -> list[ReplayFailure]:
        """Forget a test's state; returns the misses it had."""
        with self.lock:
            state = self._tests.pop(test_id, None)
        return state.misses if state else []

    def take_misses(self, test_id: str | None) -> list[ReplayFailure]:
        with self.lock:
            state = self._tests.get(test_id)
            if state is None or not state.misses:
                return []
            misses, state.misses = state.misses, []
            return misses

    def state(self, test_id: str | None) -> TestState:
        """The state of a test, made on first use (callers hold the lock)."""
        state = self._tests.get(test_id)
        if state is None:
            state = self._tests[test_id] = TestState()
        return state

    def id_map(self, test_id: str | None) -> dict[str, str] | None:
        """A copy of the ids this test received while recording, or None."""
        state = self._tests.get(test_id)
        return dict(state.id_map) if state is not None and state.id_map else None

    def recorded_count(self, test_id: str | None, hash_hex: str) -> int:
        with self.lock:
            state = self._tests.get(test_id)
            seq = state.sequences.get(hash_hex) if state else None
            return len(seq.responses) if seq else 0

    def use(self, test_id: str | None, *paths: Path) -> None:
        """Note files a test used (callers hold the lock)."""
        self.usage.setdefault(test_id, set()).update(paths)

    def touch(self, test_id: str | None, limit: int) -> int:
        """For long-lived servers, which never see a test end: mark `test_id` as just used
        and forget the least recently used test states beyond `limit` (with the files noted
        for them); returns how many were forgotten. A test that comes back after that starts
        again from its first recorded response, as a new run does."""
        evicted = 0
        with self.lock:
            tests = self._tests
            state = tests.pop(test_id, None)
            if state is not None:
                tests[test_id] = state  # dicts keep insertion order: the end is the newest
            while len(tests) > limit:
                oldest = next(iter(tests))
                if oldest == test_id:
                    break
                del tests[oldest]
                self.usage.pop(oldest, None)
                evicted += 1
            if len(self.usage) > limit:  # files of tests that never had a state
                excess = len(self.usage) - limit
                for stale in [t for t in self.usage if t not in tests][:excess]:
                    del self.usage[stale]
        return evicted
