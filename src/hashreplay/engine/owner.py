"""One owner per test (docs/design.md §10): `TestRecordings` holds everything the engine
knows of one test's recordings, behind its own lock, and is the only place that answers
"what does this request get next?" for that test (the role vcrpy's `Cassette` plays).

It holds the test's mode and run id; its sequences per key (`RecordedSequence`: the recorded
exchanges of one key, consumed in order); the ids it received (the id map its next requests
are keyed with); its scenario and matching options (the markers' `TestOptions`, with the
faults' and fault headers' counters) resolved over the configuration's `Defaults`; the
stale responses it used; its exchanges for the fixture's `calls`; the misses that fail it;
whether it passed requests through to a server under test.

`Owners` is the session's registry of them by test id (None: requests outside any test),
with the least recently used bound long-lived servers need (`touch`), and the run's
counters (`Stats`) and files used per test (`usage`, for `hashreplay prune`). Its lock
guards its dict only; the counters have their own; every test's state is behind its owner's.

Adapters call in from threads and event loops at once: each method takes the owner's lock
for what it reads or changes, and never calls out of this module while holding it except
into the store view (reads) and the stage function a recorder hands `record_next`.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from hashreplay.core.age import MaxAge, StaleUse, stale_age
from hashreplay.core.constants import FAULT_HEADER
from hashreplay.core.errors import ReplayFailure
from hashreplay.core.format import EndState, RecordedResponse, is_no_response
from hashreplay.core.matching import Repeat
from hashreplay.core.modes import Mode, Pace, Stale, Unconsumed
from hashreplay.core.network import NetworkRules
from hashreplay.core.normalise import IdRegistry, new_id_registry
from hashreplay.engine.faults import FaultSpec, TestOptions
from hashreplay.engine.http import IncomingRequest
from hashreplay.engine.keys import Prepared, check_name
from hashreplay.engine.scenarios import fault_for
from hashreplay.engine.state import StoreView
from hashreplay.engine.unconsumed import Unused

_T = TypeVar("_T")

#: The UTC day it is (`core.age.today`, injectable).
Today = Callable[[], datetime.date]


class Stats:
    __slots__ = (
        "missed",
        "not_recorded",
        "passed_through",
        "recorded",
        "replayed",
        "server_missed",
    )

    def __init__(
        self,
        replayed: int = 0,
        recorded: int = 0,
        missed: int = 0,
        passed_through: int = 0,
        not_recorded: int = 0,
        *,
        server_missed: int = 0,
    ) -> None:
        self.replayed = replayed
        self.recorded = recorded
        self.missed = missed
        self.passed_through = passed_through
        #: calls of a recording mode that got no HTTP response, so wrote nothing
        #: (docs/design.md, "Only answers are recorded")
        self.not_recorded = not_recorded
        #: misses a server under test had in its own upstream calls for this run's requests
        #: (`X-HashReplay-Server-Misses` on its answers to passthrough requests)
        self.server_missed = server_missed

    def merge(self, other: Stats) -> None:
        self.replayed += other.replayed
        self.recorded += other.recorded
        self.missed += other.missed
        self.passed_through += other.passed_through
        self.not_recorded += other.not_recorded
        self.server_missed += other.server_missed

    def as_dict(self) -> dict[str, int]:
        return {
            "replayed": self.replayed,
            "recorded": self.recorded,
            "missed": self.missed,
            "passed_through": self.passed_through,
            "not_recorded": self.not_recorded,
            "server_missed": self.server_missed,
        }


class RecordedSequence:
    """The recorded exchanges of one key within one test run, in order, with the file's id
    registry; `calls` is how many the test consumed (the next one is `responses[calls]`)."""

    __slots__ = ("calls", "ids", "match", "path", "previous", "responses")

    def __init__(
        self,
        responses: list[RecordedResponse],
        ids: IdRegistry,
        path: Path,
        match: dict[str, Any] | None = None,
    ) -> None:
        self.responses = responses
        self.ids = ids
        self.path = path
        self.calls = 0
        #: record mode: the responses the file held before (their days), read on first use
        self.previous: list[RecordedResponse] | None = None
        #: the file's matching rule (docs/design.md §14), written with it; None: the default
        self.match = match


class Recorded(NamedTuple):
    """The next recorded exchange for a request, and its file."""

    response: RecordedResponse
    path: Path
    stale: StaleUse | None = None


class Call(NamedTuple):
    """One exchange of a test, as the `hashreplay` fixture's `calls` lists it."""

    method: str
    endpoint: str
    #: the request body as keyed: parsed JSON when JSON, redacted and normalised
    body: object
    #: None: no HTTP status (a call-layer target, no response)
    status: int | None
    #: "replayed", "recorded" or "live"
    source: str


