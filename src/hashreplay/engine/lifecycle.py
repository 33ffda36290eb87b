"""The per-test half of a session (docs/design.md §11): a test's start, mode and options,
what it left hanging or unused, the misses that fail it, and its end. `Session` is one of
these plus the decision; the plugin, the proxy and `install()` call these per test.

Network use that no adapter handled (docs/design.md §2): TCP connections, UDP datagrams,
DNS lookups and gRPC channels. In replay mode one outside the allowed hosts fails its test;
in the recording modes each is listed in the run's summary (loopback included), so nothing
goes unrecorded in silence.

Keyless replay for the front ends (docs/design.md §2): placeholders for unset provider key
variables while a replay-mode run or test runs, taken away again for tests in another mode
and when the run ends. Only variables that were unset are ever touched.

Used by the pytest plugin and by `hashreplay.install()`, so it lives below both (the plugin
package imports pytest; a server process calling `install()` must not).
"""

from __future__ import annotations

import os
import threading
from collections.abc import MutableMapping, Sequence
from enum import Enum
from typing import NamedTuple

from hashreplay.core.bodies import encode_request_body
from hashreplay.core.config import Config
from hashreplay.core.context import in_call
from hashreplay.core.errors import BodyTooLarge, NetworkBlocked, ReplayFailure
from hashreplay.core.matching import MatchRule, Repeat
from hashreplay.core.modes import MaxAge, Mode, Pace, Stale, Unconsumed
from hashreplay.core.network import NetworkRules, missing, replay_env_values
from hashreplay.core.redact import Redactor
from hashreplay.core.secret_values import SeenSecrets
from hashreplay.core.urls import endpoint_of
from hashreplay.engine.faults import ActiveFault, FaultSpec, Hangs, TestOptions
from hashreplay.engine.http import BodyLimit, IncomingRequest, LiveBody
from hashreplay.engine.keys import Keyer, Prepared
from hashreplay.engine.replay import Decision, Live, Replay
from hashreplay.engine.scenarios import FileIndex, Unused, unmatched_faults, unused
from hashreplay.engine.state import Call, StaleUse, Stats, Tests


