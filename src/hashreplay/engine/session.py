"""The engine's front door: one `Session` per pytest run, server process or proxy.

It wires the parts together and makes the one record/replay decision per request
(docs/design.md §11): `decide` / `decide_call` return a `Decision`; the front end
carries it out and hands a live outcome back to `record` / `arecord`. Each test's
recordings have one owner (`engine/owner.py`): the session finds it by test id and asks
it; keying, the store view and staging each live in their own module; this one never
imports an HTTP client. The per-test calls the front ends make (a test's start, mode and
options, what it left hanging or unused, the misses that fail it, its end) are here too.

Bounded per-test state for long-lived servers: see `Owners.touch`.

Inside pytest each test's state is dropped when the test ends. A proxy or a server under
test never sees tests end: it sees test ids in headers, so without a bound its memory grows
with every distinct test id (4,500 ids took a proxy from 45 to 251 MB).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.core.age import MaxAge, StaleUse, today
from hashreplay.core.bodies import encode_request_body
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
from hashreplay.core.format import RecordedRequest, RecordedResponse
from hashreplay.core.matching import MatchRule, Repeat
from hashreplay.core.modes import Mode, Pace, RecordFailures, Stale, Unconsumed
from hashreplay.core.network import (
    BlockNetwork,
    NetworkRules,
    placeholder_keys,
    placeholder_refusal,
)
from hashreplay.core.normalise import ID_HEADERS, KEPT_RESPONSE_HEADERS
from hashreplay.core.paths import RecordingsDirOutside
from hashreplay.core.secret_values import (
    NO_SECRETS,
    SecretValues,
    SeenSecrets,
    carries_any,
)
from hashreplay.core.store import ReadAhead, Store
from hashreplay.core.streams import opens_server_push
from hashreplay.core.urls import endpoint_of
from hashreplay.core.writer import BackgroundWriter
from hashreplay.engine.connections import Connections
from hashreplay.engine.faults import ActiveFault, FaultSpec, Hangs, TestOptions
from hashreplay.engine.http import BodyLimit, IncomingRequest, LiveBody, server_misses
from hashreplay.engine.keys import Keyer, Prepared
from hashreplay.engine.owner import Call, Defaults, Owners, Stats, TestRecordings
from hashreplay.engine.replay import (
    Decision,
    Live,
    Miss,
    Passthrough,
    Record,
    Replay,
    Replayer,
)
from hashreplay.engine.scenarios import Scenario, fault_response, unmatched_faults
from hashreplay.engine.state import StoreView
from hashreplay.engine.unconsumed import FileIndex, Unused

if TYPE_CHECKING:
    from hashreplay.engine.drift import DriftCheck
    from hashreplay.engine.frame_log import FrameLog
    from hashreplay.engine.frame_replay import FrameReplay
    from hashreplay.engine.record import Outcome, Recorder


__all__ = ["Prepared", "Session", "Stats", "touch_test"]


class Session:
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
        defaults = Defaults(
            mode=config.mode,
            pace=config.pace,
            repeat=config.repeat,
            max_age=config.max_age,
            stale=config.stale,
            unconsumed=config.unconsumed,
            answers_only=config.record_failures is RecordFailures.RESPONSES,
        )
        #: each test's owner, by test id (docs/design.md §10, "One owner per test")
        self.owners = Owners(defaults)
        self.stats: Stats = self.owners.tally.stats
        #: recording files each test id used (replayed or wrote), for `hashreplay prune`
        self.usage = self.owners.tally.usage
        self._recorder: Recorder | None = None
        self._recorder_lock = threading.Lock()
        self.replayer = Replayer(self.view, self.owners, self.redactor, config.root)
        #: requests that hang (fault `hang=True`), for `wait_hanging`
        self.hangs = Hangs()
        self.files = FileIndex(self.store)
        #: connections that no adapter handled (the network guard reports them here)
        self.connections = Connections(config, self.owners)
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
            with self._recorder_lock:
                if self._recorder is None:
                    self._recorder = Recorder(
                        self.owners,
                        self.view,
                        self.redactor,
                        kept,
                        record_timing=self.config.record_timing,
                        hooks=self.keyer.hooks,
                        answers_only=self.config.record_failures is RecordFailures.RESPONSES,
                        rules=self.keyer.rules,
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
        owner = self.owners.get(test_id)
        if owner is None and request.header(FAULT_HEADER) is not None:
            # a fault header's counters (`times`, `call`) live in the test's owner, which a
            # client that sends no run header has not made yet
            owner = self.owners.owner(test_id)
        try:
            fault = None if owner is None else owner.fault_for(request)
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
            owner = self.owners.owner(prep.test_id)
            found = self.replayer.recorded(owner, prep) if prep.mode.may_replay else None
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
                self.owners.owner(prep.test_id).recorded_first(fault)
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
        """Whether `url` is under a `passthrough` URL: its scheme, host and port, and its
        path ending at a `/`, `?` or `#` (docs/usage.md, "The network guard")."""
        from hashreplay.core.network import under_passthrough  # the rule lives with the guard's

        return under_passthrough(self._passthrough, url)

    # --- keying ---------------------------------------------------------------------------

    def prepare(self, incoming: IncomingRequest, test_id: str | None = None) -> Prepared:
        """Redact, normalise and hash a request."""
        if test_id is None:
            test_id = current_test_id()
        owner = self.owners.get(test_id)
        ids = None if owner is None else owner.ids()
        if ids is not None:
            incoming = ids_in_path(incoming, ids)
        request, secrets, failed = self.keyer.request(incoming, ids)
        self.seen_secrets.add(secrets)
        prep = self._prepared(request, test_id, secrets, owner)
        if incoming.method.upper() == "GET" and opens_server_push(  # headers read for GETs only
            incoming.method, incoming.header("accept"), _session_id(incoming.header)
        ):
            prep = prep._replace(push=True)
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
        request = self.keyer.call(name, args, kwargs, self._ids(test_id))
        return self._prepared(request, test_id)

    def _prepared(
        self,
        request: RecordedRequest,
        test_id: str | None,
        secrets: SecretValues = NO_SECRETS,
        owner: TestRecordings | None = None,
    ) -> Prepared:
        # a key that appears in the test id (a parametrised test) leaves its hash too
        shown = self.keyer.test_id(test_id, secrets)
        if owner is None:
            owner = self.owners.get(test_id)
        marked = owner.options.match if owner is not None else None  # the marker's rule
        rule = self.keyer.rule if marked is None else None if marked.is_default else marked
        hash_hex, shared = self.keyer.key_of(request, shown, rule)
        mode = self.owners.defaults.mode if owner is None else owner.mode_or_default()
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

    # --- per test: what the front ends call, each answered by the test's owner ----------

    def _ids(self, test_id: str | None) -> dict[str, str] | None:
        owner = self.owners.get(test_id)
        return None if owner is None else owner.ids()

    def begin_test(self, test_id: str | None, mode: Mode | None = None) -> None:
        self.owners.begin(test_id, mode)

    def set_test_mode(self, test_id: str | None, mode: Mode) -> None:
        """Run one test in another mode (the `hashreplay` marker), keeping its state."""
        self.owners.owner(test_id).mode = mode

    def end_test(self, test_id: str | None) -> list[ReplayFailure]:
        """Forget a test's owner; returns the misses it had (the plugin fails the test).
        Requests it left hanging return with their error; WebSocket connections it left
        open while recording are recorded as abandoned."""
        self.hangs.release(test_id)
        current = self.owners.get(test_id)
        for log in [] if current is None else current.take_open():
            log.abandoned()
            self._record_log(log)
        owner = self.owners.end(test_id)
        return [] if owner is None else owner.take_misses()

    def set_test_options(
        self,
        test_id: str | None,
        *,
        timing: bool | None = None,
        pace: Pace | None = None,
        unconsumed: Unconsumed | None = None,
        faults: Sequence[FaultSpec] = (),
        max_age: MaxAge | None = None,
        stale: Stale | None = None,
        match: MatchRule | None = None,
        repeat: Repeat | None = None,
        block_network: BlockNetwork | None = None,
        allowed_hosts: tuple[str, ...] | None = None,
    ) -> None:
        """A test's scenario, matching and network options (the markers); None keeps the
        configuration's."""
        network = None
        if block_network is not None or allowed_hosts is not None:
            c = self.config
            hosts = c.allowed_hosts if allowed_hosts is None else allowed_hosts
            network = NetworkRules(block_network or c.block_network, hosts, c.passthrough)
        self.owners.owner(test_id).options = TestOptions(
            timing,
            pace,
            unconsumed,
            [ActiveFault(f) for f in faults],
            max_age=max_age,
            stale=stale,
            match=match,
            repeat=repeat,
            network=network,
        )

    def noted(self, decision: Decision, test_id: str | None, request: object = None) -> Decision:
        """`decision`, its exchange noted for the test's `calls` when it is replayed here or
        goes live in live mode (recorded ones are noted by the recorder). `request`: the
        `IncomingRequest` of a live HTTP call, read only then."""
        if type(decision) is Replay:
            req = decision.prep.request
            call = Call(req.method, req.endpoint, req.body, decision.response.status, "replayed")
        elif type(decision) is Live and isinstance(request, IncomingRequest) and not in_call():
            body, _ = encode_request_body(request.content, request.header("content-type"))
            endpoint = endpoint_of(request.url, self.redactor.is_query_secret)
            call = Call(request.method, endpoint, self.redactor.value(body), None, "live")
            decision = Live(call, test_id)  # its status follows from `live_status`
        else:
            return decision
        self.owners.owner(test_id).note_call(call)
        return decision

    def live_status(
        self, decision: Decision, status: int, header: Callable[[str], str | None] | None = None
    ) -> None:
        """An adapter's report of the status of a live answer it passed on (any decision
        it sent to the network; only a `Live` one is listed here, a recorded one gets its
        status from its recording): the one way a live call's status reaches the test's
        `calls`. A call that got no answer is never reported and keeps None. `header`
        looks up the answer's headers: the answer to a `passthrough` request counts the
        misses a server under test reports in it (`server_misses`)."""
        if header is not None and type(decision) is Passthrough:
            count = server_misses(header)
            if count:
                self.owners.tally.server_missed(count)
            return
        if type(decision) is not Live or decision.call is None:
            return
        owner = self.owners.get(decision.test_id)
        updated = None if owner is None else owner.set_status(decision.call, status)
        if updated is not None:
            decision.call = updated

    def calls(self, test_id: str | None) -> list[Call]:
        """The exchanges of a test so far, in order (the `hashreplay` fixture's `calls`)."""
        owner = self.owners.get(test_id)
        return [] if owner is None else owner.calls_so_far()

    def stale_used(self, test_id: str | None) -> tuple[Stale, list[StaleUse]]:
        """At a test's end: its `stale` policy and the recorded responses older than its
        `max_age` that it used (the oldest of each file, oldest first)."""
        owner = self.owners.get(test_id)
        return (self.config.stale, []) if owner is None else owner.stale_used()

    def take_stale(self, test_id: str | None) -> list[StaleUse]:
        """For front ends with no test end: the stale recordings a test replayed since the
        last call (each listed once; a "fail" failed its request instead), oldest first."""
        owner = self.owners.get(test_id)
        return [] if owner is None else owner.take_stale()

    def wait_hanging(self, test_id: str | None, timeout: float | None) -> None:
        """Return once a request of the test hangs (a HangTimeout after `timeout` s; None:
        no limit)."""
        self.hangs.wait_hanging(test_id, timeout)

    def leftovers(self, test_id: str | None) -> tuple[Unconsumed, list[Unused], list[str]]:
        """At a test's end: its `unconsumed` policy, the recorded responses it did not use
        (replaying modes only) and the faults that matched nothing."""
        owner = self.owners.get(test_id)
        if owner is None:
            return self.config.unconsumed, [], []
        policy = owner.unconsumed()
        faults = unmatched_faults(owner.options)
        mode = owner.mode_or_default()
        if policy is Unconsumed.IGNORE or mode not in (Mode.REPLAY, Mode.RECORD_IF_MISSING):
            return policy, [], faults
        files = (
            [] if owner.passed_through else self.files.files_of(test_id, self.stored_id(test_id))
        )
        return policy, owner.unused(files), faults

    def stored_id(self, test_id: str | None) -> str | None:
        """A test id as its files hold it: redacted of every secret this session has seen
        and every secret shape, as the keyer wrote it (docs/design.md §7, "Test ids")."""
        return self.keyer.test_id(test_id, self.seen_secrets.scrubber)

    def take_misses(self, test_id: str | None) -> list[ReplayFailure]:
        owner = self.owners.get(test_id)
        return [] if owner is None else owner.take_misses()

    def run_id_for(self, test_id: str | None) -> str:
        return self.owners.owner(test_id).made_run_id()

    def enter_run(self, test_id: str | None, run_id: str | None) -> None:
        """Called by servers for each request: a new run id of a test starts it afresh."""
        self.owners.enter_run(test_id, run_id)

    def mode_for(self, test_id: str | None) -> Mode:
        return self.owners.mode_for(test_id)

    def recorded_first(self, test_id: str | None) -> list[str]:
        """The faults of a test that found nothing recorded to break in a recording mode, so
        the request was recorded whole (they apply from the next replay)."""
        owner = self.owners.get(test_id)
        return [] if owner is None else owner.recorded_first()

    def uncount_cut_off(self, prep: Prepared) -> None:
        """A response the client cut off (recorded as abandoned) does not count as a call of
        its request's sequence: the next identical request of the test takes its place and
        replaces it (docs/design.md §12). For servers, whose clients may never start a new
        run that would record it again."""
        owner = self.owners.get(prep.test_id)
        if owner is not None:
            owner.uncount_cut_off(prep.hash)

    def _body_too_large(self, error: BodyTooLarge) -> None:
        """A live body passed `max_body_bytes`: its test fails with the error, even when
        the client or SDK swallowed or wrapped it."""
        self.owners.owner(error.test_id).fail(ReplayFailure(str(error), test_id=error.test_id))

    def _count_passthrough(self, test_id: str | None = None) -> None:
        self.owners.tally.passed_through()
        if test_id is not None:
            self.owners.owner(test_id).mark_passed_through()

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
        return LiveBody(status, headers, started=started, limit=limit, push=prep.push)

    # --- WebSocket connections (docs/design.md §17): adapter → session → owner → store ---

    def decide_connection(
        self, url: str, headers: Sequence[tuple[str, str]], test_id: str | None = None
    ) -> Decision:
        """What to do with a WebSocket handshake (`GET url`; `test_id` None: the calling
        context's): keyed, gated and answered as an HTTP request is. `Replay`: build the
        connection with `connection_replay`; `Record`: dial it and feed a `frame_log`;
        `Miss`: fail the connect (noted already); `Live` / `Passthrough`: dial it."""
        return self.decide(IncomingRequest("GET", url, list(headers), b""), test_id)

    def connection_replay(self, decision: Replay) -> FrameReplay:
        """The recorded connection of a `Replay` decision, replayed with no socket (its
        handshake's answer is `decision.response`: status 101 with `frames`, or another
        status that refused it)."""
        from hashreplay.engine.frame_replay import FrameReplay

        prep = decision.prep
        owner = self.owners.owner(prep.test_id)
        tally = self.owners.tally
        response = decision.response
        fault = None if decision.scenario is None else decision.scenario.fault
        if fault is not None and fault.for_connections:  # docs/scenarios.md, "WebSocket faults"
            from hashreplay.engine.scenarios import faulted_connection

            response = faulted_connection(response, fault)

        def fail(failure: ReplayFailure) -> None:
            if isinstance(failure, ReplayMiss):
                tally.missed()
            owner.fail(failure)

        rule = prep.rule
        return FrameReplay(
            response,
            decision.path,
            test_id=prep.test_id,
            shown_test_id=prep.shown_test_id,
            request_hash=prep.hash,
            connection=f"GET {prep.request.url}",
            pace=owner.pace(),
            ignore=() if rule is None else rule.ignore,
            rules=self.keyer.rules,
            redactor=self.redactor,
            ids=owner.ids,
            fail=fail,
            root=self.config.root,
        )

    def frame_log(self, decision: Record, url: str, *, started: float | None = None) -> FrameLog:
        """The log a `Record` decision's live connection feeds (`started`: the
        `time.monotonic()` the handshake was sent); hand it to `record_connection` when the
        connection ends (or the test's end records it as abandoned)."""
        from hashreplay.engine.frame_log import FrameLog

        prep = decision.prep
        owner = self.owners.owner(prep.test_id)
        timed = owner.options.timing
        shown = self.redactor.url(url)
        limit = BodyLimit(self.config.max_body_bytes, prep.test_id, shown, self._body_too_large)
        log = FrameLog(
            prep,
            shown,
            timed=self.config.record_timing if timed is None else timed,
            limit=limit,
            started=started,
        )
        owner.opened(log)
        return log

    def record_connection(self, log: FrameLog) -> Path | None:
        """Write a recorded connection once it ended (its end reported on the log); None:
        not recorded (its handshake got no answer, its frames passed `max_body_bytes`, or it
        was written already)."""
        return self._record_log(log)

    async def arecord_connection(self, log: FrameLog) -> Path | None:
        """`record_connection` for event loops: the write never blocks the loop."""
        response = self._taken(log)
        return None if response is None else await self.arecord(log.prep, response)

    def _record_log(self, log: FrameLog) -> Path | None:
        response = self._taken(log)
        return None if response is None else self.record(log.prep, response)

    def _taken(self, log: FrameLog) -> RecordedResponse | None:
        """The log's exchange the first time it is handed in, else None."""
        owner = self.owners.get(log.prep.test_id)
        if owner is not None:
            owner.ended(log)
        return self._logged(log) if log.take() else None

    def _logged(self, log: FrameLog) -> RecordedResponse | None:
        """The log's exchange, or None; a handshake with no answer is counted as not
        recorded (docs/design.md, "Only answers are recorded"), and a recording it would
        have replaced stays byte for byte."""
        response = log.response()
        if response is None and not log.answered_at_all:
            prep = log.prep
            path = self.store.path_for(prep.test_id, prep.hash)
            kept = [path] if self.view.exists(path) else []
            self.owners.tally.not_recorded(prep.test_id, *kept)
        return response