#: What `record_next`'s stage gets: the sequence, the index the new exchange takes, whether
#: it replaces a stored one there, and the test's id map (original → stable ids).
Stage = Callable[[RecordedSequence, int, bool, dict[str, str]], _T]


class Defaults(NamedTuple):
    """The configuration's settings that a test's markers may override (parsed once)."""

    mode: Mode = Mode.REPLAY
    pace: Pace = Pace()
    repeat: Repeat = Repeat.STRICT
    max_age: MaxAge | None = None
    stale: Stale = Stale.WARN
    unconsumed: Unconsumed = Unconsumed.WARN
    #: record-if-missing records again a stored call that got no response
    #: (`record_failures = "responses"`)
    answers_only: bool = True


class TestRecordings:
    """Everything the engine knows of one test's recordings (see the module docstring).

    An exchange is what one key's sequence holds per call, in recorded order: today one
    request and its response. A WebSocket connection or an MCP session is one exchange too
    (its frames or messages each way, in order, each with `after_sent`): it takes one entry
    of its key's sequence, and `next_recorded` / `record_next` serve and append it as they
    do a response, so repeats, ages, faults and unconsumed checks apply to it unchanged.
    """

    __test__ = False  # not a pytest test class
    __slots__ = (
        "calls",
        "connections",
        "defaults",
        "id_map",
        "lock",
        "misses",
        "mode",
        "options",
        "passed_through",
        "run_id",
        "sequences",
        "stale",
        "test_id",
    )

    def __init__(
        self,
        test_id: str | None,
        defaults: Defaults,
        mode: Mode | None = None,
        run_id: str | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.test_id = test_id
        self.defaults = defaults
        self.mode = mode
        #: identifies this execution of the test (sent to servers under test); made on
        #: first use: most tests never call a server
        self.run_id = run_id
        self.sequences: dict[str, RecordedSequence] = {}
        #: original → stable ids this test received (never written)
        self.id_map: dict[str, str] = {}
        self.misses: list[ReplayFailure] = []
        #: scenario and matching options (markers, fault headers)
        self.options = TestOptions()
        #: it sent requests to a server under test, which replays this test's files itself
        self.passed_through = False
        #: stale recorded responses it used, by file (the oldest of each)
        self.stale: dict[Path, StaleUse] = {}
        self.calls: list[Call] = []  # its exchanges in order (the fixture's `calls`)
        #: live WebSocket connections being recorded (`engine.frame_log.FrameLog`), written
        #: as abandoned at the test's end if their adapter never reported an end
        self.connections: list[Any] = []

    # --- mode, run and options --------------------------------------------------------

    def mode_or_default(self) -> Mode:
        return self.defaults.mode if self.mode is None else self.mode

    def made_run_id(self) -> str:
        with self.lock:
            if self.run_id is None:
                self.run_id = uuid.uuid4().hex
            return self.run_id

    def pace(self) -> Pace:
        return self.options.pace or self.defaults.pace

    def repeat(self) -> Repeat:
        repeat = self.options.repeat
        return self.defaults.repeat if repeat is None else repeat

    def stale_policy(self) -> Stale:
        return self.options.stale or self.defaults.stale

    def unconsumed(self) -> Unconsumed:
        return self.options.unconsumed or self.defaults.unconsumed

    def network(self) -> NetworkRules | None:
        """The test's own network guard rules (its marker's), or None: the run's."""
        return self.options.network

    def fault_for(self, request: IncomingRequest) -> FaultSpec | None:
        """The fault this request gets, if any (counted); a ConfigError for a malformed
        fault header."""
        options = self.options
        if not options.faults and request.header(FAULT_HEADER) is None:
            return None
        with self.lock:
            return fault_for(options, request)

    def recorded_first(self, fault: FaultSpec | None = None) -> list[str]:
        """Note (with `fault`) and list the faults that found nothing recorded to break in a
        recording mode, so the request was recorded whole (they apply from the next replay)."""
        with self.lock:
            noted = self.options.recorded_first
            if fault is not None and fault.describe() not in noted:
                noted.append(fault.describe())
            return list(noted)

    # --- sequences: the next recorded exchange of a key ---------------------------------

    def sequence(self, view: StoreView, prep: Prepared) -> RecordedSequence:
        """The sequence of `prep`'s key, read on first use. Record mode starts empty; a file
        that exists but cannot be used raises its RecordingError. After a miss, a recording
        under another matching rule of the test's directories answers, and identical
        requests under that rule share its sequence (docs/design.md §14)."""
        with self.lock:
            seq = self.sequences.get(prep.hash)
            if seq is not None:
                return seq
            record = prep.mode is Mode.RECORD
            found = None if record else view.read_first(prep.test_id, prep.hash)
            hash_hex, rule = prep.hash, prep.rule
            if found is None and not record:
                other = view.read_other_rule(prep)
                if other is not None:
                    hash_hex, rule, found = other
                    seq = self.sequences.get(hash_hex)
            own = rule.stored() if rule is not None else None
            if seq is None and found is None:
                path = view.store.path_for(prep.test_id, prep.hash)
                seq = RecordedSequence([], new_id_registry(prep.hash), path, own)
            elif seq is None and found is not None:
                path, recording = found
                check_name(path, recording, prep, rule)
                registry = new_id_registry(hash_hex, recording.id_normalization_mapping)
                seq = RecordedSequence(recording.responses, registry, path, own)
                self.sequences[hash_hex] = seq
            assert seq is not None
            self.sequences[prep.hash] = seq
            return seq

    def next_recorded(
        self, view: StoreView, prep: Prepared, today: Today, tally: Tally
    ) -> Recorded | None:
        """The next recorded exchange for `prep`'s key, consumed, or None: nothing recorded
        there (a miss, or a recording mode's cue to record it). `repeat = "last"` answers
        past the end of a sequence only where nothing may be recorded: a recording mode
        records the new call (appended), which then replays in order (docs/design.md §14)."""
        with self.lock:
            seq = self.sequences.get(prep.hash) or self.sequence(view, prep)
            index = seq.calls
            if index >= len(seq.responses):
                # a polling loop, or a client reconnecting to a server-push stream that ended
                again = self.repeat() is Repeat.LAST or prep.push
                if not seq.responses or prep.mode.may_record or not again:
                    return None
                index = len(seq.responses) - 1  # the last answer again
            response = seq.responses[index]
            if prep.mode is Mode.RECORD_IF_MISSING and self._record_again(prep, response):
                return None
            stale = self._stale(prep, response, seq.path, today)
            if stale is not None and self._refreshes(prep, stale):
                return None
            seq.calls += 1
        tally.replayed(self.test_id, seq.path)
        return Recorded(response, seq.path, stale)

    def next_model_list(
        self,
        prep: Prepared,
        *,
        merged: RecordedResponse,
        paths: Sequence[Path],
        newest: tuple[RecordedResponse, Path],
        today: Today,
        tally: Tally,
    ) -> Recorded | None:
        """A shared model list for `prep` (its files read by the caller): it ages like the
        test's own recording, dated by its newest file; None when it is refreshed."""
        with self.lock:
            stale = self._stale(prep, newest[0], newest[1], today)
            if stale is not None and self._refreshes(prep, stale):
                return None
        tally.replayed(self.test_id, *paths)
        return Recorded(merged, paths[0], stale)

    def _record_again(self, prep: Prepared, response: RecordedResponse) -> bool:
        """Whether record-if-missing treats a stored response as missing: one cut off when it
        was recorded, and (answers only) a call that got no response, which an older version
        stored (docs/design.md, "Only answers are recorded")."""
        if response.end_state is EndState.ABANDONED:
            return True
        return self.defaults.answers_only and is_no_response(prep.request, response)

    def _stale(
        self, prep: Prepared, response: RecordedResponse, path: Path, today: Today
    ) -> StaleUse | None:
        """How stale `response` is for this test (`core/age.py` decides), or None; the day
        is read only when an age limit applies."""
        max_age = self.options.max_age or self.defaults.max_age
        if max_age is None or response.recorded_on is None:
            return None
        age = stale_age(response.recorded_on, max_age, today())
        if age is None:
            return None
        return StaleUse(path, response.recorded_on, age, max_age, self.stale_policy())

    def _refreshes(self, prep: Prepared, stale: StaleUse) -> bool:
        """Whether a stale response is recorded again (`stale = "refresh"` in
        record-if-missing); else it is noted for the test's report (the oldest of each file)."""
        if stale.policy is Stale.REFRESH and prep.mode is Mode.RECORD_IF_MISSING:
            return True
        kept = self.stale.get(stale.path)
        if kept is None or abs(stale.age) > abs(kept.age):
            self.stale[stale.path] = stale
        return False

    def record_next(self, view: StoreView, prep: Prepared, stage: Stage[_T]) -> _T:
        """Record the next exchange of `prep`'s key: `stage` gets the sequence, the index
        the new exchange takes (record mode re-records from the first call; record-if-missing
        appends past the end, or replaces in place a response cut off when it was recorded),
        whether it replaces one, and the test's id map; it changes the sequence and returns
        what to write. Its stable ids are freed first, so an unchanged answer keeps them."""
        with self.lock:
            seq = self.sequence(view, prep)
            index = min(seq.calls, len(seq.responses))
            replaces = prep.mode is Mode.RECORD_IF_MISSING and index < len(seq.responses)
            if not replaces:
                del seq.responses[index:]
            else:
                free_ids(seq.ids, index)
            staged = stage(seq, index, replaces, self.id_map)
            seq.calls += 1
            self.id_map.update(seq.ids.stable)
            return staged

    def note_ids(
        self,
        view: StoreView,
        prep: Prepared,
        note: Callable[[IdRegistry, str, dict[str, str]], None],
    ) -> None:
        """While an MCP session is recorded (docs/design.md, "MCP servers"): `note` gets
        the registry of the file the session will be written to, where its frames will be
        (`response.frames`, or a later exchange's) and the test's id map, and registers the
        server-made ids of a message as it arrives, as staging will at the session's end
        (it then finds them registered). So a request the test makes before the session
        ends (an LLM call that quotes a tool's result) keys those ids as replay will."""
        with self.lock:
            seq = self.sequence(view, prep)
            note(seq.ids, frames_field(min(seq.calls, len(seq.responses))), self.id_map)
            self.id_map.update(seq.ids.stable)

    def drift_next(
        self, view: StoreView, prep: Prepared, live: RecordedResponse, tally: Tally
    ) -> tuple[RecordedResponse | None, Path, RecordedResponse]:
        """A drift run's live answer in place of the next recorded exchange of its key: the
        recorded one (None: not recorded), its file, and the live answer with its ids mapped
        to the recorded exchange's stable ids, exactly as recording it again would, so the
        test's next request is keyed as in replay (docs/design.md §15, "Drift")."""
        from hashreplay.core.normalise_response import normalise_response  # drift runs only

        with self.lock:
            seq = self.sequence(view, prep._replace(mode=Mode.REPLAY))
            index = seq.calls
            seq.calls += 1
            recorded = seq.responses[index] if index < len(seq.responses) else None
            if recorded is not None:
                free_ids(seq.ids, index)
            where = response_field(index)
            mapped = normalise_response(
                live, seq.ids, where=where, known_ids=self.id_map, request=prep.request
            )
            self.id_map.update(seq.ids.stable)
        if recorded is not None:
            tally.used(self.test_id, seq.path)
        return recorded, seq.path, mapped

    def uncount_cut_off(self, hash_hex: str) -> None:
        """A response the client cut off does not count as a call of its sequence: the next
        identical request takes its place (docs/design.md §12)."""
        with self.lock:
            seq = self.sequences.get(hash_hex)
            if seq is not None and seq.calls > 0:
                seq.calls -= 1

    def recorded_count(self, hash_hex: str) -> int:
        with self.lock:
            seq = self.sequences.get(hash_hex)
            return len(seq.responses) if seq else 0

    def sequence_path(self, hash_hex: str) -> Path | None:
        with self.lock:
            seq = self.sequences.get(hash_hex)
            return None if seq is None else seq.path

    def ids(self) -> dict[str, str] | None:
        """A copy of the ids this test received, or None (what its requests are keyed with)."""
        id_map = self.id_map
        if not id_map:
            return None
        with self.lock:
            return dict(id_map)

    # --- what the test saw --------------------------------------------------------------

    def note_call(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def set_status(self, noted: Call, status: int) -> Call | None:
        """`noted`, the last entry that is it, with its live status; None when not listed."""
        with self.lock:
            calls = self.calls
            for index in range(len(calls) - 1, -1, -1):
                if calls[index] is noted:
                    calls[index] = noted._replace(status=status)
                    return calls[index]
        return None

    def calls_so_far(self) -> list[Call]:
        with self.lock:
            return list(self.calls)

    def fail(self, failure: ReplayFailure) -> None:
        """Note a failure of this test (a miss, a blocked connection, a refused body)."""
        with self.lock:
            self.misses.append(failure)

    def opened(self, connection: object) -> None:
        with self.lock:
            self.connections.append(connection)

    def ended(self, connection: object) -> bool:
        """Forget an open connection; whether it was open."""
        with self.lock:
            try:
                self.connections.remove(connection)
            except ValueError:
                return False
            return True

    def take_open(self) -> list[Any]:
        with self.lock:
            open_, self.connections = self.connections, []
            return open_

    def take_misses(self) -> list[ReplayFailure]:
        with self.lock:
            misses, self.misses = self.misses, []
            return misses

    def stale_used(self) -> tuple[Stale, list[StaleUse]]:
        """Its `stale` policy and the stale responses it used (the oldest of each file,
        oldest first)."""
        with self.lock:
            used = sorted(self.stale.values(), key=lambda u: (-abs(u.age), str(u.path)))
            return self.stale_policy(), used

    def take_stale(self) -> list[StaleUse]:
        """The stale responses used since the last call (each once; a "fail" failed its
        request instead), oldest first."""
        with self.lock:
            used, self.stale = list(self.stale.values()), {}
        used = [u for u in used if u.policy is not Stale.FAIL]
        return sorted(used, key=lambda u: (-abs(u.age), str(u.path)))

    def mark_passed_through(self) -> None:
        self.passed_through = True

    def unused(self, files: list[tuple[str, int]]) -> list[Unused]:
        """What the test left unused, given the files recorded for it. A test that passed
        requests through to a server under test gets no `files`: the server replays those."""
        found: list[Unused] = []
        # both kinds of path are the store's own (a resolved directory joined with a file
        # name), so they compare as strings: no `resolve()`, no `Path` per file and test
        seen: set[str] = set()
        with self.lock:
            for seq in self.sequences.values():
                path = str(seq.path)
                if path in seen:  # one sequence under two hashes (another matching rule)
                    continue
                seen.add(path)
                if seq.calls < len(seq.responses):
                    left = len(seq.responses) - seq.calls
                    found.append(Unused(seq.path, left, len(seq.responses)))
        for file, count in files:
            if file not in seen:
                found.append(Unused(Path(file), count, count))
        return found


def response_field(index: int) -> str:
    """Where the `index`-th exchange of a file keeps its body (ids' facts name it)."""
    return "response.body" if index == 0 else f"later_responses[{index - 1}].body"


def frames_field(index: int) -> str:
    """Where the `index`-th exchange of a file keeps a WebSocket connection's frames."""
    return "response.frames" if index == 0 else f"later_responses[{index - 1}].frames"


def free_ids(ids: IdRegistry, index: int) -> None:
    """Forget the stable ids the `index`-th exchange's fields held, so the answer that
    takes its place gets them again (fields like `response.body.id`,
    `response.frames[3].data.event_id`, and ids handed out in its headers,
    `response.headers.mcp-session-id`)."""
    where, frames = response_field(index), frames_field(index)
    inside = (
        where,
        f"{where}.",
        f"{where}[",
        f"{frames}[",
        f"{where.removesuffix('.body')}.headers.",
    )
    for stable in [k for k, v in ids.facts.items() if v.startswith(inside)]:
        del ids.facts[stable]


class Tally:
    """The run's counters and the files each test id used (for `hashreplay prune`), with
    their own lock: every owner adds to them."""

    __slots__ = ("_lock", "stats", "usage")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stats = Stats()
        #: kept as path strings for the whole run: a `Path` would keep two objects per file
        #: in every full garbage collection of the process
        self.usage: dict[str | None, set[str]] = {}

    def replayed(self, test_id: str | None, *paths: Path) -> None:
        with self._lock:
            self.stats.replayed += 1
            self.usage.setdefault(test_id, set()).update(map(str, paths))

    def recorded(self, test_id: str | None, *paths: Path) -> None:
        with self._lock:
            self.stats.recorded += 1
            self.usage.setdefault(test_id, set()).update(map(str, paths))

    def not_recorded(self, test_id: str | None, *paths: Path) -> None:
        with self._lock:
            self.stats.not_recorded += 1
            self.usage.setdefault(test_id, set()).update(map(str, paths))

    def used(self, test_id: str | None, *paths: Path) -> None:
        with self._lock:
            self.usage.setdefault(test_id, set()).update(map(str, paths))

    def missed(self) -> None:
        with self._lock:
            self.stats.missed += 1

    def passed_through(self) -> None:
        with self._lock:
            self.stats.passed_through += 1

    def server_missed(self, count: int) -> None:
        """Misses a server under test reported on its answer to a passthrough request."""
        with self._lock:
            self.stats.server_missed += count

    def not_written(self) -> None:
        """A staged recording whose write failed is not counted."""
        with self._lock:
            self.stats.recorded = max(0, self.stats.recorded - 1)

    def forget(self, test_ids: Sequence[str | None], keep: int, live: set[str | None]) -> None:
        """Drop the files noted for `test_ids`, and beyond `keep` entries those of tests
        with no owner (`live`: the ids that have one)."""
        with self._lock:
            for test_id in test_ids:
                self.usage.pop(test_id, None)
            if len(self.usage) > keep:
                excess = len(self.usage) - keep
                for gone in [t for t in self.usage if t not in live][:excess]:
                    del self.usage[gone]


class Owners:
    """Every test's owner, by test id (None: requests outside any test)."""

    def __init__(self, defaults: Defaults) -> None:
        self.defaults = defaults
        self.tally = Tally()
        self._lock = threading.Lock()  # the dict only: each owner guards its own state
        self._owners: dict[str | None, TestRecordings] = {}

    def begin(self, test_id: str | None, mode: Mode | None = None) -> TestRecordings:
        """A test starts afresh."""
        owner = TestRecordings(test_id, self.defaults, mode)
        with self._lock:
            self._owners[test_id] = owner
        return owner

    def get(self, test_id: str | None) -> TestRecordings | None:
        return self._owners.get(test_id)

    def owner(self, test_id: str | None) -> TestRecordings:
        """The owner of a test, made on first use."""
        owner = self._owners.get(test_id)
        if owner is None:
            with self._lock:
                owner = self._owners.get(test_id)
                if owner is None:
                    owner = self._owners[test_id] = TestRecordings(test_id, self.defaults)
        return owner

    def mode_for(self, test_id: str | None) -> Mode:
        owner = self._owners.get(test_id)
        if owner is not None and owner.mode is not None:
            return owner.mode
        return self.defaults.mode

    def enter_run(self, test_id: str | None, run_id: str | None) -> None:
        """A new run id of a test starts it afresh (its sequences' counters and id map), as
        `begin` does in-process."""
        if run_id is None:
            return
        with self._lock:
            owner = self._owners.get(test_id)
            if owner is None or owner.run_id != run_id:
                self._owners[test_id] = TestRecordings(test_id, self.defaults, run_id=run_id)

    def end(self, test_id: str | None) -> TestRecordings | None:
        """Forget a test's owner; returns it (its misses fail the test)."""
        with self._lock:
            return self._owners.pop(test_id, None)

    def touch(self, test_id: str | None, limit: int) -> int:
        """For long-lived servers, which never see a test end: mark `test_id` as just used
        and forget the least recently used owners beyond `limit` (with the files noted for
        them); returns how many were forgotten. A test that comes back after that starts
        again from its first recorded response, as a new run does."""
        gone: list[str | None] = []
        with self._lock:
            owners = self._owners
            owner = owners.pop(test_id, None)
            if owner is not None:
                owners[test_id] = owner  # dicts keep insertion order: the end is the newest
            while len(owners) > limit:
                oldest = next(iter(owners))
                if oldest == test_id:
                    break
                del owners[oldest]
                gone.append(oldest)
            live = set(owners)
        self.tally.forget(gone, limit, live)
        return len(gone)

    def __len__(self) -> int:
        return len(self._owners)

    def __contains__(self, test_id: object) -> bool:
        return test_id in self._owners