class TestBook:
    """Per-test bookkeeping over a session's `Tests` (every method takes a test id)."""

    __test__ = False  # not a pytest test class
    config: Config
    tests: Tests
    stats: Stats
    hangs: Hangs
    files: FileIndex
    redactor: Redactor
    keyer: Keyer
    seen_secrets: SeenSecrets

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
        max_age: MaxAge | None = None,
        stale: Stale | None = None,
        match: MatchRule | None = None,
        repeat: Repeat | None = None,
    ) -> None:
        """A test's scenario and matching options (the markers); None keeps the
        configuration's."""
        with self.tests.lock:
            self.tests.state(test_id).options = TestOptions(
                timing,
                pace,
                unconsumed,
                [ActiveFault(f) for f in faults],
                max_age=max_age,
                stale=stale,
                match=match,
                repeat=repeat,
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
        with self.tests.lock:
            self.tests.state(test_id).calls.append(call)
        return decision

    def live_status(self, decision: Decision, status: int) -> None:
        """An adapter's report of the status of a live answer it passed on (any decision
        it sent to the network; only a `Live` one is listed here, a recorded one gets its
        status from its recording): the one way a live call's status reaches the test's
        `calls`. A call that got no answer is never reported and keeps None."""
        if type(decision) is not Live or decision.call is None:
            return
        noted = decision.call
        with self.tests.lock:
            state = self.tests.get(decision.test_id)
            calls = [] if state is None else state.calls
            for index in range(len(calls) - 1, -1, -1):
                if calls[index] is noted:
                    calls[index] = noted._replace(status=status)
                    decision.call = calls[index]
                    break

    def calls(self, test_id: str | None) -> list[Call]:
        """The exchanges of a test so far, in order (the `hashreplay` fixture's `calls`)."""
        with self.tests.lock:
            state = self.tests.get(test_id)
            return [] if state is None else list(state.calls)

    def stale_used(self, test_id: str | None) -> tuple[Stale, list[StaleUse]]:
        """At a test's end: its `stale` policy and the recorded responses older than its
        `max_age` that it used (the oldest of each file, oldest first)."""
        with self.tests.lock:
            state = self.tests.get(test_id)
            if state is None:
                return self.config.stale, []
            policy = state.options.stale or self.config.stale
            return policy, sorted(state.stale.values(), key=lambda u: (-u.age, str(u.path)))

    def take_stale(self, test_id: str | None) -> list[StaleUse]:
        """For front ends with no test end: the stale recordings a test replayed since the
        last call (each listed once; a "fail" failed its request instead), oldest first."""
        with self.tests.lock:
            state = self.tests.get(test_id)
            if state is None or not state.stale:
                return []
            used, state.stale = list(state.stale.values()), {}
        used = [u for u in used if u.policy is not Stale.FAIL]
        return sorted(used, key=lambda u: (-u.age, str(u.path)))

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
        files = (
            [] if state.passed_through else self.files.files_of(test_id, self.stored_id(test_id))
        )
        with self.tests.lock:
            return policy, unused(state, files), faults

    def stored_id(self, test_id: str | None) -> str | None:
        """A test id as its files hold it: redacted of every secret this session has seen
        and every secret shape, as the keyer wrote it (docs/design.md §7, "Test ids")."""
        return self.keyer.test_id(test_id, self.seen_secrets.scrubber)

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


class Reach(str, Enum):
    """How a test reached for the network."""

    CONNECTION = "connection"
    DATAGRAM = "UDP datagram"
    LOOKUP = "DNS lookup"
    GRPC = "gRPC channel"


#: What a summary label of a lookup ends with (`api.example.com (DNS lookup)`).
_LOOKUP_SUFFIX = f" ({Reach.LOOKUP.value})"


class Connection(NamedTuple):
    """One use of the network as the guard saw it."""

    #: the address connected or sent to; for a lookup or a gRPC target, the name itself
    address: str
    #: 0 for a lookup made without a port
    port: int
    #: the name `address` was really resolved from, when the guard saw that resolution
    name: str | None
    #: the module that opened it, and the first caller outside that library
    opener: str
    caller: str | None
    reach: Reach = Reach.CONNECTION

    @property
    def label(self) -> str:
        """`api.example.com:443`, `8.8.8.8:53 (UDP)`, `api.example.com (DNS lookup)`."""
        host = self.name or self.address
        if ":" in host:
            host = f"[{host}]"  # an IPv6 address
        if self.reach is Reach.LOOKUP:
            return f"{host}{_LOOKUP_SUFFIX}"
        where = f"{host}:{self.port}"
        if self.reach is Reach.DATAGRAM:
            return f"{where} (UDP)"
        if self.reach is Reach.GRPC:
            return f"{where} (gRPC)"
        return where


class Connections:
    def __init__(self, config: Config, tests: Tests) -> None:
        self.rules = NetworkRules(config.block_network, config.allowed_hosts, config.passthrough)
        self.tests = tests
        #: label → openers, of network use in the recording modes that nothing recorded
        self.unrecorded: dict[str, set[str]] = {}

    def check(self, test_id: str | None, connection: Connection) -> NetworkBlocked | None:
        """The failure to raise for this connection, or None to let it through."""
        mode = self.tests.mode_for(test_id)
        if mode is Mode.LIVE or test_id is None:
            return None
        if mode is not Mode.REPLAY:
            # listed unless the user allowed it on purpose: loopback too, since a local
            # server reached through a client no adapter covers records nothing either
            if not self._allowed(connection, explicitly=True):
                with self.tests.lock:
                    self.unrecorded.setdefault(connection.label, set()).add(
                        connection.opener.split(".", 1)[0]
                    )
            return None
        if self._allowed(connection, explicitly=False):
            return None  # loopback (by default), allowed hosts, passthrough
        failure = NetworkBlocked(blocked_report(test_id, connection), test_id=test_id)
        with self.tests.lock:
            self.tests.stats.missed += 1
            self.tests.state(test_id).misses.append(failure)
        return failure

    def _allowed(self, connection: Connection, *, explicitly: bool) -> bool:
        rules = self.rules
        if connection.reach is Reach.LOOKUP:  # a name: no port to it, nothing is sent there
            return rules.allows_name(connection.address)
        port, address, name = connection.port, connection.address, connection.name
        if explicitly:
            return rules.explicitly_allows(port, address, name)
        return rules.allows(port, address, name)

    def summary(self) -> str | None:
        """`2 connections were not recorded: api.example.com:443 from aiohttp, …`, or None.
        A DNS lookup is left out when a connection to the same name is listed."""
        if not self.unrecorded:
            return None
        hosts = {
            label.split(" (", 1)[0].rsplit(":", 1)[0]
            for label in self.unrecorded
            if not label.endswith(_LOOKUP_SUFFIX)
        }
        items = [
            f"{label} from {', '.join(sorted(openers))}"
            for label, openers in sorted(self.unrecorded.items())
            if not (label.endswith(_LOOKUP_SUFFIX) and label[: -len(_LOOKUP_SUFFIX)] in hosts)
        ]
        count = len(items)
        noun = "connection was" if count == 1 else "connections were"
        return f"{count} {noun} not recorded: {'; '.join(items)}"


def blocked_report(test_id: str, connection: Connection) -> str:
    reach = connection.reach
    if reach is Reach.LOOKUP:
        what = f"a DNS lookup of {connection.address}"
    else:
        where = f"{connection.label.split(' (', 1)[0]}"
        if connection.name is not None:
            where += f" ({connection.address})"
        what = f"a {reach.value} to {where}"
    caller = f" at {connection.caller}" if connection.caller else ""
    allow = connection.name or connection.address
    return "\n".join(
        [
            f"hashreplay: blocked {what} in replay mode",
            f"  test:      {test_id}",
            f"  opened by: {connection.opener}{caller}",
            "  no adapter handled it: the library that opened it is not intercepted by "
            "hashreplay, so nothing is recorded for it and replay cannot answer it",
            f'  to allow it: add "{allow}" to allowed_hosts (or its URL to passthrough) in '
            '[tool.hashreplay], or set block_network = "off"',
        ]
    )


class Placeholders:
    def __init__(self, config: Config, environ: MutableMapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.values = replay_env_values(config.replay_env)
        #: the variables that get a placeholder in an empty environment: when each is set,
        #: there is nothing to do (one lookup each, the whole per-test cost)
        self._usual = tuple(missing(self.values, {}))
        self._set: dict[str, str] = {}
        self._lock = threading.Lock()

    def apply(self, mode: Mode) -> None:
        """Placeholders on in replay mode, off in every other mode."""
        if mode is Mode.REPLAY:
            self._add()
        else:
            self.remove()

    def _add(self) -> None:
        # after each test of a replay run: the watched variables themselves are looked at,
        # since a test may delete one and set another (the environment's size cannot tell)
        get = self.environ.get
        for name in self._usual:
            if not get(name):
                break
        else:
            return
        with self._lock:
            for name, value in missing(self.values, self.environ).items():
                self.environ[name] = value
                self._set[name] = value

    def remove(self) -> None:
        """Take away every placeholder this object set (and that nobody changed since)."""
        with self._lock:
            for name, value in self._set.items():
                if self.environ.get(name) == value:
                    del self.environ[name]
            self._set.clear()

    @property
    def active(self) -> dict[str, str]:
        return dict(self._set)
