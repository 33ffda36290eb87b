"""The engine's front door: one `Session` per pytest run, server process or proxy.

It wires the parts together and makes the one record/replay decision per request
(docs/design.md §11): `decide` / `decide_call` return a `Decision`; the front end
carries it out and hands a live outcome back to `record` / `arecord`. Keying, the store view,
per-test state and staging each live in their own module; this one never imports an HTTP
client.

Bounded per-test state for long-lived servers: see `Tests.touch`.

Inside pytest each test's state is dropped when the test ends. A proxy or a server under
test never sees tests end: it sees test ids in headers, so without a bound its memory grows
with every distinct test id (4,500 ids took a proxy from 45 to 251 MB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.core.config import Config
from hashreplay.core.constants import FAULT_HEADER, RUN_HEADER, TEST_ID_HEADER
from hashreplay.core.context import current_test_id, in_call
from hashreplay.core.errors import (
    ConfigError,
    RecordingError,
    ReplayMiss,
)
from hashreplay.core.format import RecordedRequest
from hashreplay.core.modes import MaxAge, Pace, RecordFailures, Stale, today
from hashreplay.core.network import placeholder_keys, placeholder_refusal
from hashreplay.core.normalise import KEPT_RESPONSE_HEADERS
from hashreplay.core.paths import RecordingsDirOutside
from hashreplay.core.secret_values import (
    NO_SECRETS,
    SecretValues,
    SeenSecrets,
    carries_any,
)
from hashreplay.core.store import ReadAhead, Store
from hashreplay.core.writer import BackgroundWriter
from hashreplay.engine.faults import FaultSpec, Hangs
from hashreplay.engine.http import IncomingRequest
from hashreplay.engine.keys import Keyer, Prepared
from hashreplay.engine.lifecycle import Connections, TestBook
from hashreplay.engine.replay import (
    Decision,
    Live,
    Miss,
    Passthrough,
    Record,
    Replay,
    Replayer,
)
from hashreplay.engine.scenarios import (
    FileIndex,
    Scenario,
    fault_for,
    fault_response,
)
from hashreplay.engine.state import Stats, StoreView, Tests

if TYPE_CHECKING:
    from hashreplay.engine.drift import DriftCheck
    from hashreplay.engine.record import Outcome, Recorder


__all__ = ["Prepared", "Session", "Stats", "touch_test"]


class Session(TestBook):
    """One record/replay session (a pytest run, a server process, a proxy)."""

    def __init__(
        self, config: Config, *, store: Store | None = None, write_behind: bool = False
    ) -> None:
        """`write_behind`: write recordings on a background thread (the pytest plugin does),
        so recording costs the caller no disk latency; call `flush()` before reading files."""
        today()  # a bad HASHREPLAY_TODAY fails the start (docs/recordings.md, "Age")
        self.config = config
        self.store = store or Store.from_config(config)
        self.keyer = Keyer(config)
        self.redactor = self.keyer.redactor
        # temp files under .hashreplay/tmp (git never sees them); a run's files are read ahead
        writer = BackgroundWriter(self.store.temp_dir) if write_behind else None
        self.store.ahead = ReadAhead() if write_behind else None
        self.view = StoreView(self.store, writer, self.keyer.key_of)
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
            max_age=None if config.max_age is None else MaxAge.parse(config.max_age),
            stale=config.stale,
            repeat=config.repeat,
        )
        #: requests that hang (fault `hang=True`), for `wait_hanging`
        self.hangs = Hangs()
        self.files = FileIndex(self.store)
        #: connections that no adapter handled (the network guard reports them here)
        self.connections = Connections(config, self.tests)
        self._passthrough = tuple(config.passthrough)
        #: keyless replay's placeholder keys: never sent to a live upstream
        self._placeholders = placeholder_keys(config.replay_env)
        self.drift: DriftCheck | None = None  # a drift run's check (docs/design.md §15)
        #: a front end that never sees a test end (the proxy, `install()`): a recording
        #: refused by `stale = "fail"` fails its request, as a miss does, since no test end
        #: would fail the test (docs/server.md, "Stale recordings")
        self.per_request = False

    @property
    def recorder(self) -> Recorder:
        """What stages recordings, built on the first one: a run that only replays never
        loads the record path's modules (staging, file bytes, response normalisation)."""
        recorder = self._recorder
        if recorder is None:
            from hashreplay.engine.record import Recorder

            kept = KEPT_RESPONSE_HEADERS | frozenset(self.config.keep_response_headers)
            with self.tests.lock:
                if self._recorder is None:
                    self._recorder = Recorder(
                        self.tests,
                        self.view,
                        self.redactor,
                        kept,
                        record_timing=self.config.record_timing,
                        hooks=self.keyer.hooks,
                        answers_only=self.config.record_failures is RecordFailures.RESPONSES,
                    )
                recorder = self._recorder
        return recorder

    # --- the decision ---------------------------------------------------------------------

    def decide(self, request: IncomingRequest, test_id: str | None = None) -> Decision:
        """What to do with an HTTP request (`test_id` None: the calling context's)."""
        if test_id is None:
            test_id = current_test_id()
        gate = self._gate(request.url, test_id)
        if gate is not None:
            if (
                type(gate) is Live
                and self._placeholders
                and carries_any(self.redactor, request.url, request.headers, self._placeholders)
            ):
                return self._refused(self.prepare(request, test_id), request.url) or gate
            return self.noted(gate, test_id, request)
        prep = self.prepare(request, test_id)
        if prep.hook_failed is not None:  # the test fails with it; nothing is sent or written
            return Miss(prep, self.replayer.failure(prep, prep.hook_failed))
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
        return self.noted(self._decide(prep, request, fault), test_id)

    def decide_call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Decision:
        """What to do with a call of a call-layer target (`self` already excluded)."""
        test_id = current_test_id()
        gate = self._gate(None, test_id)
        if gate is not None:
            return gate
        return self.noted(self._decide(self.prepare_call(name, args, kwargs, test_id)), test_id)

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
        if (self.drift is not None or not prep.mode.may_replay) and fault is None:
            return self._refused(prep, url, request) or Record(prep)
        try:
            found = self.replayer.recorded(prep) if prep.mode.may_replay else None
        except RecordingError as unusable:
            return Miss(prep, self.miss(prep, unusable, request))
        if found is not None:
            stale = found.stale
            if self.per_request and stale is not None and stale.policy is Stale.FAIL:
                refused = self.replayer.failure(prep, stale.refusal(self.config.root))
                return Miss(prep, refused, stale)
            return self.replayer.replay(prep, found, request, fault)
        if fault is not None:
            if prep.mode.may_record:
                # nothing recorded to break yet: record it whole, and the fault applies from
                # the next replay (docs/scenarios.md, "Faults and hangs")
                self._recorded_first(prep.test_id, fault)
                return self._refused(prep, url, request) or Record(prep)
            return Miss(prep, self.replayer.failure(prep, fault.nothing_to_break(prep.test_id)))
        if prep.mode.may_record:
            return self._refused(prep, url, request) or Record(prep)
        return Miss(prep, self.miss(prep, request=request))

    def _refused(
        self, prep: Prepared, url: str, request: IncomingRequest | None = None
    ) -> Miss | None:
        """A request about to go out that could not be recorded fails its test instead: a
        body over `max_body_bytes` (a drift run writes nothing, so it goes) or keyless
        replay's placeholder as its credential (docs/design.md §7, "Keyless replay's …")."""
        why = None if self.drift is not None else self.recorder.too_large(prep, request)
        if why is not None:
            return Miss(prep, self.replayer.failure(prep, why), too_large=True)
        for value in prep.secrets.values if self._placeholders else ():
            if (names := self._placeholders.get(value)) is not None:
                why = placeholder_refusal(value, names, url, prep.mode.value)
                return Miss(prep, self.replayer.failure(prep, why))
        return None

    def is_passthrough(self, url: str) -> bool:
        """Whether `url` is under a `passthrough` prefix (ending at a `/`, `?` or `#`)."""
        for prefix in self._passthrough:
            if url.startswith(prefix) and (
                len(url) == len(prefix) or prefix[-1] in "/?#" or url[len(prefix)] in "/?#"
            ):
                return True
        return False

    # --- keying ---------------------------------------------------------------------------

    def prepare(self, incoming: IncomingRequest, test_id: str | None = None) -> Prepared:
        """Redact, normalise and hash a request."""
        if test_id is None:
            test_id = current_test_id()
        request, secrets, failed = self.keyer.request(incoming, self.tests.id_map(test_id))
        self.seen_secrets.add(secrets)
        prep = self._prepared(request, test_id, secrets)
        return prep if failed is None else prep._replace(hook_failed=failed)

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
        state = self.tests.get(test_id)
        marked = state.options.match if state is not None else None  # the marker's rule
        rule = self.keyer.rule if marked is None else None if marked.is_default else marked
        hash_hex, shared = self.keyer.key_of(request, shown, rule)
        mode = self.mode_for(test_id)
        return Prepared(test_id, mode, hash_hex, shared, request, secrets, shown, rule)

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
        outcome that is no answer and is not recorded (`Recorder.unanswered`)."""
        return (self.drift or self.recorder).record(prep, outcome)

    async def arecord(self, prep: Prepared, outcome: Outcome) -> Path | None:
        """`record` for event loops: the write never blocks the loop."""
        return await (self.drift or self.recorder).arecord(prep, outcome)

    def flush(self) -> None:
        """Wait until every recording written so far is on disk; a RecordingError if not."""
        self.view.flush()

    def close(self) -> None:
        self.view.close()


def touch_test(session: Session, test_id: str | None, limit: int) -> int:
    """Mark `test_id` as just used; forget test states beyond `limit` (least recent first)."""
    return session.tests.touch(test_id, limit)
