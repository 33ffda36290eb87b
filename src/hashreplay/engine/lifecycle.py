"""The per-test half of a session (docs/design.md §11): a test's start, mode and options,
what it left hanging or unused, the misses that fail it, and its end. `Session` is one of
these plus the decision; the plugin, the proxy and `install()` call these per test."""

from __future__ import annotations

from collections.abc import Sequence

from hashreplay.core.config import Config
from hashreplay.core.errors import BodyTooLarge, ReplayFailure
from hashreplay.core.mode import Mode
from hashreplay.core.scenarios import Pace, Unconsumed
from hashreplay.engine.faults import ActiveFault, FaultSpec
from hashreplay.engine.hangs import Hangs
from hashreplay.engine.keying import Prepared
from hashreplay.engine.options import TestOptions
from hashreplay.engine.scenario import unmatched_faults
from hashreplay.engine.state import Stats, Tests
from hashreplay.engine.unconsumed import FileIndex, Unused, unused


class TestBook:
    """Per-test bookkeeping over a session's `Tests` (every method takes a test id)."""

    __test__ = False  # not a pytest test class
    config: Config
    tests: Tests
    stats: Stats
    hangs: Hangs
    files: FileIndex

    def begin_test(self, test_id: str | None, mode: Mode | None = None) -> None:
        self.tests.begin(test_id, mode)

    def set_test_mode(self, test_id: str | None, mode: Mode) -> None:
        """Run one test in another mode (the `hashreplay` marker), keeping its state."""
        self.tests.set_mode(test_id, mode)

    def end_test(self, test_id: str | None) -> list[ReplayFailure]:
        """Forget a test's state; returns the misses it had (the plugin fails the test).
        Requests it left hanging return with their error."""
        self.hangs.release(test_id)
        return self.tests.end(test_id)

    def set_test_options(
        self,
        test_id: str | None,
        *,
        timing: bool | None = None,
        pace: Pace | None = None,
        unconsumed: Unconsumed | None = None,
        faults: Sequence[FaultSpec] = (),
    ) -> None:
        """A test's scenario options (the markers); None keeps the configuration's."""
        with self.tests.lock:
            self.tests.state(test_id).options = TestOptions(
                timing, pace, unconsumed, [ActiveFault(f) for f in faults]
            )

    def wait_hanging(self, test_id: str | None, timeout: float | None) -> None:
        """Return once a request of the test hangs (a HangTimeout after `timeout` s; None:
        no limit)."""
        self.hangs.wait_hanging(test_id, timeout)

    def leftovers(self, test_id: str | None) -> tuple[Unconsumed, list[Unused], list[str]]:
        """At a test's end: its `unconsumed` policy, the recorded responses it did not use
        (replaying modes only) and the faults that matched nothing."""
        with self.tests.lock:
            state = self.tests.get(test_id)
            if state is None:
                return self.config.unconsumed, [], []
            policy = state.options.unconsumed or self.config.unconsumed
            faults = unmatched_faults(state.options)
            mode = state.mode or self.tests.default_mode
        if policy is Unconsumed.IGNORE or mode not in (Mode.REPLAY, Mode.RECORD_IF_MISSING):
            return policy, [], faults
        # the test's files are read outside the lock (once per directory and session)
        files = [] if state.passed_through else self.files.files_of(test_id)
        with self.tests.lock:
            return policy, unused(state, files), faults

    def take_misses(self, test_id: str | None) -> list[ReplayFailure]:
        return self.tests.take_misses(test_id)

    def run_id_for(self, test_id: str | None) -> str:
        return self.tests.run_id_for(test_id)

    def enter_run(self, test_id: str | None, run_id: str | None) -> None:
        """Called by servers for each request: a new run id of a test starts it afresh."""
        self.tests.enter_run(test_id, run_id)

    def mode_for(self, test_id: str | None) -> Mode:
        return self.tests.mode_for(test_id)

    def _recorded_first(self, test_id: str | None, fault: FaultSpec) -> None:
        with self.tests.lock:
            state = self.tests.get(test_id)
            if state is None:
                return
            noted = state.options.recorded_first
            if fault.describe() not in noted:
                noted.append(fault.describe())

    def recorded_first(self, test_id: str | None) -> list[str]:
        """The faults of a test that found nothing recorded to break in a recording mode, so
        the request was recorded whole (they apply from the next replay)."""
        with self.tests.lock:
            state = self.tests.get(test_id)
            return [] if state is None else list(state.options.recorded_first)

    def uncount_cut_off(self, prep: Prepared) -> None:
        """A response the client cut off (recorded as abandoned) does not count as a call of
        its request's sequence: the next identical request of the test takes its place and
        replaces it (docs/design.md §12). For servers, whose clients may never start a new
        run that would record it again."""
        with self.tests.lock:
            state = self.tests.get(prep.test_id)
            seq = state.sequences.get(prep.hash) if state is not None else None
            if seq is not None and seq.calls > 0:
                seq.calls -= 1

    def _body_too_large(self, error: BodyTooLarge) -> None:
        """A live body passed `max_body_bytes`: its test fails with the error, even when
        the client or SDK swallowed or wrapped it."""
        with self.tests.lock:
            state = self.tests.state(error.test_id)
            state.misses.append(ReplayFailure(str(error), test_id=error.test_id))

    def _count_passthrough(self, test_id: str | None = None) -> None:
        with self.tests.lock:
            self.stats.passed_through += 1
            if test_id is not None:
                self.tests.state(test_id).passed_through = True