def ids_in_path(incoming: IncomingRequest, ids: Mapping[str, str]) -> IncomingRequest:
    """`incoming` with each URL path segment that is an id the test received replaced by
    its stable id, as its body's are (a job polled by its id: `GET /v1/jobs/<id>`), so a
    recording, its replay and a drift run key it alike (docs/design.md §5, §15)."""
    head, sep, tail = incoming.url.partition("?")
    scheme, slashes, rest = head.partition("//")
    if not slashes:
        scheme, rest = "", head
    host, slash, path = rest.partition("/")
    segments = path.split("/")
    mapped = [ids.get(segment, segment) for segment in segments]
    if mapped == segments:
        return incoming
    url = f"{scheme}{slashes}{host}{slash}{'/'.join(mapped)}{sep}{tail}"
    return IncomingRequest(incoming.method, url, incoming.headers, incoming.content)


def touch_test(session: Session, test_id: str | None, limit: int) -> int:
    """Mark `test_id` as just used; forget the owners beyond `limit` (least recent first)."""
    return session.owners.touch(test_id, limit)


#: `ID_HEADERS` in a fixed order, for `_session_id`
_ID_HEADERS = tuple(sorted(ID_HEADERS))


def _session_id(header: Callable[[str], str | None]) -> str | None:
    """The first session id a server handed out (`ID_HEADERS`) that a request carries."""
    return next((v for name in _ID_HEADERS if (v := header(name))), None)
