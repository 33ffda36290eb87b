"""The engine's front door: one `Session` per pytest run, server process or proxy.

It wires the parts together and makes the one record/replay decision per request
(docs/design.md §11): `decide` / `decide_call` return a `Decision`; the front end
carries it out and hands a live outcome back to `record` / `arecord`. Keying, the store view,
per-test state and staging each live in their own module; this one never imports an HTTP
client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.core.config import Config
from hashreplay.core.constants import FAULT_HEADER, RUN_HEADER, TEST_ID_HEADER
from hashreplay.core.context import current_test_id, in_call
from hashreplay.core.errors import (
    BodyTooLarge,
    ConfigError,
    RecordingError,
    ReplayFailure,
    ReplayMiss,
)
from hashreplay.core.mode import Mode, RecordFailures
from hashreplay.core.normalise import KEPT_RESPONSE_HEADERS
from hashreplay.core.recording import RecordedRequest
from hashreplay.core.replay_env import placeholder_keys, placeholder_refusal
from hashreplay.core.scenarios import Pace, Unconsumed
from hashreplay.core.secret_values import (
    NO_SECRETS,
    SecretValues,
    SeenSecrets,
    request_secrets,
)
from hashreplay.core.store import Store
from hashreplay.core.store_paths import RecordingsDirOutside
from hashreplay.core.writer import BackgroundWriter
from hashreplay.engine.connections import Connections
from hashreplay.engine.decision import Decision, Live, Miss, Passthrough, Record, Replay
from hashreplay.engine.faults import ActiveFault, FaultSpec
from hashreplay.engine.hangs import Hangs
from hashreplay.engine.http import BodyLimit, IncomingRequest, LiveBody, LiveExchange
from hashreplay.engine.keying import Keyer, Prepared
from hashreplay.engine.options import TestOptions
from hashreplay.engine.replayer import Replayer
from hashreplay.engine.scenario import (
    Scenario,
    fault_for,
    fault_response,
    unmatched_faults,
)
from hashreplay.engine.state import Stats, Tests
from hashreplay.engine.unconsumed import FileIndex, Unused, unused
from hashreplay.engine.view import StoreView

if TYPE_CHECKING:
    from hashreplay.engine.staging import Outcome, Recorder

__all__ = ["Prepared", "Session", "Stats"]


class Session:
    """One record/replay session (a pytest run, a server process, a proxy)."""

    def __init__(
        self, config: Config, *, store: Store | None = None, write_behind: bool = False
    ) -> None:
        """`write_behind`: write recordings on a background thread (the pytest plugin does),
        so recording costs the caller no disk latency; call `flush()` before reading files."""
        self.config = config
        self.store = store or Store.from_config(config)
        self.keyer = Keyer(config)
        self.redactor = self.keyer.redactor
        # temp files under .hashreplay/tmp, where git never sees them
        writer = BackgroundWriter(self.store.temp_dir) if write_behind else None
        self.view = StoreView(self.store, writer)
        #: credential values seen in requests, scrubbed from logs and the usage log
        self.seen_secrets = SeenSecrets()
        self.tests = Tests(config.mode)
        self.stats = self.tests.stats
        #: recording files each test id used (replayed or wrote), for `hashreplay prune`
        self.usage = self.tests.usage
        self._recorder: Recorder | None = None
        self.pace = Pace.parse(config.pace)
        self.replayer = Replayer(
            self.view,
            self.tests,
            self.redactor,
            config.root,
            self.pace,
            answers_only=config.record_failures is RecordFailures.RESPONSES,
        )
        #: requests that hang (fault `hang=True`), for `wait_hanging`
        self.hangs = Hangs()
        self.files = FileIndex(self.store)
        #: connections that no adapter handled (the network guard reports them here)
        self.connections = Connections(config, self.tests)
        self._passthrough = tuple(config.passthrough)
        #: keyless replay's placeholder keys: never sent to a live upstream
        self._placeholders = placeholder_keys(config.replay_env)

    @property
    def recorder(self) -> Recorder:
        """What stages recordings, built on the first one: a run that only replays never
        loads the record path's modules (staging, file bytes, response normalisation)."""
        recorder = self._recorder
        if recorder is None:
            from hashreplay.engine.staging import Recorder

            kept = KEPT_RESPONSE_HEADERS | frozenset(self.config.keep_response_headers)
            with self.tests.lock:
                if self._recorder is None:
                    self._recorder = Recorder(
                        self.tests,
                        self.view,
                        self.redactor,
                        kept,
                        record_timing=self.config.record_timing,
                    )
                recorder = self._recorder
        return recorder

    # --- tests ----------------------------------------------------------------------------

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

    # --- the decision ---------------------------------------------------------------------

    def decide(self, request: IncomingRequest, test_id: str | None = None) -> Decision:
        """What to do with an HTTP request (`test_id` None: the calling context's)."""
        if test_id is None:
            test_id = current_test_id()
        gate = self._gate(request.url, test_id)
        if gate is not None:
            if type(gate) is Live and self._placeholders and self._carries_placeholder(request):
                return self._refuse_placeholder(self.prepare(request, test_id), request.url) or gate
            return gate
        prep = self.prepare(request, test_id)
        with self.tests.lock:
            state = self.tests.get(test_id)
            if state is None and request.header(FAULT_HEADER) is not None:
                # a fault header's counters (`times`, `call`) live in the test's state, which
                # a client that sends no run header has not made yet
                state = self.tests.state(test_id)
            try:
                fault = fault_for(state.options if state else None, request)
            except ConfigError as exc:  # a malformed proxy fault header
                return Miss(prep, self.replayer.failure(prep, str(exc)))
        return self._decide(prep, request, fault)

    def decide_call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Decision:
        """What to do with a call of a call-layer target (`self` already excluded)."""
        test_id = current_test_id()
        gate = self._gate(None, test_id)
        if gate is not None:
            return gate
        return self._decide(self.prepare_call(name, args, kwargs, test_id))

    def _gate(self, url: str | None, test_id: str | None) -> Passthrough | Live | None:
        """Whether a request is intercepted at all: the one place that says so."""
        if in_call():
            return Live()  # part of a call-layer target's recording already
        if url is not None and self.is_passthrough(url):
            headers: tuple[tuple[str, str], ...] = ()
            if test_id is not None:  # server mode: the server stores its calls per test
                headers = ((TEST_ID_HEADER, test_id), (RUN_HEADER, self.run_id_for(test_id)))
            self._count_passthrough(test_id)
            return Passthrough(headers)
        if not self.mode_for(test_id).intercepts:
            if url is not None:
                self._count_passthrough()
            return Live()
        return None

    def _decide(
        self,
        prep: Prepared,
        request: IncomingRequest | None = None,
        fault: FaultSpec | None = None,
    ) -> Decision:
        if fault is not None and not fault.breaks_recorded:
            # answered before any recorded response is consumed; never recorded
            path = self.store.path_for(prep.test_id, prep.hash)
            hang = self.hangs.hang(prep.test_id) if fault.hang else None
            return Replay(prep, fault_response(fault), path, Scenario(fault=fault, hang=hang))
        url = request.url if request is not None else prep.request.url
        if not prep.mode.may_replay and fault is None:
            return self._refuse_placeholder(prep, url) or Record(prep)
        try:
            found = self.replayer.recorded(prep) if prep.mode.may_replay else None
        except RecordingError as unusable:
            return Miss(prep, self.miss(prep, unusable, request))
        if found is not None:
            return self.replayer.replay(prep, found, request, fault)
        if fault is not None:
            if prep.mode.may_record:
                # nothing recorded to break yet: record it whole, and the fault applies from
                # the next replay (docs/scenarios.md, "Faults and hangs")
                self._recorded_first(prep.test_id, fault)
                return self._refuse_placeholder(prep, url) or Record(prep)
            why = (
                f"{fault.describe()} breaks a recorded response, and this request has none "
                "left to break: record it first in record-if-missing mode (the fault "
                "applies from the next replay)"
                + (
                    f": INFERENCE_MODE=record-if-missing pytest {prep.test_id}"
                    if prep.test_id
                    else ""
                )
            )
            return Miss(prep, self.replayer.failure(prep, why))
        if prep.mode.may_record:
            return self._refuse_placeholder(prep, url) or Record(prep)
        return Miss(prep, self.miss(prep, request=request))

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

    def _carries_placeholder(self, request: IncomingRequest) -> bool:
        """Whether a request not otherwise keyed carries a placeholder as a credential
        (only then is it keyed, to fail its test with a report)."""
        secret_headers, _ = self.redactor.split_headers(request.headers)
        found = request_secrets(self.redactor, request.url, secret_headers)
        return any(value in self._placeholders for value in found.values)

    def _refuse_placeholder(self, prep: Prepared, url: str) -> Miss | None:
        """A request about to go to the network with keyless replay's placeholder as its
        credential fails its test instead (docs/design.md §7, "Keyless replay's placeholder")."""
        if not prep.secrets or not self._placeholders:
            return None
        for value in prep.secrets.values:
            names = self._placeholders.get(value)
            if names is not None:
                why = placeholder_refusal(value, names, url, prep.mode.value)
                return Miss(prep, self.replayer.failure(prep, why))
        return None

    def is_passthrough(self, url: str) -> bool:
        """Whether `url` is under a `passthrough` prefix. A prefix ends at a boundary:
        `http://127.0.0.1:80` covers `http://127.0.0.1:80/x`, not `http://127.0.0.1:8000`."""
        for prefix in self._passthrough:
            if url.startswith(prefix) and (
                len(url) == len(prefix) or prefix[-1] in "/?#" or url[len(prefix)] in "/?#"
            ):
                return True
        return False

    def _count_passthrough(self, test_id: str | None = None) -> None:
        with self.tests.lock:
            self.stats.passed_through += 1
            if test_id is not None:
                self.tests.state(test_id).passed_through = True

    # --- keying ---------------------------------------------------------------------------

    def prepare(self, incoming: IncomingRequest, test_id: str | None = None) -> Prepared:
        """Redact, normalise and hash a request."""
        if test_id is None:
            test_id = current_test_id()
        request, secrets = self.keyer.request(incoming, self.tests.id_map(test_id))
        self.seen_secrets.add(secrets)
        return self._prepared(request, test_id, secrets)

    def prepare_call(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        test_id: str | None = None,
    ) -> Prepared:
        if test_id is None:
            test_id = current_test_id()
        request = self.keyer.call(name, args, kwargs, self.tests.id_map(test_id))
        return self._prepared(request, test_id)

    def _prepared(
        self, request: RecordedRequest, test_id: str | None, secrets: SecretValues = NO_SECRETS
    ) -> Prepared:
        # a key that appears in the test id (a parametrised test) leaves its hash too
        shown = self.keyer.test_id(test_id, secrets)
        hash_hex, shared = self.keyer.key_of(request, shown)
        mode = self.mode_for(test_id)
        return Prepared(test_id, mode, hash_hex, shared, request, secrets, shown)

    def key_of(self, request: RecordedRequest, test_id: str | None) -> tuple[str, bool]:
        return self.keyer.key_of(request, test_id)

    def miss(
        self,
        prep: Prepared,
        problem: RecordingError | None = None,
        request: IncomingRequest | None = None,
    ) -> ReplayMiss:
        """Note a replay miss (the test will fail) and return it; never raises it. With the
        `request`, the report shows the host and port it was sent to."""
        if isinstance(problem, RecordingsDirOutside):  # no file to name: the directory's fault
            return self.replayer.failure(prep, str(problem))
        return self.replayer.miss(prep, problem, request)

    # --- record ---------------------------------------------------------------------------

    def record(self, prep: Prepared, outcome: Outcome) -> Path | None:
        """Stage (redact, normalise) and write one outcome; returns its file, or None for an
        outcome that is no answer and is not recorded (`unanswered`)."""
        if self.unanswered(prep, outcome):
            return None
        path, content = self.recorder.stage(prep, outcome)
        if content is not None:
            try:
                self.view.write(path, content)
            except BaseException:
                self._not_written()
                raise
        return path

    async def arecord(self, prep: Prepared, outcome: Outcome) -> Path | None:
        """`record` for event loops: the write never blocks the loop."""
        if self.unanswered(prep, outcome):
            return None
        path, content = self.recorder.stage(prep, outcome)
        if content is not None:
            try:
                await self.view.awrite(path, content)
            except BaseException:
                self._not_written()
                raise
        return path

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

    def _not_written(self) -> None:
        """The stats count files written: a staged recording whose write failed is not."""
        with self.tests.lock:
            self.stats.recorded = max(0, self.stats.recorded - 1)

    def live_body(
        self,
        prep: Prepared,
        status: int,
        headers: Sequence[tuple[str, str]],
        *,
        started: float | None = None,
    ) -> LiveBody:
        """The body of a live response being recorded for `prep`, kept within
        `max_body_bytes` while it arrives (docs/design.md, "Bodies are limited as they
        arrive"): every adapter records through one of these."""
        limit = BodyLimit(
            self.config.max_body_bytes, prep.test_id, prep.request.url, self._body_too_large
        )
        return LiveBody(status, headers, started=started, limit=limit)

    def _body_too_large(self, error: BodyTooLarge) -> None:
        """A live body passed `max_body_bytes`: its test fails with the error, even when
        the client or SDK swallowed or wrapped it."""
        with self.tests.lock:
            state = self.tests.state(error.test_id)
            state.misses.append(ReplayFailure(str(error), test_id=error.test_id))

    def unanswered(self, prep: Prepared, outcome: Outcome) -> bool:
        """Whether `outcome` is a live call that got no HTTP response and so is not recorded
        (docs/design.md, "Only answers are recorded"): the one place that decides it, for
        every adapter. It is counted for the summary; a recording it would have replaced
        stays byte for byte and counts as used (prune keeps it); the caller raises the real
        error. `record_failures = "all"` records it as an exception."""
        if (
            not isinstance(outcome, LiveExchange)
            or outcome.answered
            or self.config.record_failures is RecordFailures.ALL
        ):
            return False
        if prep.shared:
            kept = self.view.model_list_paths(prep.hash, prep.test_id)
        else:
            with self.tests.lock:
                state = self.tests.get(prep.test_id)
                seq = state.sequences.get(prep.hash) if state is not None else None
            path = seq.path if seq is not None else self.store.path_for(prep.test_id, prep.hash)
            kept = [path] if self.view.exists(path) else []
        with self.tests.lock:
            self.stats.not_recorded += 1
            self.tests.use(prep.test_id, *kept)
        return True

    def flush(self) -> None:
        """Wait until every recording written so far is on disk (write-behind sessions);
        raises a RecordingError for a write that failed."""
        self.view.flush()

    def close(self) -> None:
        self.view.close()
